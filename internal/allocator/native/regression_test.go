package native

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
)

// TestListMatchAfterBacktracking is the upstream bug where a list-valued
// matchAttribute kept the intersection of a rejected branch: after a {x,y},
// b1 {y} and a failed c, the intersection stayed {y}, so b2 {x} was wrongly
// refused and the claim looked unsatisfiable.
func TestListMatchAfterBacktracking(t *testing.T) {
	slices_ := []*resourceapi.ResourceSlice{nodeSlice("n1",
		dev("a", "role", "a", "roots", []string{"x", "y"}),
		dev("b1", "role", "b", "roots", []string{"y"}),
		dev("b2", "role", "b", "roots", []string{"x"}),
		dev("c", "role", "c", "roots", []string{"x"}),
	)}
	role := func(r string) string { return `device.attributes["gpu.example.com"].role == "` + r + `"` }
	runCases(t, []testCase{{
		name:   "b2 is found after b1 is rejected",
		slices: slices_,
		claim:  withConstraints(claim("c", req("a", 1, role("a")), req("b", 1, role("b")), req("c", 1, role("c"))), match(drv+"/roots")),
		want:   []string{"a=n1/a", "b=n1/b2", "c=n1/c"},
	}})
}

// TestCountersReleasedOnRejectedBranch is the upstream bug where counters
// consumed by a device on a branch that was then rejected stayed consumed.
// Here every branch that takes quarter-0 first fails on the constraint, and
// the only solution needs the counters those branches touched.
func TestCountersReleasedOnRejectedBranch(t *testing.T) {
	sl := migNode()
	// Each quarter has a side of its own, the halves share side b.
	sides := map[string]string{"quarter-0": "a", "quarter-1": "x", "quarter-2": "y", "quarter-3": "z"}
	for i := range sl[0].Spec.Devices {
		d := &sl[0].Spec.Devices[i]
		side, ok := sides[d.Name]
		if !ok {
			side = "b"
		}
		d.Attributes["side"] = attr(side)
	}
	notFull := `device.attributes["gpu.example.com"].profile != "full"`
	// The first request takes a quarter (smallest first) on every branch
	// until side b; those branches fail on the second request. The only
	// solution, both halves, needs every counter of the GPU.
	c := withConstraints(claim("c", req("r1", 1, notFull), req("r2", 1, notFull)), match(drv+"/side"))
	s := newTestSession(t, allocator.Inputs{Slices: sl})
	got, _, err := allocateOne(t, s, c, allocator.Options{})
	if err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	if want := []string{"r1=n1/half-0", "r2=n1/half-1"}; !slices.Equal(got, want) {
		t.Errorf("allocated %v, want %v", got, want)
	}
}

// TestAllocateLeavesNoTrace: Allocate alone changes nothing; the same claim
// gets the same devices until Record.
func TestAllocateLeavesNoTrace(t *testing.T) {
	s := newTestSession(t, allocator.Inputs{Slices: migNode()})
	fail := claim("fail", req("r", 3, profile("half")))
	if _, _, err := allocateOne(t, s, fail, allocator.Options{}); err == nil {
		t.Fatal("three halves allocated")
	}
	full := claim("full", req("r", 1, profile("full")))
	first, res, err := allocateOne(t, s, full, allocator.Options{})
	if err != nil {
		t.Fatalf("full GPU after a failed search: %v", err)
	}
	again, _, err := allocateOne(t, s, full, allocator.Options{})
	if err != nil || !slices.Equal(first, again) {
		t.Fatalf("second Allocate without Record = %v, %v; want %v", again, err, first)
	}
	for i, v := range s.remaining {
		if v < 0 {
			t.Errorf("counter %d negative after Allocate: %d", i, v)
		}
	}
	done := res.Claim.DeepCopy()
	done.Status.Allocation = res.Allocation
	if err := s.Record(done); err != nil {
		t.Fatal(err)
	}
	if _, _, err := allocateOne(t, s, claim("q", req("r", 1)), allocator.Options{}); err == nil {
		t.Error("a partition was allocated after the full GPU was recorded")
	}
}

// TestRecord checks that recorded claims take devices and counters, that
// recording twice changes nothing more and that unknown devices are ignored.
func TestRecord(t *testing.T) {
	s := newTestSession(t, allocator.Inputs{Slices: migNode()})
	half := allocatedClaim("h", false, "n1", "half-0", "other-pool", "gone")
	for range 2 {
		if err := s.Record(half); err != nil {
			t.Fatal(err)
		}
	}
	got, _, err := allocateOne(t, s, claim("c", req("r", 1, profile("half"))), allocator.Options{})
	if err != nil || !slices.Equal(got, []string{"r=n1/half-1"}) {
		t.Fatalf("after recording half-0 twice: %v, %v; want half-1", got, err)
	}
	if err := s.Record(claim("unallocated")); err != nil {
		t.Errorf("Record of an unallocated claim: %v", err)
	}
}

// TestSeveralClaims allocates the claims of one pod together or not at all.
func TestSeveralClaims(t *testing.T) {
	s := newTestSession(t, allocator.Inputs{Slices: threeGPUs()})
	a, b := claim("a", req("r", 2)), claim("b", req("r", 1))
	res, err := s.Allocate(context.Background(), []*resourceapi.ResourceClaim{a, b}, allocator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Claim != a || res[1].Claim != b {
		t.Fatalf("results not in claim order: %+v", res)
	}
	if g := append(picked(res[0]), picked(res[1])...); !slices.Equal(g, []string{"r=n1/gpu-0", "r=n1/gpu-1", "r=n1/gpu-2"}) {
		t.Errorf("devices %v", g)
	}
	_, err = s.Allocate(context.Background(), []*resourceapi.ResourceClaim{a, claim("c", req("r", 2))}, allocator.Options{})
	checkError(t, err, allocator.ErrUnsatisfiable, "", "")
}

// TestCentralSkipsEquivalentNodes: nodes without local devices that reach
// the same shared devices are searched once.
func TestCentralSkipsEquivalentNodes(t *testing.T) {
	// Two devices, but not two distinct roots: the search on the first node
	// fails, and the other nodes reach the same devices.
	shared := poolSlice("shared", "shared", 1, dev("d0", "root", "x"), dev("d1", "root", "x"))
	s := newTestSession(t, allocator.Inputs{Slices: []*resourceapi.ResourceSlice{shared}, Nodes: hosts("a", "b", "c", "d")})
	_, _, err := allocateOne(t, s, withConstraints(claim("c", req("r", 2)), distinct(drv+"/root")), allocator.Options{})
	checkError(t, err, allocator.ErrUnsatisfiable, "", "4 of 4 nodes examined: 1 searched, 3 like a node searched in vain")
}

func TestContextCancelled(t *testing.T) {
	s := newTestSession(t, allocator.Inputs{Slices: threeGPUs()})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Allocate(ctx, []*resourceapi.ResourceClaim{claim("c", req("r", 1))}, allocator.Options{}); err == nil {
		t.Error("Allocate with a cancelled context succeeded")
	}
}

// TestUnknownNodeIsNotACentralCandidate: allocating for a node that is not
// among the inputs must not make it a candidate for later central
// allocations (found by FuzzNative: an All request then got only the
// devices the unknown node reaches).
func TestUnknownNodeIsNotACentralCandidate(t *testing.T) {
	shared := poolSlice("fabric", "fabric", 1, dev("s"))
	s := newTestSession(t, allocator.Inputs{
		Slices: []*resourceapi.ResourceSlice{nodeSlice("n0", dev("a")), shared},
		Nodes:  []*corev1.Node{node("n0", nil)},
	})
	if _, _, err := allocateOne(t, s, claim("probe", req("r", 1)), allocator.Options{Node: "ghost"}); err != nil {
		t.Fatalf("allocation for an unknown node: %v", err)
	}
	got, res, err := allocateOne(t, s, claim("c", allMode(req("r", 0))), allocator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"r=fabric/s", "r=n0/a"}; !slices.Equal(got, want) || res.Node != "n0" {
		t.Errorf("central All: %v on %q, want %v on n0", got, res.Node, want)
	}
}

// TestCentralSkipsLookalikeNodes: once a search fails on a node, nodes
// whose candidates look the same (same contents in the same order) are not
// searched again; nodes whose candidates differ, or carry counters or
// taints (not part of what a device looks like), are.
func TestCentralSkipsLookalikeNodes(t *testing.T) {
	// Two devices with the same root cannot satisfy distinct roots.
	same := func(n string) *resourceapi.ResourceSlice {
		return nodeSlice(n, dev("a", "root", "x"), dev("b", "root", "x"))
	}
	tainted := func(n string) *resourceapi.ResourceSlice {
		return nodeSlice(n, tainted(dev("a", "root", "x"), "k", resourceapi.DeviceTaintEffectNone), dev("b", "root", "x"))
	}
	c := withConstraints(claim("c", req("r", 2)), distinct(drv+"/root"))
	tests := []struct {
		name   string
		slices []*resourceapi.ResourceSlice
		// wantMsg is in the unsatisfiable error; wantNode is where the
		// claim is allocated when wantMsg is empty.
		wantMsg, wantNode string
	}{
		{name: "lookalikes are searched once", slices: []*resourceapi.ResourceSlice{same("n0"), same("n1"), same("n2")}, wantMsg: "3 of 3 nodes examined: 1 searched, 2 like a node searched in vain"},
		{name: "a different node is searched", slices: []*resourceapi.ResourceSlice{same("n0"), nodeSlice("n1", dev("a", "root", "x"), dev("b", "root", "y")), same("n2")}, wantNode: "n1"},
		{name: "tainted devices are always searched", slices: []*resourceapi.ResourceSlice{tainted("n0"), tainted("n1"), tainted("n2")}, wantMsg: "3 of 3 nodes examined: 3 searched;"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestSession(t, allocator.Inputs{Slices: tc.slices, Nodes: hosts("n0", "n1", "n2")})
			_, res, err := allocateOne(t, s, c, allocator.Options{})
			if tc.wantMsg == "" {
				if err != nil || res.Node != tc.wantNode {
					t.Fatalf("got %v on %q, want an allocation on %s", err, res.Node, tc.wantNode)
				}
				return
			}
			checkError(t, err, allocator.ErrUnsatisfiable, "", tc.wantMsg)
		})
	}
}
