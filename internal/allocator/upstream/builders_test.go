package upstream

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const driver = "gpu.example.com"

func node(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func class(name string) *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", driver)},
		}}},
	}
}

func dev(name string, attrs map[string]resourceapi.DeviceAttribute) resourceapi.Device {
	d := resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}}
	for k, v := range attrs {
		d.Attributes[resourceapi.QualifiedName(k)] = v
	}
	return d
}

func intAttr(v int64) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{IntValue: &v} }

func slice(name, pool string, devices ...resourceapi.Device) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:  driver,
			Pool:    resourceapi.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: 1},
			Devices: devices,
		},
	}
}

func onNode(s *resourceapi.ResourceSlice, n string) *resourceapi.ResourceSlice {
	s.Spec.NodeName = ptr.To(n)
	return s
}

func allNodes(s *resourceapi.ResourceSlice) *resourceapi.ResourceSlice {
	s.Spec.AllNodes = ptr.To(true)
	return s
}

func counterSlice(name, pool, set string, value int64) *resourceapi.ResourceSlice {
	s := slice(name, pool)
	s.Spec.SharedCounters = []resourceapi.CounterSet{{
		Name:     set,
		Counters: map[string]resourceapi.Counter{"mem": {Value: *resource.NewQuantity(value, resource.DecimalSI)}},
	}}
	return s
}

func consumes(d resourceapi.Device, set string, value int64) resourceapi.Device {
	d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{
		CounterSet: set,
		Counters:   map[string]resourceapi.Counter{"mem": {Value: *resource.NewQuantity(value, resource.DecimalSI)}},
	}}
	return d
}

type reqOpt func(*resourceapi.ExactDeviceRequest)

func count(n int64) reqOpt {
	return func(r *resourceapi.ExactDeviceRequest) { r.Count = n }
}

func selector(expr string) reqOpt {
	return func(r *resourceapi.ExactDeviceRequest) {
		r.Selectors = append(r.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: expr}})
	}
}

func admin() reqOpt {
	return func(r *resourceapi.ExactDeviceRequest) { r.AdminAccess = ptr.To(true) }
}

func claim(name string, opts ...reqOpt) *resourceapi.ResourceClaim {
	req := &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
	for _, o := range opts {
		o(req)
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: req}},
		}},
	}
}

func matchAttr(c *resourceapi.ResourceClaim, attr string) *resourceapi.ResourceClaim {
	c.Spec.Devices.Constraints = append(c.Spec.Devices.Constraints, resourceapi.DeviceConstraint{
		MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(attr)),
	})
	return c
}
