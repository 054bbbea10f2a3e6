package pool

import (
	"fmt"
	"math"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/simdriver"
)

// migPool is a node-local pool of two partitionable A100 40GB GPUs, as the
// simulated driver publishes them (KEP-4815's profile table).
func migPool(t *testing.T, taints ...resourceapi.DeviceTaint) *Pool {
	t.Helper()
	inv := &simdriver.Inventory{Drivers: []simdriver.DriverSpec{{Name: drv, Devices: []simdriver.DeviceGroup{{Kind: simdriver.KindGPU, Count: 2, Partitions: simdriver.ProfileA100_40GB}}}}}
	pools, err := simdriver.Render(inv, "node-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	var slices []*resourceapi.ResourceSlice
	for i, sl := range pools[0].Slices {
		for d := range sl.Devices {
			sl.Devices[d].Taints = taints
		}
		slices = append(slices, &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%d", i), UID: types.UID(fmt.Sprintf("uid-s%d", i))},
			Spec: resourceapi.ResourceSliceSpec{Driver: drv, NodeName: ptr.To("node-1"),
				Pool:    resourceapi.ResourcePool{Name: "node-1", Generation: 1, ResourceSliceCount: int64(len(pools[0].Slices))},
				Devices: sl.Devices, SharedCounters: sl.SharedCounters},
		})
	}
	ps := Group(slices)
	if len(ps) != 1 || !ps[0].Valid() {
		t.Fatalf("the MIG pool did not build: %d pools", len(ps))
	}
	return ps[0]
}

// TestFragmentation: on an empty pool both GPUs are whole and a 7g
// partition is available; a 1g slice at the start of each GPU leaves
// nearly two GPUs free but nothing larger than a 3g; both slices on one
// GPU keep the other whole and the 7g available.
func TestFragmentation(t *testing.T) {
	p := migPool(t)
	for _, tc := range []struct {
		name           string
		held           []string
		whole          int
		free           float64 // ± 0.01
		largest        string
		largestAtLeast float64
		largestBelow   float64
	}{
		{name: "empty", whole: 2, free: 2, largest: "7g.40gb", largestAtLeast: 0.99, largestBelow: 1.001},
		{name: "a 1g at the start of each GPU", held: []string{"gpu-0-mig-1g-5gb-0", "gpu-1-mig-1g-5gb-0"}, whole: 0, free: 1.8, largest: "3g.20gb", largestAtLeast: 0.3, largestBelow: 0.5},
		{name: "both 1g on one GPU", held: []string{"gpu-0-mig-1g-5gb-0", "gpu-0-mig-1g-5gb-1"}, whole: 1, free: 1.8, largest: "7g.40gb", largestAtLeast: 0.99, largestBelow: 1.001},
		{name: "everything taken", held: []string{"gpu-0", "gpu-1"}, whole: 0, free: 0, largest: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLedger()
			l.SetPool(p)
			for i, d := range tc.held {
				l.AddClaim(&resourceapi.ResourceClaim{
					ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprint("c", i), UID: types.UID(fmt.Sprint("c", i))},
					Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
						Results: []resourceapi.DeviceRequestAllocationResult{{Request: "r", Driver: drv, Pool: "node-1", Device: d}}}}},
				})
			}
			now := time.Now()
			r := Assess(p, l, now, now, time.Hour)
			f := r.Fragmentation
			if f == nil {
				t.Fatal("no fragmentation for a pool with counter sets")
			}
			if f.CounterSets != 2 || f.WholeFree != tc.whole || math.Abs(f.Free-tc.free) > 0.01 {
				t.Errorf("counter sets %d, whole free %d, free %.3f; want 2, %d, %.2f", f.CounterSets, f.WholeFree, f.Free, tc.whole, tc.free)
			}
			if f.Largest.Type != tc.largest || (tc.largest != "" && (f.LargestSize < tc.largestAtLeast || f.LargestSize >= tc.largestBelow)) || (tc.largest == "" && f.LargestSize != 0) {
				t.Errorf("largest %q of size %.3f; want %q in [%.2f, %.3f)", f.Largest.Type, f.LargestSize, tc.largest, tc.largestAtLeast, tc.largestBelow)
			}
		})
	}
	// Taints do not matter: the central devices of the operator are
	// tainted for kube-scheduler.
	tainted := migPool(t, resourceapi.DeviceTaint{Key: "resource.drastack.io/central", Effect: resourceapi.DeviceTaintEffectNoSchedule})
	now := time.Now()
	r := Assess(tainted, nil, now, now, time.Hour)
	if r.Availability.Available != 0 || r.Fragmentation == nil || r.Fragmentation.Largest.Type != "7g.40gb" {
		t.Errorf("tainted pool: %d available, fragmentation %+v; want 0 available and a 7g.40gb", r.Availability.Available, r.Fragmentation)
	}
	// A pool without counters has none.
	plain := Group([]*resourceapi.ResourceSlice{mkSlice("plain", "node-2", 1, 1, func(s *resourceapi.ResourceSlice) {
		s.Spec.Devices = []resourceapi.Device{{Name: "gpu-0"}}
	})})
	if r := Assess(plain[0], nil, now, now, time.Hour); r.Fragmentation != nil {
		t.Errorf("a pool without counter sets reports %+v", r.Fragmentation)
	}
}
