package native

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

func hostSelector(hosts ...string) *corev1.NodeSelector {
	return &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "host", Operator: corev1.NodeSelectorOpIn, Values: hosts}},
	}}}
}

// tpuPool is a central pool with per-device node selection: one device per
// host (nodeName), one spanning h0 and h1 (nodeSelector), one everywhere.
func tpuPool() *resourceapi.ResourceSlice {
	h0, h1 := dev("host-0", "kind", "host"), dev("host-1", "kind", "host")
	h0.NodeName, h1.NodeName = ptr.To("h0"), ptr.To("h1")
	pair := dev("pair-01", "kind", "pair")
	pair.NodeSelector = hostSelector("h0", "h1")
	pair2 := dev("pair-23", "kind", "pair")
	pair2.NodeSelector = hostSelector("h2", "h3")
	everywhere := dev("any", "kind", "any")
	everywhere.AllNodes = ptr.To(true)
	s := poolSlice("tpu", "tpu", 1, h0, h1, pair, pair2, everywhere)
	s.Spec.AllNodes, s.Spec.PerDeviceNodeSelection = nil, ptr.To(true)
	return s
}

func hosts(names ...string) []*corev1.Node {
	var out []*corev1.Node
	for _, n := range names {
		out = append(out, node(n, map[string]string{"host": n}))
	}
	return out
}

func wantNode(node string, sel *corev1.NodeSelector) func(t *testing.T, r allocator.Result) {
	return func(t *testing.T, r allocator.Result) {
		t.Helper()
		if r.Node != node {
			t.Errorf("Result.Node = %q, want %q", r.Node, node)
		}
		if !equality.Semantic.DeepEqual(r.Allocation.NodeSelector, sel) {
			t.Errorf("node selector = %v, want %v", r.Allocation.NodeSelector, sel)
		}
	}
}

func pinned(node string) *corev1.NodeSelector {
	return &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
	}}}
}

func TestNodes(t *testing.T) {
	twoNodes := []*resourceapi.ResourceSlice{nodeSlice("n1", dev("gpu-0")), nodeSlice("n2", dev("gpu-0"), dev("gpu-1"))}
	stale := nodeSlice("n1", dev("old"))
	fresh := nodeSlice("n1", dev("new"))
	fresh.Name, fresh.Spec.Pool.Generation = "n1-gen2", 2
	duplicate := nodeSlice("n1", dev("gpu-0"), dev("gpu-0"))
	labelled := poolSlice("rack", "rack", 1, dev("shared"))
	labelled.Spec.AllNodes, labelled.Spec.NodeSelector = nil, hostSelector("h1")
	kindIs := func(k string) string { return `device.attributes["gpu.example.com"].kind == "` + k + `"` }
	both := hostSelector("h0", "h1")

	runCases(t, []testCase{
		{name: "Options.Node restricts to that node", slices: twoNodes, opts: allocator.Options{Node: "n2"},
			claim: claim("c", req("r", 1)), want: []string{"r=n2/gpu-0"}, check: wantNode("n2", pinned("n2"))},
		{name: "Options.Node without room fails", slices: twoNodes, opts: allocator.Options{Node: "n1"},
			claim: claim("c", req("r", 2)), wantErr: allocator.ErrUnsatisfiable, wantMsg: "on node n1"},
		{name: "central allocation picks a node with room", slices: twoNodes, nodes: hosts("n1", "n2"),
			claim: claim("c", req("r", 2)), want: []string{"r=n2/gpu-0", "r=n2/gpu-1"}, check: wantNode("n2", pinned("n2"))},
		{name: "central allocation without Node objects uses the slices' nodes", slices: twoNodes,
			claim: claim("c", req("r", 2)), want: []string{"r=n2/gpu-0", "r=n2/gpu-1"}},
		{name: "central allocation skips nodes that are full", slices: twoNodes, nodes: hosts("n1", "n2"),
			allocated: []*resourceapi.ResourceClaim{allocatedClaim("old", false, "n1", "gpu-0")},
			claim:     claim("c", req("r", 1)), want: []string{"r=n2/gpu-0"}},
		{name: "allNodes device: no node, no selector", slices: []*resourceapi.ResourceSlice{tpuPool()}, nodes: hosts("h0", "h1"),
			claim: claim("c", req("r", 1, kindIs("any"))), want: []string{"r=tpu/any"}, check: wantNode("", nil)},
		{name: "per-device selector is the allocation's selector", slices: []*resourceapi.ResourceSlice{tpuPool()}, nodes: hosts("h0", "h1", "h2"),
			claim: claim("c", req("r", 1, kindIs("pair"))), want: []string{"r=tpu/pair-01"}, check: wantNode("", both)},
		{name: "a device a node cannot reach is not used", slices: []*resourceapi.ResourceSlice{tpuPool()}, opts: allocator.Options{Node: "h1"},
			nodes: []*corev1.Node{node("h1", map[string]string{"host": "h1"})},
			// pair-23 is not reachable from h1, so only pair-01 is.
			claim: claim("c", req("r", 2, kindIs("pair"))), wantErr: allocator.ErrUnsatisfiable},
		{name: "per-device nodeName pins the node", slices: []*resourceapi.ResourceSlice{tpuPool()}, nodes: hosts("h0", "h1"), opts: allocator.Options{Node: "h1"},
			claim: claim("c", req("r", 1, kindIs("host"))), want: []string{"r=tpu/host-1"}, check: wantNode("h1", pinned("h1"))},
		{name: "per-device selector not matching the node", slices: []*resourceapi.ResourceSlice{tpuPool()}, nodes: hosts("h2"), opts: allocator.Options{Node: "h2"},
			claim: claim("c", req("r", 1, kindIs("pair"))), want: []string{"r=tpu/pair-23"}},
		{name: "slice node selector uses node labels", slices: []*resourceapi.ResourceSlice{labelled}, nodes: hosts("h0", "h1"),
			claim: claim("c", req("r", 1)), want: []string{"r=rack/shared"}, check: wantNode("", hostSelector("h1"))},
		{name: "slice node selector not matching any node", slices: []*resourceapi.ResourceSlice{labelled}, nodes: hosts("h0", "h2"),
			claim: claim("c", req("r", 1)), wantErr: allocator.ErrUnsatisfiable},
		{name: "only the current generation counts", slices: []*resourceapi.ResourceSlice{stale, fresh},
			claim: claim("c", req("r", 1)), want: []string{"r=n1/new"}},
		{name: "invalid pool is skipped", slices: []*resourceapi.ResourceSlice{duplicate},
			claim: claim("c", req("r", 1)), wantErr: allocator.ErrUnsatisfiable},
	})
}

// TestMergedSelectors checks the selector of an allocation with devices
// behind two different node selectors (a node that both select).
func TestMergedSelectors(t *testing.T) {
	a, b := dev("a"), dev("b")
	a.NodeSelector = hostSelector("h0", "h1")
	b.NodeSelector = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "rack", Operator: corev1.NodeSelectorOpIn, Values: []string{"r1"}}},
	}}}
	s := poolSlice("p", "p", 1, a, b)
	s.Spec.AllNodes, s.Spec.PerDeviceNodeSelection = nil, ptr.To(true)
	want := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
		a.NodeSelector.NodeSelectorTerms[0].MatchExpressions[0], b.NodeSelector.NodeSelectorTerms[0].MatchExpressions[0]}}}}
	runCases(t, []testCase{{
		name: "requirements of both selectors in one term", slices: []*resourceapi.ResourceSlice{s},
		nodes: []*corev1.Node{node("h0", map[string]string{"host": "h0"}), node("h1", map[string]string{"host": "h1", "rack": "r1"})},
		claim: claim("c", req("r", 2)), want: []string{"r=p/a", "r=p/b"}, check: wantNode("", want),
	}})
}
