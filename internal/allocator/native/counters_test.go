package native

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

// migNode is one A100-like GPU on node n1 with MIG partitions on a shared
// counter set published in its own slice: one full device, two halves and
// four quarters.
func migNode() []*resourceapi.ResourceSlice {
	part := func(name, profile, mem, slices string) resourceapi.Device {
		return consumes(dev(name, "profile", profile), "gpu-0", map[string]string{"memory": mem, "slices": slices})
	}
	devices := poolSlice("n1-devices", "n1", 2,
		part("full", "full", "40Gi", "7"),
		part("half-0", "half", "20Gi", "3"), part("half-1", "half", "20Gi", "3"),
		part("quarter-0", "quarter", "10Gi", "1"), part("quarter-1", "quarter", "10Gi", "1"),
		part("quarter-2", "quarter", "10Gi", "1"), part("quarter-3", "quarter", "10Gi", "1"))
	counters := counterSlice("n1-counters", "n1", 2, "gpu-0", map[string]string{"memory": "40Gi", "slices": "7"})
	for _, s := range []*resourceapi.ResourceSlice{devices, counters} {
		s.Spec.AllNodes, s.Spec.NodeName = nil, ptr.To("n1")
	}
	return []*resourceapi.ResourceSlice{devices, counters}
}

func profile(p string) string { return `device.attributes["gpu.example.com"].profile == "` + p + `"` }

func TestCounters(t *testing.T) {
	missingCounterSlice := migNode()[:1]
	badReference := migNode()
	badReference[0].Spec.Devices[0].ConsumesCounters[0].CounterSet = "nope"
	runCases(t, []testCase{
		{name: "full GPU when nothing is allocated", slices: migNode(), claim: claim("c", req("r", 1, profile("full"))), want: []string{"r=n1/full"}},
		{name: "a partition in use blocks the full GPU", slices: migNode(), allocated: []*resourceapi.ResourceClaim{allocatedClaim("old", false, "n1", "quarter-2")},
			claim: claim("c", req("r", 1, profile("full"))), wantErr: allocator.ErrUnsatisfiable},
		{name: "partitions fit until the counters run out", slices: migNode(), allocated: []*resourceapi.ResourceClaim{allocatedClaim("old", false, "n1", "half-0", "n1", "quarter-0")},
			claim: claim("c", req("r", 1, profile("half"))), wantErr: allocator.ErrUnsatisfiable},
		{name: "remaining counters still allow smaller partitions", slices: migNode(), allocated: []*resourceapi.ResourceClaim{allocatedClaim("old", false, "n1", "half-0", "n1", "quarter-0")},
			claim: claim("c", req("r", 1, profile("quarter"))), want: []string{"r=n1/quarter-1"}},
		{name: "smallest partition first", slices: migNode(), claim: claim("c", req("r", 1)), want: []string{"r=n1/quarter-0"}},
		{name: "counters add up within one claim", slices: migNode(), claim: claim("c", req("a", 1, profile("half")), req("b", 1, profile("full"))),
			wantErr: allocator.ErrUnsatisfiable},
		{name: "two halves fit together", slices: migNode(), claim: claim("c", req("r", 2, profile("half"))), want: []string{"r=n1/half-0", "r=n1/half-1"}},
		{name: "admin access allocations do not consume counters", slices: migNode(), allocated: []*resourceapi.ResourceClaim{allocatedClaim("mon", true, "n1", "full")},
			claim: claim("c", req("r", 1, profile("full"))), want: []string{"r=n1/full"}},
		{name: "pool missing its counter slice is incomplete", slices: missingCounterSlice, claim: claim("c", req("r", 1)), wantErr: allocator.ErrUnsatisfiable},
		{name: "pool referencing a missing counter set is invalid", slices: badReference, claim: claim("c", req("r", 1)), wantErr: allocator.ErrUnsatisfiable},
	})
}
