package pool

import (
	resourceapi "k8s.io/api/resource/v1"
)

// Per-slice limits of resource.k8s.io/v1 (1.35+), taken from the constants
// of k8s.io/api/resource/v1 so they move with the API.
const (
	maxDevices                = resourceapi.ResourceSliceMaxDevices                             // 128
	maxDevicesAdvanced        = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures         // 64
	maxCounterSets            = resourceapi.ResourceSliceMaxCounterSets                         // 8
	maxCountersPerSet         = resourceapi.ResourceSliceMaxCountersPerCounterSet               // 32
	maxConsumptionsPerDevice  = resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice  // 2
	maxCountersPerConsumption = resourceapi.ResourceSliceMaxCountersPerDeviceCounterConsumption // 32
	maxAttrsAndCapacities     = resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice    // 32
	maxAttributeValues        = resourceapi.ResourceSliceMaxAttributeValuesPerDevice            // 48
	maxTaints                 = resourceapi.DeviceTaintsMaxLength                               // 16
)

// limitSeverity is the severity of the Too* problems. SEMANTICS.md lists the
// rules that make a pool invalid (the allocator skips it) separately from
// the size limits, which the API server enforces on write. Live, a slice
// over a limit can only predate the limit and kube-scheduler allocates from
// it, so making it an error would make the pool controller and the native
// engine disagree with kube-scheduler: a warning. Offline
// (Options.StrictLimits, kubectl dra validate) such a slice could never be
// written: an error.
func limitSeverity(strict bool) Severity {
	if strict {
		return SeverityError
	}
	return SeverityWarning
}

// advancedUse names why a slice falls under the lower device limit: the
// first device that uses taints, counters or list attributes.
type advancedUse struct {
	device  string
	feature string
}

// checkLimits reports every per-slice limit that s exceeds, with severity
// sev.
func checkLimits(s *resourceapi.ResourceSlice, sev Severity, add func(Problem)) {
	spec := &s.Spec
	if n := len(spec.SharedCounters); n > maxCounterSets {
		add(newProblem(ReasonTooManyCounterSets, sev, s.Name, "",
			"slice %s defines %d counter sets, more than the limit of %d", s.Name, n, maxCounterSets))
	}
	for i := range spec.SharedCounters {
		cs := &spec.SharedCounters[i]
		if n := len(cs.Counters); n > maxCountersPerSet {
			add(newProblem(ReasonTooManyCounters, sev, s.Name, "",
				"counter set %s in slice %s defines %d counters, more than the limit of %d per counter set",
				cs.Name, s.Name, n, maxCountersPerSet))
		}
	}

	var adv advancedUse
	for i := range spec.Devices {
		d := &spec.Devices[i]
		hasList := checkDeviceLimits(s, d, sev, add)
		if adv.device == "" {
			switch {
			case len(d.Taints) > 0:
				adv = advancedUse{d.Name, "taints"}
			case len(d.ConsumesCounters) > 0:
				adv = advancedUse{d.Name, "counters"}
			case hasList:
				adv = advancedUse{d.Name, "list attributes"}
			}
		}
	}
	n := len(spec.Devices)
	switch {
	case adv.device != "" && n > maxDevicesAdvanced:
		add(newProblem(ReasonTooManyDevices, sev, s.Name, "",
			"slice %s has %d devices, more than the limit of %d that applies because device %s uses %s",
			s.Name, n, maxDevicesAdvanced, adv.device, adv.feature))
	case n > maxDevices:
		add(newProblem(ReasonTooManyDevices, sev, s.Name, "",
			"slice %s has %d devices, more than the limit of %d", s.Name, n, maxDevices))
	}
}

// checkDeviceLimits reports the per-device limits and tells whether the
// device has a list attribute (which lowers the slice's device limit). A
// list attribute is one whose list field is set at all, as the API server
// counts it.
func checkDeviceLimits(s *resourceapi.ResourceSlice, d *resourceapi.Device, sev Severity, add func(Problem)) (hasList bool) {
	if n := len(d.ConsumesCounters); n > maxConsumptionsPerDevice {
		add(newProblem(ReasonTooManyConsumptions, sev, s.Name, d.Name,
			"device %s consumes from %d counter sets, more than the limit of %d", d.Name, n, maxConsumptionsPerDevice))
	}
	for i := range d.ConsumesCounters {
		c := &d.ConsumesCounters[i]
		if n := len(c.Counters); n > maxCountersPerConsumption {
			add(newProblem(ReasonTooManyCounters, sev, s.Name, d.Name,
				"device %s consumes %d counters of counter set %s, more than the limit of %d per consumption",
				d.Name, n, c.CounterSet, maxCountersPerConsumption))
		}
	}
	if n := len(d.Attributes) + len(d.Capacity); n > maxAttrsAndCapacities {
		add(newProblem(ReasonTooManyAttributes, sev, s.Name, d.Name,
			"device %s has %d attributes and capacities, more than the limit of %d", d.Name, n, maxAttrsAndCapacities))
	}
	values := 0
	for _, a := range d.Attributes {
		if a.IntValues != nil || a.BoolValues != nil || a.StringValues != nil || a.VersionValues != nil {
			hasList = true
		}
		// Like the API server: a scalar counts one value, a list counts
		// its elements.
		if n := len(a.IntValues) + len(a.BoolValues) + len(a.StringValues) + len(a.VersionValues); n > 0 {
			values += n
		} else {
			values++
		}
	}
	if values > maxAttributeValues {
		add(newProblem(ReasonTooManyAttributes, sev, s.Name, d.Name,
			"device %s has %d attribute values (list elements count one each), more than the limit of %d",
			d.Name, values, maxAttributeValues))
	}
	if n := len(d.Taints); n > maxTaints {
		add(newProblem(ReasonTooManyAttributes, sev, s.Name, d.Name,
			"device %s has %d taints, more than the limit of %d (no reason code covers taints; TooManyAttributes is the closest)",
			d.Name, n, maxTaints))
	}
	return hasList
}
