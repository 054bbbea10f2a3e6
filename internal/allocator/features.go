package allocator

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Features are the Kubernetes feature gates that change how kube-scheduler
// allocates devices. They mirror the allocator features of
// k8s.io/dynamic-resource-allocation/structured (v0.37), which kube-scheduler
// derives from its gates, plus DRADeviceTaintRules, which decides whether
// kube-scheduler applies DeviceTaintRules to the slices it gives the
// allocator. With a gate off, both engines treat slices and claims as
// kube-scheduler with that gate off does: a slice using a gated field is
// ignored (so its pool cannot be complete) or its devices are not allocated,
// and a claim using a gated field fails as invalid.
//
// The zero value has every gate off. Use DefaultFeatures or
// Kubernetes137Features as a base and ParseFeatures to change gates.
type Features struct {
	// AdminAccess is DRAAdminAccess: requests may ask for admin access.
	AdminAccess bool
	// CompatibilityGroups is DRADeviceCompatibilityGroups (KEP-5963):
	// devices that draw on one counter set are co-allocated only when their
	// compatibility groups intersect. Off, slices that declare groups are
	// ignored, which leaves their pools incomplete.
	CompatibilityGroups bool
	// ConsumableCapacity is DRAConsumableCapacity (KEP-5075): shared
	// devices and capacity requests.
	ConsumableCapacity bool
	// DerivedAttributes is DRADerivedAttributes (KEP-6080): requests may
	// define attributes computed by CEL for their constraints.
	DerivedAttributes bool
	// DeviceBindingConditions is DRADeviceBindingConditions. Devices with
	// binding conditions are allocated only when it and
	// ResourceClaimDeviceStatus are both on (see BindingAndStatus).
	DeviceBindingConditions bool
	// ResourceClaimDeviceStatus is DRAResourceClaimDeviceStatus.
	ResourceClaimDeviceStatus bool
	// DeviceTaints is DRADeviceTaints: NoSchedule and NoExecute taints keep
	// devices off unless tolerated. Off, taints are ignored.
	DeviceTaints bool
	// DeviceTaintRules is DRADeviceTaintRules: Inputs.TaintRules add their
	// taints to the devices they select. Off, the rules are ignored.
	DeviceTaintRules bool
	// FractionalCapacityRange is DRAFractionalCapacityRange: how a capacity
	// request is rounded up to a request policy's valid range.
	FractionalCapacityRange bool
	// ListTypeAttributes is DRAListTypeAttributes (KEP-5491): list values
	// in matchAttribute and distinctAttribute constraints. Off, constraints
	// compare scalar values only.
	ListTypeAttributes bool
	// OptionalNodeOperations is DRAOptionalNodeOperations (KEP-5945):
	// devices of slices with skipNodeOperations may be allocated, on nodes
	// that declare the feature. Off, they are not allocated.
	OptionalNodeOperations bool
	// PartitionableDevices is DRAPartitionableDevices (KEP-4815): counter
	// sets and per-device node selection. Off, slices with shared counters
	// or per-device node selection are ignored and devices that consume
	// counters are not allocated.
	PartitionableDevices bool
	// PrioritizedList is DRAPrioritizedList: firstAvailable requests.
	PrioritizedList bool
}

// BindingAndStatus reports whether devices with binding conditions may be
// allocated: kube-scheduler needs both gates for that.
func (f Features) BindingAndStatus() bool {
	return f.DeviceBindingConditions && f.ResourceClaimDeviceStatus
}

// featureGates maps each Kubernetes gate name to its switch.
var featureGates = []struct {
	name string
	get  func(*Features) *bool
}{
	{"DRAAdminAccess", func(f *Features) *bool { return &f.AdminAccess }},
	{"DRAConsumableCapacity", func(f *Features) *bool { return &f.ConsumableCapacity }},
	{"DRADerivedAttributes", func(f *Features) *bool { return &f.DerivedAttributes }},
	{"DRADeviceBindingConditions", func(f *Features) *bool { return &f.DeviceBindingConditions }},
	{"DRADeviceCompatibilityGroups", func(f *Features) *bool { return &f.CompatibilityGroups }},
	{"DRADeviceTaintRules", func(f *Features) *bool { return &f.DeviceTaintRules }},
	{"DRADeviceTaints", func(f *Features) *bool { return &f.DeviceTaints }},
	{"DRAFractionalCapacityRange", func(f *Features) *bool { return &f.FractionalCapacityRange }},
	{"DRAListTypeAttributes", func(f *Features) *bool { return &f.ListTypeAttributes }},
	{"DRAOptionalNodeOperations", func(f *Features) *bool { return &f.OptionalNodeOperations }},
	{"DRAPartitionableDevices", func(f *Features) *bool { return &f.PartitionableDevices }},
	{"DRAPrioritizedList", func(f *Features) *bool { return &f.PrioritizedList }},
	{"DRAResourceClaimDeviceStatus", func(f *Features) *bool { return &f.ResourceClaimDeviceStatus }},
}

// FeatureGateNames lists the gate names Features knows, sorted.
func FeatureGateNames() []string {
	names := make([]string, len(featureGates))
	for i, g := range featureGates {
		names[i] = g.name
	}
	return names
}

// Kubernetes137Features are the gates Kubernetes 1.37 turns on by default
// (k8s.io/kubernetes v1.37.2 pkg/features, with the default minimum
// compatibility version 1.36, which keeps DRAFractionalCapacityRange off).
func Kubernetes137Features() Features {
	return Features{
		AdminAccess:               true,
		ConsumableCapacity:        true,
		DeviceBindingConditions:   true,
		ResourceClaimDeviceStatus: true,
		DeviceTaints:              true,
		DeviceTaintRules:          true,
		PartitionableDevices:      true,
		PrioritizedList:           true,
	}
}

// DefaultFeatures are the gates an engine uses when Inputs.Features is nil:
// those of the cluster drastack targets (LOCAL-CLUSTER.md), which is
// Kubernetes 1.37's defaults plus DRAListTypeAttributes.
func DefaultFeatures() Features {
	f := Kubernetes137Features()
	f.ListTypeAttributes = true
	return f
}

// AllFeatures has every gate on.
func AllFeatures() Features {
	var f Features
	for _, g := range featureGates {
		*g.get(&f) = true
	}
	return f
}

// FeaturesOf returns *f, or DefaultFeatures when f is nil.
func FeaturesOf(f *Features) Features {
	if f == nil {
		return DefaultFeatures()
	}
	return *f
}

// ParseFeatures applies a comma-separated list of GATE=true|false (as
// kube-scheduler's --feature-gates takes them; a bare GATE means true) to
// base. "all=true" and "all=false" set every gate first.
func ParseFeatures(base Features, spec string) (Features, error) {
	f := base
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, value, hasValue := strings.Cut(item, "=")
		name = strings.TrimSpace(name)
		on := true
		if hasValue {
			v, err := strconv.ParseBool(strings.TrimSpace(value))
			if err != nil {
				return base, fmt.Errorf("feature %s: %q is not true or false", name, value)
			}
			on = v
		}
		if strings.EqualFold(name, "all") {
			for _, g := range featureGates {
				*g.get(&f) = on
			}
			continue
		}
		i := slices.IndexFunc(featureGates, func(g struct {
			name string
			get  func(*Features) *bool
		}) bool {
			return g.name == name
		})
		if i < 0 {
			return base, fmt.Errorf("unknown feature %q (known: %s)", name, strings.Join(FeatureGateNames(), ", "))
		}
		*featureGates[i].get(&f) = on
	}
	return f, nil
}

// String lists every gate as GATE=true|false, in ParseFeatures' syntax.
func (f Features) String() string {
	parts := make([]string, len(featureGates))
	for i, g := range featureGates {
		parts[i] = g.name + "=" + strconv.FormatBool(*g.get(&f))
	}
	return strings.Join(parts, ",")
}
