package simdriver

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// packSlices splits a pool into slices that the API server accepts: the
// counter sets go into counter-only slices of at most
// ResourceSliceMaxCounterSets sets (a slice holds devices or counters,
// never both), and the devices into slices of at most
// ResourceSliceMaxDevices, or ResourceSliceMaxDevicesWithAdvancedFeatures
// when any device of the slice consumes counters, has taints or has a list
// attribute. A unit is kept in one slice unless it alone exceeds the limit.
//
// A pool with neither devices nor counters still gets one empty slice:
// an empty pool says "the driver runs and has nothing", which is not the
// same as no pool.
func packSlices(counterSets []resourceapi.CounterSet, units []unit) []resourceslice.Slice {
	var slices []resourceslice.Slice
	for len(counterSets) > 0 {
		n := min(len(counterSets), resourceapi.ResourceSliceMaxCounterSets)
		slices = append(slices, resourceslice.Slice{SharedCounters: counterSets[:n]})
		counterSets = counterSets[n:]
	}

	var current []resourceapi.Device
	currentAdvanced := false
	flush := func() {
		if len(current) > 0 {
			slices = append(slices, resourceslice.Slice{Devices: current})
		}
		current, currentAdvanced = nil, false
	}
	for _, u := range units {
		unitAdvanced := false
		for i := range u {
			unitAdvanced = unitAdvanced || usesAdvancedFeatures(&u[i])
		}
		if len(current)+len(u) > deviceLimit(currentAdvanced || unitAdvanced) {
			flush()
		}
		for _, d := range u {
			adv := currentAdvanced || usesAdvancedFeatures(&d)
			if len(current)+1 > deviceLimit(adv) {
				flush()
				adv = usesAdvancedFeatures(&d)
			}
			current = append(current, d)
			currentAdvanced = adv
		}
	}
	flush()
	if len(slices) == 0 {
		slices = append(slices, resourceslice.Slice{})
	}
	return slices
}

func deviceLimit(advanced bool) int {
	if advanced {
		return resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
	}
	return resourceapi.ResourceSliceMaxDevices
}

// usesAdvancedFeatures mirrors the API server's rule for the lower device
// limit: counters, taints or list-valued attributes.
func usesAdvancedFeatures(d *resourceapi.Device) bool {
	if len(d.ConsumesCounters) > 0 || len(d.Taints) > 0 {
		return true
	}
	for _, a := range d.Attributes {
		if a.IntValues != nil || a.BoolValues != nil || a.StringValues != nil || a.VersionValues != nil {
			return true
		}
	}
	return false
}
