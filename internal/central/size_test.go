package central

import (
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/api/v1alpha1"
)

func TestSize(t *testing.T) {
	const a, b, c = "a.example.com", "b.example.com", "c.example.com"
	alloc := func(driver, pool string, devices ...string) *resourcev1.AllocationResult {
		r := &resourcev1.AllocationResult{}
		for _, d := range devices {
			r.Devices.Results = append(r.Devices.Results, resourcev1.DeviceRequestAllocationResult{Driver: driver, Pool: pool, Device: d})
		}
		return r
	}
	for _, tc := range []struct {
		name    string
		entries []v1alpha1.CentralDevices
		slices  []*resourcev1.ResourceSlice
		allocs  []*resourcev1.AllocationResult
		want    map[string]DriverSize
	}{
		{
			name:   "nothing central: no driver",
			slices: []*resourcev1.ResourceSlice{slice("s", a, "p", "n1", "d0")},
			allocs: []*resourcev1.AllocationResult{alloc(a, "p", "d0")},
			want:   map[string]DriverSize{},
		},
		{
			name:    "a whole driver and one pool of another; allocations elsewhere do not count",
			entries: []v1alpha1.CentralDevices{{Driver: a}, {Driver: b, Pools: []string{"mh"}}},
			slices: []*resourcev1.ResourceSlice{
				slice("a1", a, "n1", "n1", "d0", "d1"), slice("a2", a, "n2", "n2", "d0"),
				slice("b1", b, "mh", "", "d0", "d1", "d2"), slice("b2", b, "other", "", "d0"),
				slice("c1", c, "mh", "", "d0"),
			},
			allocs: []*resourcev1.AllocationResult{
				alloc(a, "n1", "d1"), alloc(a, "n2", "d0"),
				alloc(b, "mh", "d2"), alloc(b, "other", "d0"), alloc(c, "mh", "d0"),
				nil,
			},
			want: map[string]DriverSize{a: {Total: 3, Allocated: 2}, b: {Total: 3, Allocated: 1}},
		},
		{
			name:    "only the current generation; a shared device counts once; a gone device not at all",
			entries: []v1alpha1.CentralDevices{{Driver: a}},
			slices: []*resourcev1.ResourceSlice{
				counted(slice("old", a, "p", "", "d0", "d1", "d2", "d3"), 1, 1),
				counted(slice("new-1", a, "p", "", "d0"), 2, 2),
				counted(slice("new-2", a, "p", "", "d1"), 2, 2),
			},
			allocs: []*resourcev1.AllocationResult{alloc(a, "p", "d0"), alloc(a, "p", "d0"), alloc(a, "p", "d3")},
			want:   map[string]DriverSize{a: {Total: 2, Allocated: 1}},
		},
		{
			name:    "node-local pools of the selected nodes",
			entries: []v1alpha1.CentralDevices{{Driver: a, NodeSelector: matchLabels("pool", "gpu")}},
			slices:  []*resourcev1.ResourceSlice{slice("s1", a, "n1", "n1", "d0"), slice("s2", a, "n2", "n2", "d0", "d1")},
			allocs:  []*resourcev1.AllocationResult{alloc(a, "n1", "d0")},
			want:    map[string]DriverSize{a: {Total: 1, Allocated: 1}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPartition(Inputs{Entries: tc.entries, Slices: tc.slices, Nodes: sizeNodes})
			if err != nil {
				t.Fatal(err)
			}
			got := Size(p, tc.slices, AllocatedDevices(tc.allocs))
			if !maps.Equal(got, tc.want) {
				t.Errorf("Size = %v, want %v", got, tc.want)
			}
		})
	}
}

var sizeNodes = []*corev1.Node{node("n1", map[string]string{"pool": "gpu"}), node("n2", nil)}
