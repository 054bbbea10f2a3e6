package cli

import (
	"testing"
)

// TestExplainClaim: kubectl dra explain -f FILE claim/NAME gives the same
// explanation as simulate --explain for a pending claim, and says where an
// allocated claim is.
func TestExplainClaim(t *testing.T) {
	files := []string{"-f", "testdata/explain/base.yaml", "-f", "testdata/explain/allocated.yaml"}
	code, table, stderr := run(t, "", nil, append([]string{"explain", "claim/one"}, files...)...)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	_, want, _ := run(t, "", nil, append([]string{"simulate", "--explain"}, files...)...)
	if table != want {
		t.Errorf("explain claim/one differs from simulate --explain:\n%s\n---\n%s", table, want)
	}
	code, js, stderr := run(t, "", nil, append([]string{"explain", "claim/team-a", "-n", "ml", "-o", "json"}, files...)...)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var out ExplainOutput
	if err := unmarshalOutput("json", js, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Explanations) != 1 || !out.Explanations[0].Fits {
		t.Fatalf("allocated claim: %s", js)
	}
	containsAll(t, "verdict", out.Explanations[0].Verdict, "allocated", "gpu.example.com/node-1/gpu-0", "gpu.example.com/node-1/gpu-1")
}

func TestExplainClaimUsage(t *testing.T) {
	for _, args := range [][]string{
		{"explain", "-f", "testdata/explain/base.yaml"},
		{"explain", "-f", "testdata/explain/base.yaml", "node/x"},
		{"explain", "-f", "testdata/explain/base.yaml", "claim/missing"},
		{"explain", "-f", "testdata/explain/base.yaml", "pod/x", "--kubeconfig", "k"},
		{"explain", "-f", "testdata/explain/base.yaml", "claim/one", "--context", "c"},
	} {
		if code, _, _ := run(t, "", nil, args...); code != ExitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, ExitUsage)
		}
	}
}
