package central

import (
	"slices"

	resourcev1 "k8s.io/api/resource/v1"
)

// Selects says whether a DeviceTaintRule selector selects a device, as the
// API documents it: a nil selector selects nothing, an empty one every
// device, and each field that is set must equal the device's driver, pool or
// name.
func Selects(sel *resourcev1.DeviceTaintSelector, driver, pool, device string) bool {
	if sel == nil {
		return false
	}
	return (sel.Driver == nil || *sel.Driver == driver) &&
		(sel.Pool == nil || *sel.Pool == pool) &&
		(sel.Device == nil || *sel.Device == device)
}

// hardEffect says whether a taint effect keeps allocations off a device.
// None is informational and unknown effects must be treated like None.
func hardEffect(e resourcev1.DeviceTaintEffect) bool {
	return e == resourcev1.DeviceTaintEffectNoSchedule || e == resourcev1.DeviceTaintEffectNoExecute
}

// ApplyTaintRules returns the slices with the NoSchedule and NoExecute
// taints of rules added to the devices they select, so that an engine that
// only reads taints in slices honours DeviceTaintRules as kube-scheduler
// does. Rules with another effect change nothing. A slice that no rule
// touches is returned as is (the same pointer); a touched slice is a copy
// with its own devices and taint lists that shares everything else with
// the input (withOwnDevices); the inputs are never modified. A taint the
// device already carries (same key, value and effect) is not added twice.
func ApplyTaintRules(slices []*resourcev1.ResourceSlice, rules []resourcev1.DeviceTaintRule) []*resourcev1.ResourceSlice {
	hard := make([]*resourcev1.DeviceTaintRule, 0, len(rules))
	for i := range rules {
		if hardEffect(rules[i].Spec.Taint.Effect) && rules[i].Spec.DeviceSelector != nil {
			hard = append(hard, &rules[i])
		}
	}
	out := make([]*resourcev1.ResourceSlice, len(slices))
	for i, s := range slices {
		out[i] = s
		if s == nil || len(hard) == 0 {
			continue
		}
		var cp *resourcev1.ResourceSlice
		for j := range s.Spec.Devices {
			dev := &s.Spec.Devices[j]
			for _, r := range hard {
				if !Selects(r.Spec.DeviceSelector, s.Spec.Driver, s.Spec.Pool.Name, dev.Name) {
					continue
				}
				taint := r.Spec.Taint
				if containsTaint(dev.Taints, taint) {
					continue
				}
				if cp == nil {
					// Copy on first change; dev must then point into the copy.
					cp = withOwnDevices(s)
					out[i] = cp
				}
				d := &cp.Spec.Devices[j]
				d.Taints = appendOwn(d.Taints, *taint.DeepCopy())
				dev = d
			}
		}
	}
	return out
}

// containsTaint says whether taints already hold t (ignoring timeAdded).
func containsTaint(taints []resourcev1.DeviceTaint, t resourcev1.DeviceTaint) bool {
	for _, have := range taints {
		if have.Key == t.Key && have.Value == t.Value && have.Effect == t.Effect {
			return true
		}
	}
	return false
}

// withOwnDevices returns a copy of a slice that has its own list of
// devices (each device struct copied) and shares everything else with s:
// metadata, and each device's attributes, capacities, counters and
// taints. The engine views change a device's taints or attributes only by
// replacing the list or map (appendOwn, a new map), and the taint lists
// are clipped so that an append to one never writes into the input's
// array: the informer's object stays untouched, and each engine session
// costs a list of devices, not a deep copy of every slice of the cluster.
// The engines only read their inputs.
func withOwnDevices(s *resourcev1.ResourceSlice) *resourcev1.ResourceSlice {
	cp := *s
	cp.Spec.Devices = slices.Clone(s.Spec.Devices)
	for i := range cp.Spec.Devices {
		cp.Spec.Devices[i].Taints = slices.Clip(cp.Spec.Devices[i].Taints)
	}
	return &cp
}

// appendOwn appends to a list that may share its backing array with
// another object: the result never does.
func appendOwn[T any](list []T, v T) []T {
	return append(slices.Clip(list), v)
}
