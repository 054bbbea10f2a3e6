package native

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
)

// allReq asks for all devices of the "gpu" class matching the selectors.
func allReq(name string, selectors ...string) resourceapi.DeviceRequest {
	return allMode(req(name, 0, selectors...))
}

func allSub(name string) resourceapi.DeviceSubRequest {
	s := subReq(name, 0)
	s.AllocationMode, s.Count = resourceapi.DeviceAllocationModeAll, 0
	return s
}

// incompleteSlice is the only slice written so far of a two-slice pool on node.
func incompleteSlice(node string) *resourceapi.ResourceSlice {
	s := nodeSlice(node, dev("late"))
	s.Name, s.Spec.Pool.Name, s.Spec.Pool.ResourceSliceCount = node+"-updating", node+"-updating", 2
	return s
}

// TestCentralAllocationTriesEveryDistinctNode: a central allocator may skip
// a node only when it is interchangeable with one already searched. Nodes
// that differ in what a request for All devices sees are not.
func TestCentralAllocationTriesEveryDistinctNode(t *testing.T) {
	shared := poolSlice("fabric", "fabric", 1, dev("s"))
	runCases(t, []testCase{{
		name:   "an incomplete pool keeps All off its node, not off the next one",
		slices: []*resourceapi.ResourceSlice{nodeSlice("n0", dev("a")), incompleteSlice("n0"), nodeSlice("n1", dev("b"))},
		nodes:  []*corev1.Node{node("n0", nil), node("n1", nil)},
		claim:  claim("c", allReq("r")),
		want:   []string{"r=n1/b"},
	}, {
		// n0 reaches the shared device and its own device, which is in use,
		// so All fails there; n1 and n2 reach only the shared device.
		name:      "a node whose local devices are all in use differs from a node without any",
		slices:    []*resourceapi.ResourceSlice{nodeSlice("n0", dev("a")), shared},
		nodes:     []*corev1.Node{node("n0", nil), node("n1", nil), node("n2", nil)},
		allocated: []*resourceapi.ResourceClaim{allocatedClaim("held", false, "n0", "a")},
		claim:     claim("c", allReq("r")),
		want:      []string{"r=fabric/s"},
		check: func(t *testing.T, r allocator.Result) {
			if r.Node != "" {
				t.Errorf("node %q, want none (only a shared device)", r.Node)
			}
		},
	}})
}

// TestKubeSchedulerRules are the places where the native engine gives the
// answer kube-scheduler gives although another allocation would exist
// (decisions documented in session.go, state.go and strict.go).
func TestKubeSchedulerRules(t *testing.T) {
	role := func(r string) string { return `device.attributes["gpu.example.com"].role == "` + r + `"` }
	rooted := func(name, r string, roots ...string) resourceapi.Device {
		return dev(name, "role", r, "root", roots)
	}
	mem := func(n string) map[string]string { return map[string]string{"mem": n} }
	counters := counterSlice("counters", "part", 2, "gpu-0", mem("4"))
	counters.Spec.SharedCounters = append(counters.Spec.SharedCounters, resourceapi.CounterSet{Name: "gpu-1", Counters: counters.Spec.SharedCounters[0].Counters})
	partitions := poolSlice("partitions", "part", 2,
		consumes(dev("p0a", "role", "p0"), "gpu-0", mem("4")),
		consumes(dev("p0b", "role", "p0"), "gpu-0", mem("4")),
		consumes(dev("p1", "role", "p1"), "gpu-1", mem("4")),
		dev("plain", "role", "plain"))
	// p0a and p0b were both allocated: gpu-0 is over-consumed (4 of 4 twice).
	overdrawn := []*resourceapi.ResourceClaim{allocatedClaim("x", false, "part", "p0a"), allocatedClaim("y", false, "part", "p0b")}

	runCases(t, []testCase{{
		name:    "All in an unchosen subrequest still keeps the claim off a node with an incomplete pool",
		slices:  []*resourceapi.ResourceSlice{nodeSlice("n0", dev("a")), incompleteSlice("n0")},
		nodes:   []*corev1.Node{node("n0", nil)},
		claim:   claim("c", firstAvailable("r", subReq("one", 1), allSub("all"))),
		opts:    allocator.Options{Node: "n0"},
		wantErr: allocator.ErrUnsatisfiable,
		wantMsg: "incomplete or invalid",
	}, {
		name:   "without All the incomplete pool is only skipped",
		slices: []*resourceapi.ResourceSlice{nodeSlice("n0", dev("a")), incompleteSlice("n0")},
		nodes:  []*corev1.Node{node("n0", nil)},
		claim:  claim("c", firstAvailable("r", subReq("one", 1), subReq("two", 2))),
		opts:   allocator.Options{Node: "n0"},
		want:   []string{"r/one=n0/a"},
	}, {
		// kube-scheduler tries a for r0, then c1 breaks the constraint in
		// the All request and it gives up, although b, c1, c2 would work.
		name: "an All device that breaks a constraint ends the search",
		slices: []*resourceapi.ResourceSlice{nodeSlice("n0",
			rooted("a", "a", "p0"), rooted("b", "a", "p1"), rooted("c1", "c", "p1"), rooted("c2", "c", "p1"))},
		nodes:   []*corev1.Node{node("n0", nil)},
		claim:   withConstraints(claim("c", req("r0", 1, role("a")), allReq("r1", role("c"))), match(drv+"/root")),
		wantErr: allocator.ErrUnsatisfiable,
		wantMsg: "breaks a claim constraint",
	}, {
		name: "the same claim with the All request first is allocated",
		slices: []*resourceapi.ResourceSlice{nodeSlice("n0",
			rooted("a", "a", "p0"), rooted("b", "a", "p1"), rooted("c1", "c", "p1"), rooted("c2", "c", "p1"))},
		nodes: []*corev1.Node{node("n0", nil)},
		claim: withConstraints(claim("c", allReq("r1", role("c")), req("r0", 1, role("a"))), match(drv+"/root")),
		want:  []string{"r0=n0/b", "r1=n0/c1", "r1=n0/c2"},
	}, {
		// An All device that is merely in use fails the branch only, so
		// the search goes on with b.
		name: "an All device in use only fails the branch",
		slices: []*resourceapi.ResourceSlice{nodeSlice("n0",
			rooted("a", "a", "p0", "p1"), rooted("b", "a", "p1"), rooted("c1", "c", "p1"))},
		nodes:     []*corev1.Node{node("n0", nil)},
		allocated: []*resourceapi.ResourceClaim{allocatedClaim("held", false, "n0", "c1")},
		claim:     withConstraints(claim("c", req("r0", 1, role("a")), allReq("r1", role("c"))), match(drv+"/root")),
		wantErr:   allocator.ErrUnsatisfiable,
		wantMsg:   "some cannot be allocated",
	}, {
		name:      "an over-consumed counter refuses every counter-consuming device of its pool",
		slices:    []*resourceapi.ResourceSlice{counters, partitions},
		allocated: overdrawn,
		claim:     claim("c", req("r", 1, role("p1"))),
		wantErr:   allocator.ErrUnsatisfiable,
	}, {
		name:      "devices without counters in that pool are still allocated",
		slices:    []*resourceapi.ResourceSlice{counters, partitions},
		allocated: overdrawn,
		claim:     claim("c", req("r", 1, role("plain"))),
		want:      []string{"r=part/plain"},
	}, {
		name:   "without the over-consumption the partition is allocated",
		slices: []*resourceapi.ResourceSlice{counters, partitions},
		claim:  claim("c", req("r", 1, role("p1"))),
		want:   []string{"r=part/p1"},
	}})
}

// TestOverdrawnCountsCrossings: a pool counts as over-consumed once a
// recorded claim takes one of its counters below zero, not before.
func TestOverdrawnCountsCrossings(t *testing.T) {
	mem := map[string]string{"mem": "4"}
	s := newTestSession(t, allocator.Inputs{Slices: []*resourceapi.ResourceSlice{
		counterSlice("counters", "part", 2, "gpu-0", mem),
		poolSlice("partitions", "part", 2, consumes(dev("a"), "gpu-0", mem), consumes(dev("b"), "gpu-0", mem)),
	}})
	if got := s.pools[0].overdrawn; got != 0 {
		t.Fatalf("fresh pool: overdrawn %d, want 0", got)
	}
	for i, name := range []string{"a", "b"} {
		if err := s.Record(allocatedClaim("holder-"+name, false, "part", name)); err != nil {
			t.Fatal(err)
		}
		if want := int32(i); s.pools[0].overdrawn != want {
			t.Errorf("after recording %s: overdrawn %d, want %d", name, s.pools[0].overdrawn, want)
		}
	}
}
