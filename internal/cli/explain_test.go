package cli

import (
	"os"
	"strings"
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
		{"explain", "-f", "testdata/explain/base.yaml", "pod/x", "--kubeconfig", "k"},
		{"explain", "-f", "testdata/explain/base.yaml", "claim/one", "--context", "c"},
	} {
		if code, _, _ := run(t, "", nil, args...); code != ExitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, ExitUsage)
		}
	}
}

// TestExplainClaimNotInFiles: a claim that is not in the files is an
// object that does not exist, as live: exit 1 with a message naming it, no
// usage text; docs/cli-explain.md and the help text say so.
func TestExplainClaimNotInFiles(t *testing.T) {
	code, stdout, stderr := run(t, "", nil, "explain", "-f", "testdata/explain/base.yaml", "claim/missing", "-n", "ml")
	if code != ExitInvalidInput {
		t.Errorf("exit %d, want %d", code, ExitInvalidInput)
	}
	if want := "error: claim ml/missing is not in the files\n"; stderr != want || stdout != "" {
		t.Errorf("stdout %q, stderr %q; want only %q on stderr", stdout, stderr, want)
	}
	// The contract, in the docs and the help text alike.
	const rule = "1 input that cannot be read or decoded, a cluster that cannot be read, or a claim or pod that is not in the files or the cluster (the message names it), 2 usage error"
	docs, err := os.ReadFile("../../docs/cli-explain.md")
	if err != nil {
		t.Fatal(err)
	}
	for what, text := range map[string]string{"docs/cli-explain.md": string(docs), "explain --help": explainSynopsis} {
		if !strings.Contains(strings.Join(strings.Fields(text), " "), rule) {
			t.Errorf("%s does not state the exit codes as %q", what, rule)
		}
	}
}
