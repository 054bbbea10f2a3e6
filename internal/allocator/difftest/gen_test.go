package difftest

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/pool"
)

func TestGenerateIsReproducible(t *testing.T) {
	for _, seed := range []uint64{1, 7, 12345} {
		a, b := Generate(seed), Generate(seed)
		if !apiequality.Semantic.DeepEqual(a, b) {
			t.Errorf("seed %d: two generations differ", seed)
		}
	}
	if apiequality.Semantic.DeepEqual(Generate(1).Claims, Generate(2).Claims) {
		t.Error("seeds 1 and 2 generate the same claims")
	}
}

// TestGeneratorCovers checks that the default run exercises every feature
// the differential test is meant to cover.
func TestGeneratorCovers(t *testing.T) {
	seen := map[string]int{}
	for seed := uint64(1); seed <= defaultCases; seed++ {
		c := Generate(seed)
		for _, p := range pool.Group(c.Inputs.Slices) {
			switch {
			case !p.Complete():
				seen["incomplete pool"]++
			case len(p.StaleSlices) > 0:
				seen["stale slices"]++
			}
			if len(p.CounterSets) > 0 {
				seen["shared counters"]++
			}
			for _, cs := range p.CounterSets {
				for _, q := range cs.Counters {
					if _, ok := q.AsInt64(); !ok {
						seen["counters beyond int64 units"]++
					}
					if q.Cmp(resource.MustParse("1")) < 0 {
						seen["counters below one unit"]++
					}
				}
			}
			if len(p.Devices) > 32 {
				seen["more devices than a claim holds"]++
			}
		}
		for _, s := range c.Inputs.Slices {
			if ptr.Deref(s.Spec.PerDeviceNodeSelection, false) {
				seen["per-device node selection"]++
			}
			for _, d := range s.Spec.Devices {
				if len(d.Taints) > 0 {
					seen["taints"]++
				}
				if len(d.Attributes[pcieRoot].StringValues) > 1 {
					seen["list attributes"]++
				}
				if ptr.Deref(d.AllowMultipleAllocations, false) {
					seen["shared devices"]++
					if len(d.ConsumesCounters) > 0 {
						seen["shared devices with counters"]++
					}
				}
				for _, c := range d.Capacity {
					if c.RequestPolicy != nil && c.RequestPolicy.ValidRange != nil && c.RequestPolicy.ValidRange.Step != nil {
						seen["capacity range with step"]++
					}
					if c.RequestPolicy != nil && len(c.RequestPolicy.ValidValues) > 0 {
						seen["capacity valid values"]++
					}
				}
			}
		}
		if len(c.Inputs.Allocated) > 0 {
			seen["allocated claims"]++
		}
		for _, a := range c.Inputs.Allocated {
			for _, r := range a.Status.Allocation.Devices.Results {
				if r.ShareID != nil {
					seen["allocated shares"]++
				}
			}
		}
		if overConsumed(c) {
			seen["over-consumed counters"]++
		}
		for i, claim := range c.Claims {
			if _, ok := claim.Annotations[allocator.CELConstraintsAnnotation]; ok {
				seen["CEL constraints"]++
			}
			if c.Node[i] == "" {
				seen["central allocation"]++
			} else {
				seen["allocation for a node"]++
			}
			for _, r := range claim.Spec.Devices.Requests {
				if len(r.FirstAvailable) > 0 {
					seen["firstAvailable"]++
				}
				for _, sub := range r.FirstAvailable {
					if sub.Count > 32 {
						seen["firstAvailable count above 32"]++
					}
				}
				if r.Exactly != nil && r.Exactly.Capacity != nil {
					seen["capacity requests"]++
				}
				for _, sub := range r.FirstAvailable {
					if sub.Capacity != nil {
						seen["capacity requests in subrequests"]++
					}
				}
				if r.Exactly != nil && r.Exactly.Count >= 16 {
					seen["count near the per-claim limit"]++
				}
				if r.Exactly != nil && r.Exactly.AllocationMode == resourceapi.DeviceAllocationModeAll {
					seen["All"]++
					if len(claim.Spec.Devices.Constraints) > 0 {
						seen["All with constraints"]++
					}
				}
				if r.Exactly != nil && ptr.Deref(r.Exactly.AdminAccess, false) {
					seen["adminAccess"]++
				}
				if r.Exactly != nil && len(r.Exactly.Tolerations) > 0 {
					seen["tolerations"]++
				}
			}
			for _, con := range claim.Spec.Devices.Constraints {
				if con.MatchAttribute != nil {
					seen["matchAttribute"]++
				}
				if con.DistinctAttribute != nil {
					seen["distinctAttribute"]++
				}
			}
		}
	}
	for _, feature := range []string{
		"incomplete pool", "stale slices", "shared counters", "per-device node selection", "taints",
		"counters beyond int64 units", "counters below one unit", "more devices than a claim holds",
		"firstAvailable count above 32", "count near the per-claim limit",
		"list attributes", "allocated claims", "central allocation", "allocation for a node",
		"firstAvailable", "All", "All with constraints", "over-consumed counters", "adminAccess", "tolerations", "matchAttribute", "distinctAttribute", "CEL constraints",
		"shared devices", "shared devices with counters", "capacity range with step", "capacity valid values",
		"allocated shares", "capacity requests", "capacity requests in subrequests",
	} {
		if seen[feature] < 5 {
			t.Errorf("%s: only %d times in %d cases", feature, seen[feature], defaultCases)
		}
	}
	t.Logf("coverage: %v", seen)
}

// overConsumed reports whether the allocated claims of c consume some shared
// counter beyond its capacity.
func overConsumed(c *Case) bool {
	left := map[string]int64{}
	for _, s := range c.Inputs.Slices {
		for _, set := range s.Spec.SharedCounters {
			for name, v := range set.Counters {
				left[s.Spec.Pool.Name+"/"+set.Name+"/"+name] = v.Value.Value()
			}
		}
	}
	devices := map[string]*resourceapi.Device{}
	for _, s := range c.Inputs.Slices {
		for i := range s.Spec.Devices {
			devices[s.Spec.Pool.Name+"/"+s.Spec.Devices[i].Name] = &s.Spec.Devices[i]
		}
	}
	for _, claim := range c.Inputs.Allocated {
		for _, r := range claim.Status.Allocation.Devices.Results {
			d := devices[r.Pool+"/"+r.Device]
			if d == nil || ptr.Deref(r.AdminAccess, false) {
				continue
			}
			for _, cc := range d.ConsumesCounters {
				for name, v := range cc.Counters {
					k := r.Pool + "/" + cc.CounterSet + "/" + name
					if left[k] -= v.Value.Value(); left[k] < 0 {
						return true
					}
				}
			}
		}
	}
	return false
}

// TestGeneratorKeepsListsWithTheGateOff: under Kubernetes 1.37's defaults
// (DRAListTypeAttributes off) some slices still carry list values, as ones
// written before the gate was turned off do, and claims constrain them, so
// that the differential run under those gates compares how both engines
// treat them.
func TestGeneratorKeepsListsWithTheGateOff(t *testing.T) {
	lists, constrained := 0, 0
	for seed := uint64(1); seed <= defaultCases; seed++ {
		c := GenerateWith(seed, allocator.Kubernetes137Features())
		n := 0
		for _, s := range c.Inputs.Slices {
			for _, d := range s.Spec.Devices {
				if len(d.Attributes[pcieRoot].StringValues) > 0 {
					n++
				}
			}
		}
		lists += n
		if n == 0 {
			continue
		}
		for _, claim := range c.Claims {
			for _, con := range claim.Spec.Devices.Constraints {
				if (con.MatchAttribute != nil && *con.MatchAttribute == pcieRoot) || (con.DistinctAttribute != nil && *con.DistinctAttribute == pcieRoot) {
					constrained++
				}
			}
		}
	}
	if lists < 50 || constrained < 20 {
		t.Errorf("%d devices with list values, %d constraints on them in cases with lists, in %d cases: too few to compare", lists, constrained, defaultCases)
	}
	t.Logf("%d devices with list values, %d constraints on them", lists, constrained)
}
