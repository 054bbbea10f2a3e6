package claimpolicy

import (
	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/allocator"
)

// EngineFeatures turns what the cluster probe found (DRAStack
// status.cluster) into the feature switches the engine takes, so that the
// operator allocates exactly as kube-scheduler on that cluster would: a
// field behind a gate the cluster lacks is treated as kube-scheduler treats
// it with that gate off. Nil when the cluster was not probed yet: the
// engine then uses its defaults (allocator.DefaultFeatures).
//
// The probe sees the API server's gates; kube-scheduler's are assumed to be
// the same, as in any cluster set up with one gate list.
func EngineFeatures(cs *v1alpha1.ClusterStatus) *allocator.Features {
	if cs == nil || cs.LastProbeTime == nil {
		return nil
	}
	f := cs.Features
	return &allocator.Features{
		AdminAccess:               f.AdminAccess,
		CompatibilityGroups:       f.CompatibilityGroups,
		ConsumableCapacity:        f.ConsumableCapacity,
		DerivedAttributes:         f.DerivedAttributes,
		DeviceBindingConditions:   f.BindingConditions,
		ResourceClaimDeviceStatus: f.BindingConditions,
		DeviceTaints:              f.DeviceTaints,
		DeviceTaintRules:          f.DeviceTaintRules,
		ListTypeAttributes:        f.ListTypeAttributes,
		OptionalNodeOperations:    f.OptionalNodeOperations,
		PartitionableDevices:      f.PartitionableDevices,
		PrioritizedList:           f.PrioritizedList,
		// Not probed (no API field shows it): 1.37's default.
		FractionalCapacityRange: allocator.Kubernetes137Features().FractionalCapacityRange,
	}
}
