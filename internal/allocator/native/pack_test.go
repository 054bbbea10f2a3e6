package native

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

// migPlacements are an A100's MIG placements as (profile, first memory
// slice, slices): the shape of the bench's partitionable workload.
var migPlacements = []struct {
	profile      string
	first, count int
}{
	{"1g", 0, 1}, {"1g", 1, 1}, {"1g", 2, 1}, {"1g", 3, 1}, {"1g", 4, 1}, {"1g", 5, 1}, {"1g", 6, 1},
	{"2g", 0, 2}, {"2g", 2, 2}, {"2g", 4, 2},
	{"3g", 0, 4}, {"3g", 4, 4},
	{"4g", 0, 4},
	{"7g", 0, 8},
}

// migGPUs is a node-local pool with gpus A100-like GPUs: one counter set
// of 8 memory slices per GPU, every MIG placement a device named
// gpu-G-PROFILE-FIRST.
func migGPUs(node string, gpus int) []*resourceapi.ResourceSlice {
	counters, devices := nodeSlice(node), nodeSlice(node)
	counters.Name, devices.Name = node+"-counters", node+"-devices"
	counters.Spec.Pool.ResourceSliceCount, devices.Spec.Pool.ResourceSliceCount = 2, 2
	for g := 0; g < gpus; g++ {
		set := resourceapi.CounterSet{Name: fmt.Sprintf("gpu-%d", g), Counters: map[string]resourceapi.Counter{}}
		for m := 0; m < 8; m++ {
			set.Counters[fmt.Sprintf("mem-%d", m)] = resourceapi.Counter{Value: qty("1")}
		}
		counters.Spec.SharedCounters = append(counters.Spec.SharedCounters, set)
		for _, p := range migPlacements {
			use := map[string]string{}
			for m := p.first; m < p.first+p.count; m++ {
				use[fmt.Sprintf("mem-%d", m)] = "1"
			}
			d := consumes(dev(fmt.Sprintf("gpu-%d-%s-%d", g, p.profile, p.first), "profile", p.profile), set.Name, use)
			devices.Spec.Devices = append(devices.Spec.Devices, d)
		}
	}
	return []*resourceapi.ResourceSlice{counters, devices}
}

func profileClaim(name, profile string) *resourceapi.ResourceClaim {
	return claim(name, req("gpu", 1, fmt.Sprintf(`device.attributes["%s"].profile == %q`, drv, profile)))
}

func TestPackMIGPlacement(t *testing.T) {
	tests := []struct {
		name string
		// held are devices of node n0 in use before the claim.
		held    []string
		profile string
		want    map[allocator.PlacementPolicy]string
	}{
		{
			name:    "empty GPU: a 1g slice at the end keeps the 4g placement",
			profile: "1g",
			want:    map[allocator.PlacementPolicy]string{allocator.PlacementFirstFit: "n0/gpu-0-1g-0", allocator.PlacementPack: "n0/gpu-0-1g-6"},
		},
		{
			name:    "a 1g slice fills the hole of a partly used GPU, not a whole free one",
			held:    []string{"gpu-1-3g-0", "gpu-1-2g-4"},
			profile: "1g",
			// GPU 1 has slices 6 and 7 free: 1g at 6 breaks nothing else.
			want: map[allocator.PlacementPolicy]string{allocator.PlacementFirstFit: "n0/gpu-0-1g-0", allocator.PlacementPack: "n0/gpu-1-1g-6"},
		},
		{
			name:    "a 2g goes where it breaks a 3g, not the 7g of an empty GPU",
			held:    []string{"gpu-1-1g-6"},
			profile: "2g",
			// On GPU 1 the 2g at 4 breaks only the 3g at 4, already broken
			// by the 1g at 6, so it costs nothing.
			want: map[allocator.PlacementPolicy]string{allocator.PlacementFirstFit: "n0/gpu-0-2g-0", allocator.PlacementPack: "n0/gpu-1-2g-4"},
		},
		{
			name:    "a 7g needs a whole GPU either way",
			held:    []string{"gpu-0-1g-3"},
			profile: "7g",
			want:    map[allocator.PlacementPolicy]string{allocator.PlacementFirstFit: "n0/gpu-1-7g-0", allocator.PlacementPack: "n0/gpu-1-7g-0"},
		},
	}
	for _, tc := range tests {
		for _, policy := range []allocator.PlacementPolicy{allocator.PlacementFirstFit, allocator.PlacementPack} {
			t.Run(tc.name+"/"+string(policy), func(t *testing.T) {
				in := allocator.Inputs{Slices: migGPUs("n0", 2), Nodes: nodes("n0")}
				if len(tc.held) > 0 {
					var pd []string
					for _, d := range tc.held {
						pd = append(pd, "n0", d)
					}
					in.Allocated = append(in.Allocated, allocatedClaim("held", false, pd...))
				}
				s := newTestSession(t, in)
				got, _, err := allocateOne(t, s, profileClaim("c", tc.profile), allocator.Options{Policy: policy})
				if err != nil {
					t.Fatalf("Allocate: %v", err)
				}
				if want := []string{"gpu=" + tc.want[policy]}; !slices.Equal(got, want) {
					t.Errorf("got %v, want %v", got, want)
				}
			})
		}
	}
}

// TestPackKeepsWholeGPUs: GPU 1 has a 1g slice in use, GPU 0 is free. A 1g
// claim and then a 7g claim: first fit breaks GPU 0 with the 1g and has no
// whole GPU left for the 7g; Pack puts the 1g next to the other and places
// both.
func TestPackKeepsWholeGPUs(t *testing.T) {
	in := allocator.Inputs{
		Slices:    migGPUs("n0", 2),
		Nodes:     nodes("n0"),
		Allocated: []*resourceapi.ResourceClaim{allocatedClaim("held", false, "n0", "gpu-1-1g-6")},
	}
	for policy, wantBig := range map[allocator.PlacementPolicy]bool{allocator.PlacementFirstFit: false, allocator.PlacementPack: true} {
		s := newTestSession(t, in)
		small := profileClaim("small", "1g")
		_, res, err := allocateOne(t, s, small, allocator.Options{Policy: policy})
		if err != nil {
			t.Fatalf("%s: 1g: %v", policy, err)
		}
		recordResult(t, s, small, res)
		_, _, err = allocateOne(t, s, profileClaim("big", "7g"), allocator.Options{Policy: policy})
		if gotBig := err == nil; gotBig != wantBig {
			t.Errorf("%s: 7g placed %v (%v), want %v", policy, gotBig, err, wantBig)
		}
		if err != nil && !errors.Is(err, allocator.ErrUnsatisfiable) {
			t.Errorf("%s: 7g: %v, want unsatisfiable", policy, err)
		}
	}
}

func TestPackNodeOrder(t *testing.T) {
	plain := func(node string, n int) *resourceapi.ResourceSlice {
		var devs []resourceapi.Device
		for i := 0; i < n; i++ {
			devs = append(devs, dev(fmt.Sprintf("gpu-%d", i)))
		}
		return nodeSlice(node, devs...)
	}
	t.Run("without counters, a partly used node before pristine ones", func(t *testing.T) {
		in := allocator.Inputs{
			Slices:    []*resourceapi.ResourceSlice{plain("a", 4), plain("b", 4), plain("c", 4)},
			Nodes:     nodes("a", "b", "c"),
			Allocated: []*resourceapi.ResourceClaim{allocatedClaim("on-c", false, "c", "gpu-0", "c", "gpu-1")},
		}
		for policy, want := range map[allocator.PlacementPolicy]string{allocator.PlacementFirstFit: "a", allocator.PlacementPack: "c"} {
			s := newTestSession(t, in)
			_, res, err := allocateOne(t, s, claim("one", req("gpu", 1)), allocator.Options{Policy: policy})
			if err != nil {
				t.Fatalf("%s: %v", policy, err)
			}
			if res.Node != want {
				t.Errorf("%s: node %s, want %s", policy, res.Node, want)
			}
			// Two GPUs (the first claim was not recorded): c has
			// exactly two left.
			_, res, err = allocateOne(t, s, claim("two", req("gpu", 2)), allocator.Options{Policy: policy})
			if err != nil {
				t.Fatalf("%s: %v", policy, err)
			}
			if policy == allocator.PlacementPack && res.Node != "c" {
				t.Errorf("Pack: two GPUs on %s, want c", res.Node)
			}
		}
	})
	t.Run("with CEL constraints, nodes in input order", func(t *testing.T) {
		in := allocator.Inputs{
			Slices:    []*resourceapi.ResourceSlice{plain("a", 4), plain("b", 4)},
			Nodes:     nodes("a", "b"),
			Allocated: []*resourceapi.ResourceClaim{allocatedClaim("on-b", false, "b", "gpu-0")},
		}
		s := newTestSession(t, in)
		c := withCEL(claim("c", req("two", 2)), celAnnotation("size(devices) == 2", "two"))
		_, res, err := allocateOne(t, s, c, allocator.Options{Policy: allocator.PlacementPack})
		if err != nil {
			t.Fatal(err)
		}
		if res.Node != "a" {
			t.Errorf("node %s, want a: a claim with CEL constraints is not moved to the fuller node", res.Node)
		}
	})
	t.Run("with counters, the node with a hole that fits", func(t *testing.T) {
		in := allocator.Inputs{
			Slices:    append(migGPUs("a", 1), migGPUs("b", 1)...),
			Nodes:     nodes("a", "b"),
			Allocated: []*resourceapi.ResourceClaim{allocatedClaim("on-b", false, "b", "gpu-0-4g-0", "b", "gpu-0-2g-4")},
		}
		s := newTestSession(t, in)
		got, _, err := allocateOne(t, s, profileClaim("c", "1g"), allocator.Options{Policy: allocator.PlacementPack})
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"gpu=b/gpu-0-1g-6"}; !slices.Equal(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})
}

// hostBlocks is a shared pool of 8 hosts (one counter each) whose devices
// are aligned blocks of 2, 4 and 8 hosts, like a multi-host TPU pool's
// sub-meshes.
func hostBlocks(pool string) []*resourceapi.ResourceSlice {
	counters := map[string]string{}
	for h := 0; h < 8; h++ {
		counters[fmt.Sprintf("host-%d", h)] = "1"
	}
	cs := counterSlice(pool+"-counters", pool, 2, "hosts", counters)
	var devs []resourceapi.Device
	for _, size := range []int{2, 4, 8} {
		for first := 0; first < 8; first += size {
			use := map[string]string{}
			for h := first; h < first+size; h++ {
				use[fmt.Sprintf("host-%d", h)] = "1"
			}
			devs = append(devs, consumes(dev(fmt.Sprintf("block-%d-at-%d", size, first), "hosts", size), "hosts", use))
		}
	}
	return []*resourceapi.ResourceSlice{cs, poolSlice(pool+"-devices", pool, 2, devs...)}
}

func TestPackHostBlocks(t *testing.T) {
	blockClaim := func(name string, size int) *resourceapi.ResourceClaim {
		return claim(name, req("gpu", 1, fmt.Sprintf(`device.attributes["%s"].hosts == %d`, drv, size)))
	}
	in := allocator.Inputs{
		Slices: append(hostBlocks("p0"), hostBlocks("p1")...),
		Nodes:  nodes("n"),
		// Pool p0 has its block of hosts 4-5 taken: its 8-block is gone,
		// and so is its 4-block at 4.
		Allocated: []*resourceapi.ResourceClaim{allocatedClaim("held", false, "p0", "block-2-at-4")},
	}
	want := map[allocator.PlacementPolicy]string{
		// First fit breaks p0's intact 4-block at 0.
		allocator.PlacementFirstFit: "p0/block-2-at-0",
		// Pack takes the partner of the used block: it breaks nothing, and
		// p1 keeps its 8-block.
		allocator.PlacementPack: "p0/block-2-at-6",
	}
	for policy, w := range want {
		s := newTestSession(t, in)
		got, _, err := allocateOne(t, s, blockClaim("c", 2), allocator.Options{Policy: policy})
		if err != nil {
			t.Fatalf("%s: %v", policy, err)
		}
		if !slices.Equal(got, []string{"gpu=" + w}) {
			t.Errorf("%s: got %v, want %s", policy, got, w)
		}
	}
}

func TestPackUnknownPolicy(t *testing.T) {
	s := newTestSession(t, allocator.Inputs{Slices: migGPUs("n0", 1), Nodes: nodes("n0")})
	_, _, err := allocateOne(t, s, profileClaim("c", "1g"), allocator.Options{Policy: "Tetris"})
	if err == nil || errors.Is(err, allocator.ErrUnsatisfiable) {
		t.Fatalf("got %v, want an error naming the policy", err)
	}
}

func TestRelease(t *testing.T) {
	t.Run("counters and partitions come back", func(t *testing.T) {
		s := newTestSession(t, allocator.Inputs{Slices: migGPUs("n0", 1), Nodes: nodes("n0")})
		small := profileClaim("small", "1g")
		_, res, err := allocateOne(t, s, small, allocator.Options{})
		if err != nil {
			t.Fatal(err)
		}
		held := recordResult(t, s, small, res)
		if _, _, err := allocateOne(t, s, profileClaim("big", "7g"), allocator.Options{}); !errors.Is(err, allocator.ErrUnsatisfiable) {
			t.Fatalf("7g next to a 1g: got %v, want unsatisfiable", err)
		}
		if err := s.Release(held); err != nil {
			t.Fatal(err)
		}
		got, _, err := allocateOne(t, s, profileClaim("big", "7g"), allocator.Options{})
		if err != nil {
			t.Fatalf("7g after the release: %v", err)
		}
		if want := []string{"gpu=n0/gpu-0-7g-0"}; !slices.Equal(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
		// Releasing again, or a claim never recorded, changes nothing.
		if err := s.Release(held); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(allocatedClaim("stranger", false, "n0", "gpu-0-7g-0")); err != nil {
			t.Fatal(err)
		}
		for i, r := range s.remaining {
			if r != 1 {
				t.Errorf("counter %d: %d left, want 1 (all free)", i, r)
			}
		}
	})
	t.Run("a central allocation finds a node again after its devices were pruned", func(t *testing.T) {
		in := allocator.Inputs{
			Slices: []*resourceapi.ResourceSlice{nodeSlice("a", dev("gpu-0")), nodeSlice("b", dev("gpu-0"))},
			Nodes:  nodes("a", "b"),
		}
		s := newTestSession(t, in)
		var held []*resourceapi.ResourceClaim
		for _, name := range []string{"x", "y"} {
			c := claim(name, req("gpu", 1))
			_, res, err := allocateOne(t, s, c, allocator.Options{})
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, recordResult(t, s, c, res))
		}
		if _, _, err := allocateOne(t, s, claim("z", req("gpu", 1)), allocator.Options{}); !errors.Is(err, allocator.ErrUnsatisfiable) {
			t.Fatalf("full cluster: got %v", err)
		}
		if err := s.Release(held[0]); err != nil {
			t.Fatal(err)
		}
		_, res, err := allocateOne(t, s, claim("z", req("gpu", 1)), allocator.Options{})
		if err != nil {
			t.Fatalf("after release: %v", err)
		}
		if res.Node != "a" {
			t.Errorf("node %s, want a (freed)", res.Node)
		}
	})
	t.Run("a share gives back its capacity", func(t *testing.T) {
		shared := dev("gpu-0")
		shared.AllowMultipleAllocations = ptr.To(true)
		shared.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: qty("10Gi")}}
		s := newTestSession(t, allocator.Inputs{Slices: []*resourceapi.ResourceSlice{nodeSlice("a", shared)}, Nodes: nodes("a")})
		share := func(name string) *resourceapi.ResourceClaim {
			r := req("gpu", 1)
			r.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": qty("6Gi")}}
			return claim(name, r)
		}
		_, res, err := allocateOne(t, s, share("s1"), allocator.Options{})
		if err != nil {
			t.Fatal(err)
		}
		held := recordResult(t, s, share("s1"), res)
		if _, _, err := allocateOne(t, s, share("s2"), allocator.Options{}); !errors.Is(err, allocator.ErrUnsatisfiable) {
			t.Fatalf("second 6Gi share of 10Gi: got %v", err)
		}
		if err := s.Release(held); err != nil {
			t.Fatal(err)
		}
		if _, _, err := allocateOne(t, s, share("s2"), allocator.Options{}); err != nil {
			t.Fatalf("after release: %v", err)
		}
	})
}

// recordResult records res as claim c's allocation and returns the
// recorded claim.
func recordResult(t *testing.T, s *Session, c *resourceapi.ResourceClaim, res allocator.Result) *resourceapi.ResourceClaim {
	t.Helper()
	done := c.DeepCopy()
	done.Status.Allocation = res.Allocation
	if err := s.Record(done); err != nil {
		t.Fatal(err)
	}
	return done
}

func nodes(names ...string) []*corev1.Node {
	var out []*corev1.Node
	for _, n := range names {
		out = append(out, node(n, nil))
	}
	return out
}

func qty(v string) resource.Quantity { return resource.MustParse(v) }
