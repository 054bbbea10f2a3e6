package native

import (
	"context"
	"fmt"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

const drv = "gpu.example.com"

// dev builds a device; attrs are name/value pairs (string, int, bool,
// []string or []int64 values).
func dev(name string, attrs ...any) resourceapi.Device {
	d := resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}}
	for i := 0; i+1 < len(attrs); i += 2 {
		d.Attributes[resourceapi.QualifiedName(attrs[i].(string))] = attr(attrs[i+1])
	}
	return d
}

func attr(v any) resourceapi.DeviceAttribute {
	switch v := v.(type) {
	case string:
		return resourceapi.DeviceAttribute{StringValue: &v}
	case int:
		return resourceapi.DeviceAttribute{IntValue: ptr.To(int64(v))}
	case bool:
		return resourceapi.DeviceAttribute{BoolValue: &v}
	case []string:
		return resourceapi.DeviceAttribute{StringValues: v}
	case []int64:
		return resourceapi.DeviceAttribute{IntValues: v}
	}
	panic(fmt.Sprintf("unsupported attribute %T", v))
}

func consumes(d resourceapi.Device, set string, counters map[string]string) resourceapi.Device {
	cc := resourceapi.DeviceCounterConsumption{CounterSet: set, Counters: map[string]resourceapi.Counter{}}
	for k, v := range counters {
		cc.Counters[k] = resourceapi.Counter{Value: resource.MustParse(v)}
	}
	d.ConsumesCounters = append(d.ConsumesCounters, cc)
	return d
}

func tainted(d resourceapi.Device, key string, effect resourceapi.DeviceTaintEffect) resourceapi.Device {
	d.Taints = append(d.Taints, resourceapi.DeviceTaint{Key: key, Value: "true", Effect: effect})
	return d
}

// nodeSlice is a complete one-slice pool named after its node.
func nodeSlice(node string, devs ...resourceapi.Device) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + drv},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   drv,
			Pool:     resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
			NodeName: ptr.To(node),
			Devices:  devs,
		},
	}
}

// poolSlice is one slice of a pool; edit the returned spec for node selection.
func poolSlice(name, pool string, count int64, devs ...resourceapi.Device) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   drv,
			Pool:     resourceapi.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: count},
			AllNodes: ptr.To(true),
			Devices:  devs,
		},
	}
}

func counterSlice(name, pool string, count int64, set string, counters map[string]string) *resourceapi.ResourceSlice {
	s := poolSlice(name, pool, count)
	cs := resourceapi.CounterSet{Name: set, Counters: map[string]resourceapi.Counter{}}
	for k, v := range counters {
		cs.Counters[k] = resourceapi.Counter{Value: resource.MustParse(v)}
	}
	s.Spec.SharedCounters = []resourceapi.CounterSet{cs}
	return s
}

func class(name string, exprs ...string) *resourceapi.DeviceClass {
	c := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, e := range exprs {
		c.Spec.Selectors = append(c.Spec.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: e}})
	}
	return c
}

func node(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// req is an exactly request of the "gpu" class.
func req(name string, count int64, selectors ...string) resourceapi.DeviceRequest {
	r := resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu", Count: count, AllocationMode: resourceapi.DeviceAllocationModeExactCount}}
	for _, e := range selectors {
		r.Exactly.Selectors = append(r.Exactly.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: e}})
	}
	return r
}

func sel(expr string) []resourceapi.DeviceSelector {
	return []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}
}

func claim(name string, reqs ...resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: ktypes.UID("uid-" + name)},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: reqs}},
	}
}

func match(attr string, reqs ...string) resourceapi.DeviceConstraint {
	return resourceapi.DeviceConstraint{Requests: reqs, MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(attr))}
}

func distinct(attr string, reqs ...string) resourceapi.DeviceConstraint {
	return resourceapi.DeviceConstraint{Requests: reqs, DistinctAttribute: ptr.To(resourceapi.FullyQualifiedName(attr))}
}

func withConstraints(c *resourceapi.ResourceClaim, cons ...resourceapi.DeviceConstraint) *resourceapi.ResourceClaim {
	c.Spec.Devices.Constraints = append(c.Spec.Devices.Constraints, cons...)
	return c
}

func withCEL(c *resourceapi.ResourceClaim, annotation string) *resourceapi.ResourceClaim {
	c.Annotations = map[string]string{allocator.CELConstraintsAnnotation: annotation}
	return c
}

// allocatedClaim is a claim that already holds the named devices of drv.
func allocatedClaim(name string, adminAccess bool, poolDevices ...string) *resourceapi.ResourceClaim {
	c := claim(name)
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for i := 0; i+1 < len(poolDevices); i += 2 {
		r := resourceapi.DeviceRequestAllocationResult{Request: "r", Driver: drv, Pool: poolDevices[i], Device: poolDevices[i+1]}
		if adminAccess {
			r.AdminAccess = ptr.To(true)
		}
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, r)
	}
	return c
}

func newTestSession(t *testing.T, in allocator.Inputs) *Session {
	t.Helper()
	if in.Classes == nil {
		in.Classes = []*resourceapi.DeviceClass{class("gpu")}
	}
	s, err := newSession(context.Background(), newEngine(), in)
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	return s
}

// picked lists the allocated devices of a result as "request=pool/device".
func picked(r allocator.Result) []string {
	var out []string
	for _, d := range r.Allocation.Devices.Results {
		out = append(out, d.Request+"="+d.Pool+"/"+d.Device)
	}
	sort.Strings(out)
	return out
}

// allocateOne runs Allocate for one claim and returns its devices.
func allocateOne(t *testing.T, s *Session, c *resourceapi.ResourceClaim, opts allocator.Options) ([]string, allocator.Result, error) {
	t.Helper()
	res, err := s.Allocate(context.Background(), []*resourceapi.ResourceClaim{c}, opts)
	if err != nil {
		return nil, allocator.Result{}, err
	}
	if len(res) != 1 {
		t.Fatalf("got %d results for one claim", len(res))
	}
	return picked(res[0]), res[0], nil
}
