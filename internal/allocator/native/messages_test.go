package native

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

// TestMessages: an unsatisfiable claim says why in terms a user can act
// on: which pools were left out and why (DevicePool health and reason
// code), how many nodes were really examined, and when a constraint's
// attribute is missing rather than short of devices.
func TestMessages(t *testing.T) {
	invalid := migNode()
	invalid[0].Spec.Devices[0].ConsumesCounters[0].CounterSet = "nope"
	incomplete := migNode()[:1]
	// A good node n2 next to the broken pool of n1.
	withGood := append(migNode()[:1:1], nodeSlice("n2", dev("gpu-0")))
	withGood[0].Spec.Devices[0].ConsumesCounters[0].CounterSet = "nope"
	const missing = drv + "/nosuch"
	runCases(t, []testCase{
		{name: "an invalid pool is named with its reason code", slices: invalid,
			claim: claim("c", req("r", 1)), opts: allocator.Options{Node: "n1"}, wantErr: allocator.ErrUnsatisfiable,
			wantMsg: "pools not used because they are incomplete or invalid: gpu.example.com/n1 (Invalid, MissingCounterSet)"},
		{name: "an incomplete pool is named with its slice count", slices: incomplete,
			claim: claim("c", req("r", 1)), nodes: []*corev1.Node{node("n1", nil)}, wantErr: allocator.ErrUnsatisfiable,
			wantMsg: "gpu.example.com/n1 (Incomplete, IncompletePool: 1 of 2 slices)"},
		{name: "a bad pool not visible from the node is not named", slices: withGood,
			claim: claim("c", req("r", 2)), opts: allocator.Options{Node: "n2"}, wantErr: allocator.ErrUnsatisfiable,
			wantMsg: "on node n2: request r: 1 matching devices available, 2 needed"},
		{name: "a node short of devices counts as examined", slices: threeGPUs(), nodes: []*corev1.Node{node("n1", nil)},
			claim: claim("c", req("r", 4)), wantErr: allocator.ErrUnsatisfiable,
			wantMsg: "(1 of 1 nodes examined: 1 short of matching devices; first: node n1: request r: 3 matching devices available, 4 needed)"},
		{name: "a node searched counts as examined", slices: numaNode(), nodes: []*corev1.Node{node("n1", nil)},
			claim: withConstraints(claim("c", req("gpu", 3, kind("gpu"))), match(drv+"/numa")), wantErr: allocator.ErrUnsatisfiable,
			wantMsg: "(1 of 1 nodes examined: 1 searched; first: node n1: request gpu: no value of gpu.example.com/numa is shared by enough devices)"},
		{name: "matchAttribute on an attribute no device has", slices: threeGPUs(),
			claim: withConstraints(claim("c", req("r", 1)), match(missing)), wantErr: allocator.ErrUnsatisfiable,
			wantMsg: "request r: constraint matchAttribute gpu.example.com/nosuch: none of the 3 matching devices has that attribute"},
		{name: "matchAttribute on an attribute a later request's devices lack", slices: numaNode(),
			claim:   withConstraints(claim("c", req("gpu", 1, kind("gpu")), req("cpu", 1, kind("cpu"))), match(drv+"/numa")),
			wantErr: allocator.ErrUnsatisfiable,
			wantMsg: "request cpu: constraint matchAttribute gpu.example.com/numa: none of the 1 matching devices has that attribute"},
		{name: "distinctAttribute on an attribute no device has", slices: threeGPUs(),
			claim: withConstraints(claim("c", req("r", 2)), distinct(missing)), wantErr: allocator.ErrUnsatisfiable,
			wantMsg: "request r: constraint distinctAttribute gpu.example.com/nosuch: none of the 3 matching devices has that attribute"},
		{name: "a shortage of values still reads as one", slices: threeGPUs(),
			claim: withConstraints(claim("c", req("r", 3)), distinct(drv+"/model")), wantErr: allocator.ErrUnsatisfiable,
			wantMsg: "request r: fewer than 3 different values of gpu.example.com/model"},
	})
}

// TestBadPoolReason covers the reason chosen when a pool has several
// problems: the first error in the order DevicePools list them.
func TestBadPoolReason(t *testing.T) {
	sl := migNode()
	sl[0].Spec.Devices[0].ConsumesCounters[0].CounterSet = "nope"
	sl[0].Spec.Devices = append(sl[0].Spec.Devices, sl[0].Spec.Devices[1])
	s := newTestSession(t, allocator.Inputs{Slices: sl})
	if len(s.badPools) != 1 {
		t.Fatalf("%d bad pools, want 1", len(s.badPools))
	}
	if got, want := s.badPools[0].why, "Invalid, DuplicateDeviceName"; got != want {
		t.Errorf("reason %q, want %q", got, want)
	}
	if got := s.skippedPools(-1); got != "" {
		t.Errorf("pool of node n1 named without a node: %q", got)
	}
	sl[0].Spec.NodeName, sl[0].Spec.AllNodes = nil, ptr.To(true)
	s = newTestSession(t, allocator.Inputs{Slices: sl})
	if got := s.skippedPools(-1); got == "" {
		t.Error("a pool for all nodes is not named")
	}
}

// TestMessageAfterAnEarlierClaim: a claim for which every node was passed
// over, because an earlier claim of the session found them without free
// matching devices, still gets the real cause (here the node's only pool
// is invalid), not only that an earlier claim took something.
func TestMessageAfterAnEarlierClaim(t *testing.T) {
	sl := migNode()
	sl[0].Spec.Devices[0].ConsumesCounters[0].CounterSet = "nope"
	s := newTestSession(t, allocator.Inputs{Slices: sl, Nodes: []*corev1.Node{node("n1", nil)}})
	for _, name := range []string{"first", "second"} {
		_, _, err := allocateOne(t, s, claim(name, req("r", 1)), allocator.Options{})
		if err == nil {
			t.Fatalf("claim %s allocated from an invalid pool", name)
		}
		checkError(t, err, allocator.ErrUnsatisfiable, "",
			"first: node n1: request r: 0 matching devices available, 1 needed; pools not used because they are incomplete or invalid: gpu.example.com/n1 (Invalid, MissingCounterSet)")
		if strings.Contains(err.Error(), "since an earlier claim") {
			t.Errorf("claim %s: %v: an earlier claim took nothing", name, err)
		}
	}
}
