package clusterprobe

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// probeDriver is a driver name no real driver uses, so a dry-run write can
// never be confused with real data.
const probeDriver = "probe.drastack.io"

func probeSlice(name string, dev resourceapi.Device, perDevice bool) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "drastack-probe-" + name},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:  probeDriver,
			Pool:    resourceapi.ResourcePool{Name: "probe-" + name, Generation: 1, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{dev},
		},
	}
	if perDevice {
		s.Spec.PerDeviceNodeSelection = ptr.To(true)
	} else {
		s.Spec.AllNodes = ptr.To(true)
	}
	return s
}

// partitionableSlice uses per-device node selection and counter
// consumption (KEP-4815). The counter set lives in another slice of the
// pool, which admission does not check.
func partitionableSlice() *resourceapi.ResourceSlice {
	return probeSlice("partitionable", resourceapi.Device{
		Name:     "dev",
		AllNodes: ptr.To(true),
		ConsumesCounters: []resourceapi.DeviceCounterConsumption{{
			CounterSet: "set",
			Counters:   map[string]resourceapi.Counter{"memory": {Value: resource.MustParse("1Gi")}},
		}},
	}, true)
}

// listAttributeSlice uses a list-valued attribute (KEP-5491).
func listAttributeSlice() *resourceapi.ResourceSlice {
	return probeSlice("list-attributes", resourceapi.Device{
		Name: "dev",
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"roots": {StringValues: []string{"a", "b"}},
		},
	}, false)
}

// taintSlice uses a device taint (KEP-5055).
func taintSlice() *resourceapi.ResourceSlice {
	return probeSlice("taints", resourceapi.Device{
		Name:   "dev",
		Taints: []resourceapi.DeviceTaint{{Key: "drastack.io/probe", Effect: resourceapi.DeviceTaintEffectNoSchedule}},
	}, false)
}

// prioritizedListClaim uses firstAvailable (KEP-4816).
func prioritizedListClaim(namespace string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "drastack-probe-prioritized-list", Namespace: namespace},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "req",
			FirstAvailable: []resourceapi.DeviceSubRequest{{
				Name: "sub", DeviceClassName: "probe.drastack.io", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
			}},
		}}}},
	}
}
