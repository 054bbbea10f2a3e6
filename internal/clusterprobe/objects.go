package clusterprobe

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The probe objects. Gated fields share one object only where the server
// dropping one of them cannot make the write of the others fail: a refused
// write says nothing about the other fields it carried. Fields whose loss
// makes the object invalid (per-device node selection, list attribute
// values, firstAvailable) therefore have an object of their own, and so has
// adminAccess, which the server refuses in a namespace without the admin
// label even when the gate is on.

// probeDriver is a driver name no real driver uses, so a dry-run write can
// never be confused with real data.
const probeDriver = "probe.drastack.io"

// Names used inside the probe objects.
const (
	// probeClass is the DeviceClass the probe claims name; it need not exist.
	probeClass = "probe.drastack.io"
	// partitionTypeAttr is the attribute partitionTypeAttribute names.
	partitionTypeAttr = probeDriver + "/partition"
	// capacityName is the consumable capacity of the device-features slice
	// and the capacity the request-features claim asks for.
	capacityName resourceapi.QualifiedName = "memory"
	// derivedAttr is the derived attribute of the request-features claim. A
	// domain no driver uses, so it cannot shadow a real attribute.
	derivedAttr resourceapi.FullyQualifiedName = "derived.drastack.io/probe"
	// extendedResource is the extended resource name of the probe class.
	extendedResource = "drastack.io/probe"
)

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
	return probeSlice("partitionable", partitionableDevice(), true)
}

func partitionableDevice() resourceapi.Device {
	return resourceapi.Device{
		Name:     "dev",
		AllNodes: ptr.To(true),
		ConsumesCounters: []resourceapi.DeviceCounterConsumption{{
			CounterSet: "set",
			Counters:   map[string]resourceapi.Counter{"memory": {Value: resource.MustParse("1Gi")}},
		}},
	}
}

// partitionFeaturesSlice is partitionableSlice plus the two alpha
// extensions of partitionable devices: compatibility groups on the counter
// consumption (KEP-5963) and a partition type attribute. The server refuses
// partitionTypeAttribute on a slice whose devices consume no counters, so
// both need partitionable devices, and they are kept apart from
// partitionableSlice so that an alpha field can never cost the answer for
// partitionable devices.
func partitionFeaturesSlice() *resourceapi.ResourceSlice {
	dev := partitionableDevice()
	dev.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		partitionTypeAttr: {StringValue: ptr.To("full")},
	}
	dev.ConsumesCounters[0].CompatibilityGroups = []string{"probe"}
	s := probeSlice("partition-features", dev, true)
	s.Spec.PartitionTypeAttribute = ptr.To(resourceapi.FullyQualifiedName(partitionTypeAttr))
	return s
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

// deviceFeaturesSlice carries the device fields whose loss leaves a valid
// slice: a taint (KEP-5055), binding conditions (KEP-5007), consumable
// capacity (KEP-5075: allowMultipleAllocations with a requestPolicy; both
// fall under one gate, so one is never dropped without the other) and
// skipNodeOperations (KEP-5945).
func deviceFeaturesSlice() *resourceapi.ResourceSlice {
	s := probeSlice("device-features", resourceapi.Device{
		Name:                     "dev",
		Taints:                   []resourceapi.DeviceTaint{{Key: "drastack.io/probe", Effect: resourceapi.DeviceTaintEffectNoSchedule}},
		BindsToNode:              ptr.To(true),
		BindingConditions:        []string{"drastack.io/probe-ready"},
		BindingFailureConditions: []string{"drastack.io/probe-failed"},
		AllowMultipleAllocations: ptr.To(true),
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			capacityName: {
				Value:         resource.MustParse("8Gi"),
				RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: ptr.To(resource.MustParse("1Gi"))},
			},
		},
	}, false)
	s.Spec.SkipNodeOperations = []resourceapi.SkipNodeOperation{resourceapi.SkipNodeOperationAll}
	return s
}

func probeClaim(name, namespace string, requests ...resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "drastack-probe-" + name, Namespace: namespace},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: requests}},
	}
}

// prioritizedListClaim uses firstAvailable (KEP-4816).
func prioritizedListClaim(namespace string) *resourceapi.ResourceClaim {
	return probeClaim("prioritized-list", namespace, resourceapi.DeviceRequest{
		Name: "req",
		FirstAvailable: []resourceapi.DeviceSubRequest{{
			Name: "sub", DeviceClassName: probeClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
		}},
	})
}

// requestFeaturesClaim carries the request fields whose loss leaves a valid
// claim: a capacity request (KEP-5075) and a derived attribute (KEP-6080).
// The server refuses a derived attribute no constraint uses, so a
// matchAttribute constraint uses it; matchAttribute itself is not gated,
// and without the derived attribute it is still a valid constraint.
func requestFeaturesClaim(namespace string) *resourceapi.ResourceClaim {
	c := probeClaim("request-features", namespace, resourceapi.DeviceRequest{
		Name: "req",
		Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: probeClass,
			AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
			Count:           1,
			Capacity: &resourceapi.CapacityRequirements{
				Requests: map[resourceapi.QualifiedName]resource.Quantity{capacityName: resource.MustParse("1Gi")},
			},
			DerivedAttributes: []resourceapi.DeviceDerivedAttribute{{Name: derivedAttr, Expression: "device.driver"}},
		},
	})
	c.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{Requests: []string{"req"}, MatchAttribute: ptr.To(derivedAttr)}}
	return c
}

// adminAccessClaim asks for admin access (KEP-5018). With the gate on, the
// server refuses it in a namespace without the label
// resource.kubernetes.io/admin-access=true, naming the adminAccess field.
func adminAccessClaim(namespace string) *resourceapi.ResourceClaim {
	return probeClaim("admin-access", namespace, resourceapi.DeviceRequest{
		Name: "req",
		Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: probeClass,
			AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
			Count:           1,
			AdminAccess:     ptr.To(true),
		},
	})
}

// extendedResourceClass maps an extended resource to a DeviceClass
// (KEP-5004).
func extendedResourceClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: "drastack-probe-extended-resource"},
		Spec:       resourceapi.DeviceClassSpec{ExtendedResourceName: ptr.To(extendedResource)},
	}
}
