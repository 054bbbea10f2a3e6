package native

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

// shared is a device with allowMultipleAllocations and the given
// capacities ("name", "value", policy or nil, ...).
func shared(name string, caps ...any) resourceapi.Device {
	d := withCaps(dev(name), caps...)
	d.AllowMultipleAllocations = ptr.To(true)
	return d
}

// withCaps sets capacities ("name", "value", *policy, ...).
func withCaps(d resourceapi.Device, caps ...any) resourceapi.Device {
	d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{}
	for i := 0; i+2 < len(caps)+1; i += 3 {
		c := resourceapi.DeviceCapacity{Value: resource.MustParse(caps[i+1].(string))}
		if p, _ := caps[i+2].(*resourceapi.CapacityRequestPolicy); p != nil {
			c.RequestPolicy = p
		}
		d.Capacity[resourceapi.QualifiedName(caps[i].(string))] = c
	}
	return d
}

func q(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }

func rangePolicy(def, minimum, maximum, step string) *resourceapi.CapacityRequestPolicy {
	p := &resourceapi.CapacityRequestPolicy{ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: q(minimum)}}
	if def != "" {
		p.Default = q(def)
	}
	if maximum != "" {
		p.ValidRange.Max = q(maximum)
	}
	if step != "" {
		p.ValidRange.Step = q(step)
	}
	return p
}

func valuesPolicy(def string, values ...string) *resourceapi.CapacityRequestPolicy {
	p := &resourceapi.CapacityRequestPolicy{Default: q(def)}
	for _, v := range values {
		p.ValidValues = append(p.ValidValues, resource.MustParse(v))
	}
	return p
}

// capReq is request r of one device asking for capacities ("name", "value", ...).
func capReq(name string, kv ...string) resourceapi.DeviceRequest {
	r := req(name, 1)
	r.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{}}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Exactly.Capacity.Requests[resourceapi.QualifiedName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return r
}

// sharedClaim is a claim already holding a share of n1/device with the
// consumed capacity ("name", "value", ...).
func sharedClaim(name, device string, kv ...string) *resourceapi.ResourceClaim {
	c := allocatedClaim(name, false, "n1", device)
	r := &c.Status.Allocation.Devices.Results[0]
	r.ShareID = shareID(name, "r", deviceID{drv, "n1", device}, 0)
	r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{}
	for i := 0; i+1 < len(kv); i += 2 {
		r.ConsumedCapacity[resourceapi.QualifiedName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return c
}

// consumedIs checks the one result's share ID and consumed capacity.
func consumedIs(kv ...string) func(t *testing.T, r allocator.Result) {
	return func(t *testing.T, r allocator.Result) {
		t.Helper()
		d := r.Allocation.Devices.Results[0]
		if d.ShareID == nil {
			t.Error("a share of a shared device has no share ID")
		}
		if len(d.ConsumedCapacity) != len(kv)/2 {
			t.Errorf("consumed capacity %v, want %v", d.ConsumedCapacity, kv)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			got, ok := d.ConsumedCapacity[resourceapi.QualifiedName(kv[i])]
			if want := resource.MustParse(kv[i+1]); !ok || got.Cmp(want) != 0 {
				t.Errorf("consumed %s = %s, want %s", kv[i], got.String(), kv[i+1])
			}
		}
	}
}

func noShare(t *testing.T, r allocator.Result) {
	t.Helper()
	d := r.Allocation.Devices.Results[0]
	if d.ShareID != nil || d.ConsumedCapacity != nil {
		t.Errorf("an exclusive device has share ID %v and consumed capacity %v", d.ShareID, d.ConsumedCapacity)
	}
}

func TestConsumableCapacity(t *testing.T) {
	memRange := rangePolicy("1Gi", "1Gi", "40Gi", "1Gi")
	bw := valuesPolicy("10G", "10G", "25G", "50G")
	twoReqs := claim("c", capReq("a", "memory", "30Gi"), capReq("b", "memory", "30Gi"))
	all := req("r", 0)
	all.Exactly.AllocationMode = resourceapi.DeviceAllocationModeAll
	all.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("50Gi")}}
	runCases(t, []testCase{
		{name: "a request takes its capacity of a shared device",
			slices: []*resourceapi.ResourceSlice{nodeSlice("n1", shared("gpu-0", "memory", "40Gi", nil))},
			claim:  claim("c", capReq("r", "memory", "10Gi")), want: []string{"r=n1/gpu-0"},
			check: consumedIs("memory", "10Gi")},
		{name: "without a request a share takes the whole capacity",
			slices: []*resourceapi.ResourceSlice{nodeSlice("n1", shared("gpu-0", "memory", "40Gi", nil))},
			claim:  claim("c", req("r", 1)), want: []string{"r=n1/gpu-0"}, check: consumedIs("memory", "40Gi")},
		{name: "without a request a share takes the policy default",
			slices: []*resourceapi.ResourceSlice{nodeSlice("n1", shared("gpu-0", "memory", "40Gi", memRange))},
			claim:  claim("c", req("r", 1)), want: []string{"r=n1/gpu-0"}, check: consumedIs("memory", "1Gi")},
		{name: "a share consumes every capacity of the device",
			slices: []*resourceapi.ResourceSlice{nodeSlice("n1", shared("nic-0", "bandwidth", "100G", bw, "queues", "8", nil))},
			claim:  claim("c", capReq("r", "bandwidth", "20G", "queues", "2")), want: []string{"r=n1/nic-0"},
			check: consumedIs("bandwidth", "25G", "queues", "2")},
		{name: "a request is rounded up to the next step from min",
			slices: []*resourceapi.ResourceSlice{nodeSlice("n1", shared("gpu-0", "memory", "40Gi", rangePolicy("", "2Gi", "", "3Gi")))},
			claim:  claim("c", capReq("r", "memory", "6Gi")), want: []string{"r=n1/gpu-0"}, check: consumedIs("memory", "8Gi")},
		{name: "a request below min consumes min",
			slices: []*resourceapi.ResourceSlice{nodeSlice("n1", shared("gpu-0", "memory", "40Gi", rangePolicy("", "4Gi", "", "")))},
			claim:  claim("c", capReq("r", "memory", "1Mi")), want: []string{"r=n1/gpu-0"}, check: consumedIs("memory", "4Gi")},
		{name: "a fractional request is rounded up to whole units with a step",
			slices: []*resourceapi.ResourceSlice{nodeSlice("n1", shared("cpu-0", "cores", "8", rangePolicy("", "1", "", "1")))},
			claim:  claim("c", capReq("r", "cores", "1500m")), want: []string{"r=n1/cpu-0"}, check: consumedIs("cores", "2")},
		{name: "a request above max does not fit",
			slices: []*resourceapi.ResourceSlice{nodeSlice("n1", shared("gpu-0", "memory", "80Gi", memRange))},
			claim:  claim("c", capReq("r", "memory", "41Gi")), wantErr: allocator.ErrUnsatisfiable},
		{name: "a request above every valid value does not fit",
			slices: []*resourceapi.ResourceSlice{nodeSlice("n1", shared("nic-0", "bandwidth", "100G", bw))},
			claim:  claim("c", capReq("r", "bandwidth", "60G")), wantErr: allocator.ErrUnsatisfiable},
		{name: "a request above the capacity does not fit",
			slices: []*resourceapi.ResourceSlice{nodeSlice("n1", shared("gpu-0", "memory", "40Gi", nil))},
			claim:  claim("c", capReq("r", "memory", "41Gi")), wantErr: allocator.ErrUnsatisfiable},
		{name: "a request for a capacity the device lacks skips the device",
			slices: []*resourceapi.ResourceSlice{nodeSlice("n1", shared("gpu-0", "memory", "40Gi", nil), shared("gpu-1", "memory", "40Gi", nil, "cores", "4", nil))},
			claim:  claim("c", capReq("r", "cores", "1")), want: []string{"r=n1/gpu-1"}},
		{name: "existing shares leave less capacity",
			slices:    []*resourceapi.ResourceSlice{nodeSlice("n1", shared("gpu-0", "memory", "40Gi", nil), shared("gpu-1", "memory", "40Gi", nil))},
			allocated: []*resourceapi.ResourceClaim{sharedClaim("old", "gpu-0", "memory", "35Gi")},
			claim:     claim("c", capReq("r", "memory", "10Gi")), want: []string{"r=n1/gpu-1"}},
		{name: "an existing share leaves the rest to others",
			slices:    []*resourceapi.ResourceSlice{nodeSlice("n1", shared("gpu-0", "memory", "40Gi", nil))},
			allocated: []*resourceapi.ResourceClaim{sharedClaim("old", "gpu-0", "memory", "30Gi")},
			claim:     claim("c", capReq("r", "memory", "10Gi")), want: []string{"r=n1/gpu-0"}},
		{name: "a shared device held without a share ID is exclusive",
			slices:    []*resourceapi.ResourceSlice{nodeSlice("n1", shared("gpu-0", "memory", "40Gi", nil))},
			allocated: []*resourceapi.ResourceClaim{allocatedClaim("old", false, "n1", "gpu-0")},
			claim:     claim("c", capReq("r", "memory", "1Gi")), wantErr: allocator.ErrUnsatisfiable},
		{name: "two requests of one claim share a device",
			slices: []*resourceapi.ResourceSlice{nodeSlice("n1", shared("gpu-0", "memory", "80Gi", nil))},
			claim:  twoReqs, want: []string{"a=n1/gpu-0", "b=n1/gpu-0"},
			check: func(t *testing.T, r allocator.Result) {
				res := r.Allocation.Devices.Results
				if *res[0].ShareID == *res[1].ShareID {
					t.Errorf("two shares of one device have the same ID %s", *res[0].ShareID)
				}
			}},
		{name: "two requests of one claim add up against the capacity",
			slices: []*resourceapi.ResourceSlice{nodeSlice("n1", shared("gpu-0", "memory", "50Gi", nil), shared("gpu-1", "memory", "50Gi", nil))},
			claim:  claim("c", capReq("a", "memory", "30Gi"), capReq("b", "memory", "30Gi")), want: []string{"a=n1/gpu-0", "b=n1/gpu-1"}},
		{name: "an exclusive device checks its capacity but has no share",
			slices: []*resourceapi.ResourceSlice{nodeSlice("n1", withCaps(dev("gpu-0"), "memory", "40Gi", nil))},
			claim:  claim("c", capReq("r", "memory", "10Gi")), want: []string{"r=n1/gpu-0"}, check: noShare},
		{name: "an exclusive device whose full capacity breaks its policy cannot be allocated without a request",
			slices: []*resourceapi.ResourceSlice{nodeSlice("n1", withCaps(dev("gpu-0"), "memory", "40Gi", rangePolicy("", "1Gi", "", "7Gi")))},
			claim:  claim("c", req("r", 1)), wantErr: allocator.ErrUnsatisfiable},
		{name: "a request whose rounding passes int64 makes the claim invalid",
			slices: []*resourceapi.ResourceSlice{nodeSlice("n1", shared("gpu-0", "memory", "40Gi", rangePolicy("", "1", "", "1")))},
			claim:  claim("c", capReq("r", "memory", "1e19")), wantField: "spec.devices.requests[0].exactly.capacity.requests"},
		{name: "all devices: those whose capacity could never serve the request are not counted",
			slices: []*resourceapi.ResourceSlice{nodeSlice("n1", shared("gpu-0", "memory", "40Gi", nil), shared("gpu-1", "memory", "80Gi", nil), shared("gpu-2", "memory", "80Gi", nil))},
			claim:  claim("c", all), want: []string{"r=n1/gpu-1", "r=n1/gpu-2"}},
		{name: "all devices: one whose capacity is taken fails the request",
			slices:    []*resourceapi.ResourceSlice{nodeSlice("n1", shared("gpu-1", "memory", "80Gi", nil), shared("gpu-2", "memory", "80Gi", nil))},
			allocated: []*resourceapi.ResourceClaim{sharedClaim("old", "gpu-2", "memory", "40Gi")},
			claim:     claim("c", all), wantErr: allocator.ErrUnsatisfiable},
	})
}

// TestSharedCounters: the counters of a shared device are charged once, by
// its first share, whether recorded or chosen in the same search.
func TestSharedCounters(t *testing.T) {
	slices := func() []*resourceapi.ResourceSlice {
		out := []*resourceapi.ResourceSlice{
			counterSlice("counters", "n1", 2, "set", map[string]string{"mem": "10"}),
			poolSlice("devs", "n1", 2,
				consumes(shared("gpu-0", "memory", "40Gi", nil), "set", map[string]string{"mem": "6"}),
				consumes(dev("gpu-1"), "set", map[string]string{"mem": "6"})),
		}
		for _, s := range out {
			s.Spec.AllNodes, s.Spec.NodeName = nil, ptr.To("n1")
		}
		return out
	}
	runCases(t, []testCase{
		{name: "a second share does not charge the counters again",
			slices: slices(), allocated: []*resourceapi.ResourceClaim{sharedClaim("old", "gpu-0", "memory", "10Gi")},
			claim: claim("c", capReq("r", "memory", "10Gi")), want: []string{"r=n1/gpu-0"}},
		{name: "a shared device in use holds its counters",
			slices: slices(), allocated: []*resourceapi.ResourceClaim{sharedClaim("old", "gpu-0", "memory", "10Gi")},
			claim: claim("c", req("r", 1, `!device.allowMultipleAllocations`)), wantErr: allocator.ErrUnsatisfiable},
		{name: "two shares chosen together charge once",
			slices: slices(),
			claim:  claim("c", capReq("a", "memory", "10Gi"), capReq("b", "memory", "10Gi")), want: []string{"a=n1/gpu-0", "b=n1/gpu-0"}},
	})
}

// TestNVIDIAConsumableShares: a GPU published with allowMultipleAllocations
// and a memory capacity whose policy hands out 1Gi steps (as NVIDIA's
// driver does for consumable GPU shares) serves 16 claims of 5Gi out of
// 80Gi, one after the other, and refuses the 17th. Each share carries its
// own share ID and consumes 5Gi.
func TestNVIDIAConsumableShares(t *testing.T) {
	gpu := shared("gpu-0", "memory", "80Gi", rangePolicy("1Gi", "1Gi", "80Gi", "1Gi"))
	gpu.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"productName": {StringValue: ptr.To("NVIDIA H100 80GB HBM3")},
		"type":        {StringValue: ptr.To("gpu")},
	}
	s := newTestSession(t, allocator.Inputs{Slices: []*resourceapi.ResourceSlice{nodeSlice("n1", gpu)}})
	ids := map[string]bool{}
	for i := range 17 {
		c := claim(fmt.Sprintf("share-%d", i), capReq("gpu", "memory", "5Gi"))
		res, err := s.Allocate(context.Background(), []*resourceapi.ResourceClaim{c}, allocator.Options{})
		if i == 16 {
			if err == nil {
				t.Fatalf("claim 17 got %v; 16 claims of 5Gi fill 80Gi", picked(res[0]))
			}
			return
		}
		if err != nil {
			t.Fatalf("claim %d: %v", i+1, err)
		}
		r := res[0].Allocation.Devices.Results[0]
		if r.ShareID == nil || ids[string(*r.ShareID)] {
			t.Fatalf("claim %d: share ID %v missing or reused", i+1, r.ShareID)
		}
		ids[string(*r.ShareID)] = true
		if got := r.ConsumedCapacity["memory"]; got.Cmp(resource.MustParse("5Gi")) != 0 {
			t.Errorf("claim %d consumes %s, want 5Gi", i+1, got.String())
		}
		c.Status.Allocation = res[0].Allocation
		if err := s.Record(c); err != nil {
			t.Fatal(err)
		}
	}
}

// TestShareIDsAreReproducible: the same inputs give the same share IDs, in
// the UUID form the API server accepts.
func TestShareIDsAreReproducible(t *testing.T) {
	in := allocator.Inputs{Slices: []*resourceapi.ResourceSlice{nodeSlice("n1", shared("gpu-0", "memory", "80Gi", nil))}}
	var first string
	for range 3 {
		_, r, err := allocateOne(t, newTestSession(t, in), claim("c", capReq("r", "memory", "1Gi")), allocator.Options{})
		if err != nil {
			t.Fatal(err)
		}
		id := string(*r.Allocation.Devices.Results[0].ShareID)
		if first == "" {
			first = id
		} else if id != first {
			t.Errorf("share ID %s, then %s", first, id)
		}
	}
	if len(first) != 36 || first[14] != '5' {
		t.Errorf("share ID %q is not a version-5 UUID", first)
	}
}

// TestConsumedCapacityKeepsTheRequestsForm: a share's consumed capacity is
// the request (or the policy's default) as written, in the same internal
// form, as kube-scheduler returns it, even when comparing it with a
// capacity beyond int64 would convert it (upstream's
// consumable-capacity-requests-are-not-modified). The claim and the slice
// are left as they were.
func TestConsumedCapacityKeepsTheRequestsForm(t *testing.T) {
	two := *resource.NewQuantity(2, resource.BinarySI)
	huge := resource.MustParse("1000000000000000000000")
	d := shared("d0", "mem", "1000000000000000000002", &resourceapi.CapacityRequestPolicy{
		Default:    ptr.To(huge.DeepCopy()),
		ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(two.DeepCopy())},
	})
	slice := nodeSlice("n1", d)
	r0, r1 := req("r0", 1), req("r1", 1)
	r0.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"mem": two}}
	r1.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"mem": huge}}
	c := claim("c", r0, r1)
	slices := []*resourceapi.ResourceSlice{slice}
	before, claimBefore := slice.DeepCopy(), c.DeepCopy()

	f := allocator.Features{ConsumableCapacity: true}
	s := newTestSession(t, allocator.Inputs{Slices: slices, Features: &f})
	_, res, err := allocateOne(t, s, c, allocator.Options{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]resource.Quantity{"r0": two.DeepCopy(), "r1": huge.DeepCopy()}
	for _, r := range res.Allocation.Devices.Results {
		got := r.ConsumedCapacity["mem"]
		if w := want[r.Request]; !reflect.DeepEqual(got.DeepCopy(), w) {
			t.Errorf("request %s consumed %#v, want the request as written, %#v", r.Request, got, w)
		}
	}
	if !reflect.DeepEqual(slice.DeepCopy(), before) {
		t.Errorf("the slice changed")
	}
	if !reflect.DeepEqual(c.DeepCopy(), claimBefore) {
		t.Errorf("the claim changed")
	}
}
