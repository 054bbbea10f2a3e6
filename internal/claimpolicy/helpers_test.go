package claimpolicy

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

// active is a configuration with gating on and class "tpu" immediate.
var active = Config{Active: true, Engine: "native", GatePods: true, ImmediateClasses: []string{"tpu"}}

type claimOpt func(*resourceapi.ResourceClaim)

func claim(name string, opts ...claimOpt) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
			{Name: "req", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu"}},
		}}},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

func withCEL(c *resourceapi.ResourceClaim) {
	c.Annotations = map[string]string{allocator.CELConstraintsAnnotation: `[{"expression": "true"}]`}
}

func withImmediateLabel(c *resourceapi.ResourceClaim) {
	c.Labels = map[string]string{AllocationLabel: AllocationImmediate}
}

func withClass(class string) claimOpt {
	return func(c *resourceapi.ResourceClaim) { c.Spec.Devices.Requests[0].Exactly.DeviceClassName = class }
}

func withFirstAvailable(classes ...string) claimOpt {
	return func(c *resourceapi.ResourceClaim) {
		var subs []resourceapi.DeviceSubRequest
		for i, cl := range classes {
			subs = append(subs, resourceapi.DeviceSubRequest{Name: "s" + string(rune('0'+i)), DeviceClassName: cl})
		}
		c.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "req", FirstAvailable: subs}}
	}
}

func deleting(c *resourceapi.ResourceClaim) {
	c.DeletionTimestamp = ptr.To(metav1.Now())
}

func reserved(c *resourceapi.ResourceClaim) {
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "pod-uid"}}
}

// allocated gives the claim devices "driver/pool/device" (prefix "admin:"
// for adminAccess), allocated at second sec.
func allocated(sec int, devices ...string) claimOpt {
	return func(c *resourceapi.ResourceClaim) {
		a := &resourceapi.AllocationResult{AllocationTimestamp: ptr.To(metav1.NewTime(time.Unix(int64(1000+sec), 0)))}
		for _, d := range devices {
			admin := false
			if len(d) > 6 && d[:6] == "admin:" {
				admin, d = true, d[6:]
			}
			var drv, pl, dev string
			parts := splitN(d)
			drv, pl, dev = parts[0], parts[1], parts[2]
			r := resourceapi.DeviceRequestAllocationResult{Request: "req", Driver: drv, Pool: pl, Device: dev}
			if admin {
				r.AdminAccess = ptr.To(true)
			}
			a.Devices.Results = append(a.Devices.Results, r)
		}
		c.Status.Allocation = a
	}
}

func splitN(s string) [3]string {
	var out [3]string
	i := 0
	start := 0
	for j := 0; j < len(s) && i < 2; j++ {
		if s[j] == '/' {
			out[i] = s[start:j]
			i++
			start = j + 1
		}
	}
	out[2] = s[start:]
	return out
}

// managedBy records manager as the writer of status.allocation.
func managedBy(manager string) claimOpt {
	return func(c *resourceapi.ResourceClaim) {
		c.ManagedFields = append(c.ManagedFields, metav1.ManagedFieldsEntry{
			Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status",
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:allocation":{".":{},"f:devices":{}}}}`)},
		})
	}
}

func template(name string, labels, annotations map[string]string, class string) *resourceapi.ResourceClaimTemplate {
	return &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
				{Name: "req", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}},
			}}},
		},
	}
}

type podOpt func(*corev1.Pod)

func pod(opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pod"}}
	for _, o := range opts {
		o(p)
	}
	return p
}

func usesClaim(entry, claimName string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: entry, ResourceClaimName: ptr.To(claimName)})
	}
}

func usesTemplate(entry, tmpl string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: entry, ResourceClaimTemplateName: ptr.To(tmpl)})
	}
}

// generated records that kube-controller-manager created claimName for
// entry ("" records that no claim was needed).
func generated(entry, claimName string) podOpt {
	return func(p *corev1.Pod) {
		st := corev1.PodResourceClaimStatus{Name: entry}
		if claimName != "" {
			st.ResourceClaimName = ptr.To(claimName)
		}
		p.Status.ResourceClaimStatuses = append(p.Status.ResourceClaimStatuses, st)
	}
}

func gated(names ...string) podOpt {
	return func(p *corev1.Pod) {
		for _, n := range names {
			p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: n})
		}
	}
}

func claimsByName(cs ...*resourceapi.ResourceClaim) ClaimLookup {
	return func(name string) (*resourceapi.ResourceClaim, bool) {
		for _, c := range cs {
			if c.Name == name {
				return c, true
			}
		}
		return nil, false
	}
}

func templatesByName(ts ...*resourceapi.ResourceClaimTemplate) TemplateLookup {
	return func(name string) (*resourceapi.ResourceClaimTemplate, bool) {
		for _, t := range ts {
			if t.Name == name {
				return t, true
			}
		}
		return nil, false
	}
}

// nodePool is pool d/p: one node-local slice with the devices.
func nodePool(devices ...resourceapi.Device) []*resourceapi.ResourceSlice {
	return []*resourceapi.ResourceSlice{{
		ObjectMeta: metav1.ObjectMeta{Name: "devices", UID: "slice-devices"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   "d",
			Pool:     resourceapi.ResourcePool{Name: "p", Generation: 1, ResourceSliceCount: 1},
			NodeName: ptr.To("node"),
			Devices:  devices,
		},
	}}
}

// counterPool is pool d/p of two slices for all nodes: the counter sets
// and the devices.
func counterPool(sets []resourceapi.CounterSet, devices ...resourceapi.Device) []*resourceapi.ResourceSlice {
	spec := func(name string) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("slice-" + name)},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:   "d",
				Pool:     resourceapi.ResourcePool{Name: "p", Generation: 1, ResourceSliceCount: 2},
				AllNodes: ptr.To(true),
			},
		}
	}
	counters, devs := spec("counters"), spec("devices")
	counters.Spec.SharedCounters = sets
	devs.Spec.Devices = devices
	return []*resourceapi.ResourceSlice{counters, devs}
}

func device(name string) resourceapi.Device { return resourceapi.Device{Name: name} }

func sharedDevice(name string) resourceapi.Device {
	return resourceapi.Device{Name: name, AllowMultipleAllocations: ptr.To(true)}
}

func consuming(name, set, counter, amount string) resourceapi.Device {
	return resourceapi.Device{Name: name, ConsumesCounters: []resourceapi.DeviceCounterConsumption{{
		CounterSet: set, Counters: map[string]resourceapi.Counter{counter: {Value: resource.MustParse(amount)}},
	}}}
}

func counterSet(name string, counters map[string]string) resourceapi.CounterSet {
	cs := resourceapi.CounterSet{Name: name, Counters: map[string]resourceapi.Counter{}}
	for k, v := range counters {
		cs.Counters[k] = resourceapi.Counter{Value: resource.MustParse(v)}
	}
	return cs
}
