package explain

import (
	"context"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator/native"
)

// TestNodeFilter: nodes a pod's filters rule out are never the answer.
// With the node the claim would go to ruled out, the claim goes elsewhere
// or does not fit; with every node ruled out, the verdict says the filters
// are the obstacle.
func TestNodeFilter(t *testing.T) {
	ctx := context.Background()
	in, claim := benchCluster()
	in.Nodes, in.Slices, in.Allocated = in.Nodes[:4], in.Slices[:4], nil
	claims := []*resourceapi.ResourceClaim{claim}
	e := native.New()

	plain, err := Explain(ctx, e, in, claims, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !plain.Fits || plain.Node != "node-000" {
		t.Fatalf("without filters: fits %v on %q (%s); want node-000", plain.Fits, plain.Node, plain.Verdict)
	}

	// node-000 cordoned: node-002 has 80Gi GPUs too.
	rep, err := Explain(ctx, e, in, claims, Options{NodeFilter: map[string]string{"node-000": "node(s) were unschedulable"}, NodesTotal: 4})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Fits || rep.Node != "node-002" || len(rep.NodeFilters) != 1 || rep.NodeFilters[0].Node != "node-000" {
		t.Errorf("node-000 filtered: fits %v on %q, filters %v (%s); want node-002", rep.Fits, rep.Node, rep.NodeFilters, rep.Verdict)
	}

	// Both 80Gi nodes out: the closest miss is on a 40Gi node, and the
	// verdict names the filters too.
	rep, err = Explain(ctx, e, in, claims, Options{NodeFilter: map[string]string{
		"node-000": "node(s) were unschedulable", "node-002": "Insufficient cpu",
	}, NodesTotal: 4})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"selector 1", "node filters: 2/4 nodes are available: 1 Insufficient cpu, 1 node(s) were unschedulable."} {
		if rep.Fits || !strings.Contains(rep.Verdict, want) {
			t.Errorf("80Gi nodes filtered: fits %v, verdict %q; want %q in it", rep.Fits, rep.Verdict, want)
		}
	}
	for _, g := range rep.Groups {
		for _, n := range g.Nodes {
			if n == "node-000" || n == "node-002" {
				t.Errorf("filtered node %s explained in group %v", n, g.Nodes)
			}
		}
	}

	// Every node out.
	all := map[string]string{}
	for _, n := range in.Nodes {
		all[n.Name] = "node(s) didn't match Pod's node affinity/selector"
	}
	rep, err = Explain(ctx, e, in, claims, Options{NodeFilter: all, NodesTotal: 4})
	if err != nil {
		t.Fatal(err)
	}
	want := "no node passes the pod's node filters: 0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector."
	if rep.Fits || rep.Verdict != want || len(rep.Groups) != 0 {
		t.Errorf("all filtered: fits %v, %d groups, verdict %q; want %q", rep.Fits, len(rep.Groups), rep.Verdict, want)
	}
}

// TestHoldersNamed: claims read from the API server have UIDs, and the
// verdict names their holders by namespace/name, not by UID.
func TestHoldersNamed(t *testing.T) {
	in, claim := benchCluster()
	in.Nodes, in.Slices, in.Allocated = in.Nodes[:1], in.Slices[:1], in.Allocated[:1]
	rep, err := Explain(context.Background(), nil, in, []*resourceapi.ResourceClaim{claim}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "allocated to team-a/job-node-000; 5 needed"; rep.Fits || !strings.Contains(rep.Verdict, want) {
		t.Errorf("fits %v, verdict %q; want %q in it", rep.Fits, rep.Verdict, want)
	}
}

// With Options.Namespace, claims of other namespaces are counted, never
// named: the operator's Events go to one tenant.
func TestHoldersOfOtherNamespacesCounted(t *testing.T) {
	in, claim := benchCluster()
	in.Nodes, in.Slices, in.Allocated = in.Nodes[:1], in.Slices[:1], in.Allocated[:1]
	for _, tc := range []struct {
		namespace string
		want      string
		not       string
	}{
		{namespace: "team-a", want: "allocated to team-a/job-node-000"},
		{namespace: "team-b", want: "allocated to 1 claim of another namespace", not: "team-a"},
	} {
		rep, err := Explain(context.Background(), nil, in, []*resourceapi.ResourceClaim{claim}, Options{Namespace: tc.namespace})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(rep.Verdict, tc.want) || (tc.not != "" && strings.Contains(rep.Verdict, tc.not)) {
			t.Errorf("namespace %s: verdict %q; want %q, and not %q", tc.namespace, rep.Verdict, tc.want, tc.not)
		}
	}
}
