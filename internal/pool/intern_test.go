package pool

import (
	"reflect"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

func TestEqualCounterSetsShareOneMap(t *testing.T) {
	pools := Group([]*resourceapi.ResourceSlice{
		mkSlice("a", "p1", 1, 1, sets(cset("gpu-0", "mem=40Gi", "sm=98"), cset("gpu-1", "mem=40Gi", "sm=98"))),
		mkSlice("b", "p2", 1, 1, sets(cset("gpu-0", "sm=98", "mem=40Gi"), cset("gpu-1", "mem=80Gi", "sm=98"))),
		// Same value, different format: kept apart so reports show what the
		// driver wrote.
		mkSlice("c", "p3", 1, 1, sets(cset("gpu-0", "mem=42949672960", "sm=98"))),
	})
	ptr := func(p *Pool, set string) uintptr { return reflect.ValueOf(p.CounterSets[set].Counters).Pointer() }
	p1, p2, p3 := pools[0], pools[1], pools[2]
	if ptr(p1, "gpu-0") != ptr(p1, "gpu-1") || ptr(p1, "gpu-0") != ptr(p2, "gpu-0") {
		t.Error("equal counter sets do not share a map")
	}
	if ptr(p2, "gpu-0") == ptr(p2, "gpu-1") {
		t.Error("different capacities share a map")
	}
	if ptr(p3, "gpu-0") == ptr(p1, "gpu-0") {
		t.Error("different formats share a map")
	}
	if q := p2.CounterSets["gpu-1"].Counters["mem"]; q.String() != "80Gi" {
		t.Errorf("gpu-1 mem = %s, want 80Gi", q.String())
	}
	if q := p3.CounterSets["gpu-0"].Counters["mem"]; q.String() != "42949672960" {
		t.Errorf("p3 mem = %s", q.String())
	}
}
