package stack

import (
	"fmt"
	"slices"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// Feature is one field of status.cluster.features: its JSON name, the
// Kubernetes feature gate behind it, and how to read it.
type Feature struct {
	// Name is the JSON name in status.cluster.features.
	Name string
	// Gate names the Kubernetes feature gate(s) that turn it on, for
	// messages that tell an administrator what to enable.
	Gate string
	// has reads the feature from a probe result.
	has func(*v1alpha1.ClusterFeatures) bool
}

// Features are every feature a spec can need or a driver can declare in
// spec.drivers[].requiredFeatures, in the order of ClusterFeatures.
var Features = []Feature{
	{"partitionableDevices", "DRAPartitionableDevices", func(f *v1alpha1.ClusterFeatures) bool { return f.PartitionableDevices }},
	{"listTypeAttributes", "DRAListTypeAttributes", func(f *v1alpha1.ClusterFeatures) bool { return f.ListTypeAttributes }},
	{"deviceTaints", "DRADeviceTaints", func(f *v1alpha1.ClusterFeatures) bool { return f.DeviceTaints }},
	{"deviceTaintRules", "DRADeviceTaintRules", func(f *v1alpha1.ClusterFeatures) bool { return f.DeviceTaintRules }},
	{"prioritizedList", "DRAPrioritizedList", func(f *v1alpha1.ClusterFeatures) bool { return f.PrioritizedList }},
	{"consumableCapacity", "DRAConsumableCapacity", func(f *v1alpha1.ClusterFeatures) bool { return f.ConsumableCapacity }},
	{"bindingConditions", "DRADeviceBindingConditions and DRAResourceClaimDeviceStatus", func(f *v1alpha1.ClusterFeatures) bool { return f.BindingConditions }},
	{"compatibilityGroups", "DRADeviceCompatibilityGroups", func(f *v1alpha1.ClusterFeatures) bool { return f.CompatibilityGroups }},
	{"partitionType", "DRAPartitionableDevicesType", func(f *v1alpha1.ClusterFeatures) bool { return f.PartitionType }},
	{"optionalNodeOperations", "DRAOptionalNodeOperations", func(f *v1alpha1.ClusterFeatures) bool { return f.OptionalNodeOperations }},
	{"derivedAttributes", "DRADerivedAttributes", func(f *v1alpha1.ClusterFeatures) bool { return f.DerivedAttributes }},
	{"adminAccess", "DRAAdminAccess", func(f *v1alpha1.ClusterFeatures) bool { return f.AdminAccess }},
	{"extendedResources", "DRAExtendedResource", func(f *v1alpha1.ClusterFeatures) bool { return f.ExtendedResources }},
	{"resourcePoolStatusRequests", "DRAResourcePoolStatus", func(f *v1alpha1.ClusterFeatures) bool { return f.ResourcePoolStatusRequests }},
	{"granularStatusAuthorization", "DRAResourceClaimGranularStatusAuthorization", func(f *v1alpha1.ClusterFeatures) bool { return f.GranularStatusAuthorization }},
}

// lookupFeature finds a feature by its JSON name.
func lookupFeature(name string) (Feature, bool) {
	i := slices.IndexFunc(Features, func(f Feature) bool { return f.Name == name })
	if i < 0 {
		return Feature{}, false
	}
	return Features[i], true
}

// HasFeature reads a feature by its JSON name; an unknown name is false.
func HasFeature(f *v1alpha1.ClusterFeatures, name string) bool {
	feat, ok := lookupFeature(name)
	return ok && feat.has(f)
}

// FeatureGate returns the feature gate(s) behind a feature, or "" for an
// unknown name.
func FeatureGate(name string) string {
	feat, _ := lookupFeature(name)
	return feat.Gate
}

// Requirement is a cluster feature the spec needs, with the field that needs it.
type Requirement struct {
	// Feature is the JSON name in status.cluster.features.
	Feature string
	// Field is the spec field that needs it, for example spec.multiHost.
	Field string
}

// String reads "spec.multiHost needs partitionableDevices (feature gate
// DRAPartitionableDevices)".
func (r Requirement) String() string {
	if gate := FeatureGate(r.Feature); gate != "" {
		return fmt.Sprintf("%s needs %s (feature gate %s)", r.Field, r.Feature, gate)
	}
	return fmt.Sprintf("%s needs %s", r.Field, r.Feature)
}

// Requirements lists the cluster features a spec needs:
//   - spec.multiHost: the publisher writes counters with per-device node
//     selection and list-valued attributes.
//   - spec.claims.central: see centralRequirements.
func Requirements(spec *v1alpha1.DRAStackSpec) []Requirement {
	var reqs []Requirement
	if len(spec.MultiHost) > 0 {
		reqs = append(reqs,
			Requirement{Feature: "partitionableDevices", Field: "spec.multiHost"},
			Requirement{Feature: "listTypeAttributes", Field: "spec.multiHost"})
	}
	published := make([]string, 0, len(spec.MultiHost))
	for _, m := range spec.MultiHost {
		published = append(published, m.Driver)
	}
	entries := make([]centralEntry, len(spec.Claims.Central))
	for i, c := range spec.Claims.Central {
		entries[i] = centralEntry{driver: c.Driver, nodeLocal: c.NodeSelector != nil}
	}
	reqs = append(reqs, centralRequirements(entries, published)...)
	return reqs
}

// centralEntry is what the feature requirements read of one
// spec.claims.central entry.
type centralEntry struct {
	driver string
	// nodeLocal: the entry selects node-local pools by nodeSelector.
	nodeLocal bool
}

// centralRequirements says what keeps each spec.claims.central entry's
// devices away from kube-scheduler. The operator taints them NoSchedule:
// in the devices of the slices it publishes itself (spec.multiHost drivers,
// published), which needs deviceTaints, and through DeviceTaintRules for
// every other pool, a driver's own node-local pools above all, which needs
// deviceTaintRules. An entry of a published driver without nodeSelector
// needs only deviceTaints here; whether that driver also has node-local
// pools of its own shows only in the slices, not in the spec.
func centralRequirements(entries []centralEntry, published []string) []Requirement {
	var reqs []Requirement
	for i, e := range entries {
		field := fmt.Sprintf("spec.claims.central[%d]", i)
		if slices.Contains(published, e.driver) && !e.nodeLocal {
			reqs = append(reqs, Requirement{Feature: "deviceTaints", Field: field})
			continue
		}
		reqs = append(reqs, Requirement{Feature: "deviceTaintRules", Field: field})
	}
	return reqs
}
