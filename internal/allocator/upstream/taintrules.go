package upstream

import (
	resourceapi "k8s.io/api/resource/v1"
)

// patchSlices returns the slices as kube-scheduler hands them to the
// allocator when DRADeviceTaintRules is on: the resourceslice tracker of
// k8s.io/dynamic-resource-allocation appends the taint of every
// DeviceTaintRule to each device its selector matches (a nil selector
// matches nothing; each field that is set must equal the device's driver,
// pool or name), whatever the taint's effect. The allocator then decides
// which effects matter.
//
// The native engine applies rules with internal/central.ApplyTaintRules;
// this is a second, independent implementation on purpose, written after
// the tracker, so that the differential test checks one against the other.
// Slices no rule touches are returned as they are; the inputs are never
// modified.
func patchSlices(slices []*resourceapi.ResourceSlice, rules []resourceapi.DeviceTaintRule) []*resourceapi.ResourceSlice {
	if len(rules) == 0 {
		return slices
	}
	out := make([]*resourceapi.ResourceSlice, len(slices))
	for i, slice := range slices {
		out[i] = slice
		if slice == nil {
			continue
		}
		for r := range rules {
			sel := rules[r].Spec.DeviceSelector
			if sel == nil ||
				(sel.Driver != nil && *sel.Driver != slice.Spec.Driver) ||
				(sel.Pool != nil && *sel.Pool != slice.Spec.Pool.Name) {
				continue
			}
			for d := range slice.Spec.Devices {
				if sel.Device != nil && *sel.Device != slice.Spec.Devices[d].Name {
					continue
				}
				if out[i] == slice {
					out[i] = slice.DeepCopy()
				}
				dev := &out[i].Spec.Devices[d]
				dev.Taints = append(dev.Taints, rules[r].Spec.Taint)
			}
		}
	}
	return out
}
