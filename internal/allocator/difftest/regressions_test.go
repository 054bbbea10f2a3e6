package difftest

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

// Regression tests for bugs of the kind both engines must not have: each
// claim is satisfiable only if the search undoes its state correctly when it
// backtracks. Both engines must allocate exactly the expected devices'
// count and the verifier must accept the result.
func TestBacktrackingRegressions(t *testing.T) {
	tests := []struct {
		name   string
		slices []*resourceapi.ResourceSlice
		claim  *resourceapi.ResourceClaim
		// want is the only correct set of devices.
		want []string
	}{{
		// r0 takes a ({p0,p1}), r1 takes b (intersection {p1}); no second
		// device shares p1, so b is dropped: the intersection must go back to
		// {p0,p1}, not stay {p1}, for c and d (p0) to fit.
		name: "list-valued matchAttribute restores the intersection after backtracking",
		slices: []*resourceapi.ResourceSlice{regSlice("s", "node-0", 1,
			rootDev("a", "p0", "p1"), rootDev("b", "p1"), rootDev("c", "p0"), rootDev("d", "p0"))},
		claim: regClaim(
			[]resourceapi.DeviceRequest{regRequest("r0", 1), regRequest("r1", 2)},
			resourceapi.DeviceConstraint{MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(pcieRoot))}),
		want: []string{"a", "c", "d"},
	}, {
		// b fits the counters next to a but breaks the constraint; if its
		// counters are not released, c no longer fits.
		name: "counters of a device rejected by a constraint are released",
		slices: counterPool(
			groupDev("a", "1", 2), groupDev("b", "2", 2), groupDev("c", "1", 2)),
		claim: regClaim([]resourceapi.DeviceRequest{regRequest("r0", 2)},
			resourceapi.DeviceConstraint{MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(gpuDriver + "/group"))}),
		want: []string{"a", "c"},
	}, {
		// big is tried first and leaves room for nothing; once the search
		// drops it, its counters must be free for the two small ones.
		name: "counters are released when the search backtracks",
		slices: counterPool(
			groupDev("big", "1", 3), groupDev("s1", "2", 2), groupDev("s2", "2", 2)),
		claim: regClaim([]resourceapi.DeviceRequest{regRequest("r0", 2)},
			resourceapi.DeviceConstraint{MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(gpuDriver + "/group"))}),
		want: []string{"s1", "s2"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &Case{
				Inputs: allocator.Inputs{
					Nodes:   []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}}},
					Classes: []*resourceapi.DeviceClass{{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}}},
					Slices:  tc.slices,
				},
				Claims: []*resourceapi.ResourceClaim{tc.claim},
				Node:   []string{""},
			}
			eng := engines()
			var out [2][]Outcome
			for i, e := range eng {
				o, err := Run(t.Context(), e, c)
				if err != nil {
					t.Fatal(err)
				}
				out[i] = o
				if o[0].Verdict != Allocated {
					t.Errorf("%s: %s (%v), want allocated", e.Name(), o[0].Verdict, o[0].Err)
					continue
				}
				var got []string
				for _, r := range o[0].Result.Allocation.Devices.Results {
					got = append(got, r.Device)
				}
				slices.Sort(got)
				if !slices.Equal(got, tc.want) {
					t.Errorf("%s: devices %v, want %v", e.Name(), got, tc.want)
				}
			}
			problems, _ := Compare(c, engineNames, out[0], out[1])
			for _, p := range problems {
				t.Error(p)
			}
		})
	}
}

var regUID int

func regMeta(name string) metav1.ObjectMeta {
	regUID++
	return metav1.ObjectMeta{Name: name, UID: types.UID(fmt.Sprintf("regression-%d", regUID)), ResourceVersion: "1"}
}

func regSlice(name, pool string, count int64, devices ...resourceapi.Device) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: regMeta(name),
		Spec: resourceapi.ResourceSliceSpec{
			Driver: gpuDriver, NodeName: ptr.To("node-0"), Devices: devices,
			Pool: resourceapi.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: count},
		},
	}
}

func rootDev(name string, roots ...string) resourceapi.Device {
	return resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		pcieRoot: {StringValues: roots},
	}}
}

// scalarRootDev is a device whose PCIe root is a single value, not a list.
func scalarRootDev(name, root string) resourceapi.Device {
	return resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		pcieRoot: {StringValue: ptr.To(root)},
	}}
}

// sharedRootDev is rootDev shared between claims and requests
// (allowMultipleAllocations).
func sharedRootDev(name string, roots ...string) resourceapi.Device {
	d := rootDev(name, roots...)
	d.AllowMultipleAllocations = ptr.To(true)
	return d
}

// distinctRoot is a distinctAttribute constraint on the PCIe root.
func distinctRoot() resourceapi.DeviceConstraint {
	return resourceapi.DeviceConstraint{DistinctAttribute: ptr.To(resourceapi.FullyQualifiedName(pcieRoot))}
}

func groupDev(name, group string, mem int64) resourceapi.Device {
	return resourceapi.Device{
		Name:       name,
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"group": {StringValue: ptr.To(group)}},
		ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu", Counters: map[string]resourceapi.Counter{
			"mem": {Value: *resource.NewQuantity(mem, resource.DecimalSI)},
		}}},
	}
}

// counterPool is a pool whose devices share a counter set of mem 4, the
// counters in their own slice.
func counterPool(devices ...resourceapi.Device) []*resourceapi.ResourceSlice {
	counters := regSlice("counters", "node-0", 2)
	counters.Spec.SharedCounters = []resourceapi.CounterSet{{Name: "gpu", Counters: map[string]resourceapi.Counter{
		"mem": {Value: *resource.NewQuantity(4, resource.DecimalSI)},
	}}}
	return []*resourceapi.ResourceSlice{counters, regSlice("devices", "node-0", 2, devices...)}
}

func regRequest(name string, count int64) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
	}}
}

func regClaim(reqs []resourceapi.DeviceRequest, cons ...resourceapi.DeviceConstraint) *resourceapi.ResourceClaim {
	m := regMeta("claim")
	m.Namespace = "default"
	return &resourceapi.ResourceClaim{ObjectMeta: m, Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: reqs, Constraints: cons}}}
}
