package central

import (
	"reflect"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/api/v1alpha1"
)

func TestCentralSlices(t *testing.T) {
	gpuOnly := []v1alpha1.CentralDevices{{Driver: "gpu", Pools: []string{"a", "b"}}}
	tpuWide := []v1alpha1.CentralDevices{{Driver: "tpu"}}
	counterSlice := func(name, driver, pool string) *resourcev1.ResourceSlice {
		s := slice(name, driver, pool, "")
		s.Spec.SharedCounters = []resourcev1.CounterSet{{Name: "chips"}}
		return s
	}
	tests := []struct {
		name    string
		entries []v1alpha1.CentralDevices
		slices  []*resourcev1.ResourceSlice
		want    []string // names of the slices kept, in order
	}{
		{
			name:    "tainted central pools are kept, other pools and drivers dropped",
			entries: gpuOnly,
			slices: []*resourcev1.ResourceSlice{
				withTaint(slice("gpu-a", "gpu", "a", "n1", "d0")),
				withTaint(slice("gpu-c", "gpu", "c", "n3", "d0")), // tainted, but not central
				slice("nic-a", "nic", "a", "n1", "d0"),
				withTaint(slice("gpu-b", "gpu", "b", "n2", "d0")),
			},
			want: []string{"gpu-a", "gpu-b"},
		},
		{
			name:    "a central pool with an untainted device is dropped whole until the taint is in place",
			entries: gpuOnly,
			slices: []*resourcev1.ResourceSlice{
				counted(withTaint(slice("gpu-a-0", "gpu", "a", "n1", "d0")), 1, 2),
				counted(slice("gpu-a-1", "gpu", "a", "n1", "d1"), 1, 2),
				withTaint(slice("gpu-b", "gpu", "b", "n2", "d0")),
			},
			want: []string{"gpu-b"},
		},
		{
			name:    "a whole pool is kept, counter slices and all, so it stays complete and valid",
			entries: tpuWide,
			slices: []*resourcev1.ResourceSlice{
				counted(counterSlice("tpu-x-counters", "tpu", "x"), 1, 3),
				counted(withTaint(slice("tpu-x-0", "tpu", "x", "", "2x2-0", "2x2-1")), 1, 3),
				counted(withTaint(slice("tpu-x-1", "tpu", "x", "", "4x4-0")), 1, 3),
			},
			want: []string{"tpu-x-counters", "tpu-x-0", "tpu-x-1"},
		},
		{
			name:    "only the current generation decides; stale slices travel with their pool",
			entries: tpuWide,
			slices: []*resourcev1.ResourceSlice{
				counted(slice("tpu-x-old", "tpu", "x", "", "2x2-0"), 1, 1),
				counted(withTaint(slice("tpu-x-new", "tpu", "x", "", "2x2-0")), 2, 1),
			},
			want: []string{"tpu-x-old", "tpu-x-new"},
		},
		{
			name:    "an untainted device in the current generation drops the pool",
			entries: tpuWide,
			slices: []*resourcev1.ResourceSlice{
				counted(withTaint(slice("tpu-x-old", "tpu", "x", "", "2x2-0")), 1, 1),
				counted(slice("tpu-x-new", "tpu", "x", "", "2x2-0"), 2, 1),
			},
			want: nil,
		},
		{
			name:    "a taint with another key does not count",
			entries: tpuWide,
			slices: []*resourcev1.ResourceSlice{func() *resourcev1.ResourceSlice {
				s := slice("tpu-x", "tpu", "x", "", "2x2-0")
				s.Spec.Devices[0].Taints = []resourcev1.DeviceTaint{{Key: "drastack.io/driver-removal", Effect: resourcev1.DeviceTaintEffectNoSchedule}}
				return s
			}()},
			want: nil,
		},
		{
			name:    "nil slices are skipped",
			entries: tpuWide,
			slices:  []*resourcev1.ResourceSlice{nil, withTaint(slice("tpu-x", "tpu", "x", "", "d"))},
			want:    []string{"tpu-x"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPartition(Inputs{Entries: tc.entries, Slices: tc.slices})
			if err != nil {
				t.Fatal(err)
			}
			got := CentralSlices(p, tc.slices)
			var names []string
			for _, s := range got {
				names = append(names, s.Name)
			}
			if !reflect.DeepEqual(names, tc.want) {
				t.Errorf("CentralSlices = %v, want %v", names, tc.want)
			}
		})
	}
}

// TestCentralSlicesAfterApplyTaintRules is the intended pipeline: the
// existing rules are applied to the slices, then restricted to central
// pools. A pool whose rule exists is kept; one whose rule is still missing
// is not.
func TestCentralSlicesAfterApplyTaintRules(t *testing.T) {
	entries := []v1alpha1.CentralDevices{{Driver: "gpu", Pools: []string{"a", "b"}}}
	slices := []*resourcev1.ResourceSlice{
		slice("gpu-a", "gpu", "a", "n1", "d0"),
		slice("gpu-b", "gpu", "b", "n2", "d0"),
		slice("gpu-c", "gpu", "c", "n3", "d0"),
	}
	p, err := NewPartition(Inputs{Entries: entries, Slices: slices})
	if err != nil {
		t.Fatal(err)
	}
	desired := p.TaintRules()
	existing := desired[:1] // the rule for pool b is not created yet
	got := CentralSlices(p, ApplyTaintRules(slices, existing))
	if len(got) != 1 || got[0].Name != "gpu-a" || len(got[0].Spec.Devices[0].Taints) != 1 {
		t.Fatalf("got %v", got)
	}
	if len(slices[0].Spec.Devices[0].Taints) != 0 {
		t.Error("the input slice was tainted")
	}
	got = CentralSlices(p, ApplyTaintRules(slices, desired))
	if len(got) != 2 {
		t.Errorf("with every rule in place: %d slices, want 2", len(got))
	}
}
