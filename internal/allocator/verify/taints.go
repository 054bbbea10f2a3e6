package verify

import (
	resourceapi "k8s.io/api/resource/v1"
)

// untoleratedTaint returns the first taint that keeps a device from being
// allocated: NoSchedule and NoExecute taints must be tolerated, other
// effects (None, or ones this code does not know) never block.
func untoleratedTaint(taints []resourceapi.DeviceTaint, tolerations []resourceapi.DeviceToleration) (resourceapi.DeviceTaint, bool) {
	for _, t := range taints {
		if t.Effect != resourceapi.DeviceTaintEffectNoSchedule && t.Effect != resourceapi.DeviceTaintEffectNoExecute {
			continue
		}
		if !tolerated(t, tolerations) {
			return t, true
		}
	}
	return resourceapi.DeviceTaint{}, false
}

// tolerated applies the toleration rules of the API: an empty key tolerates
// every key, an empty effect every effect; Exists ignores the value, Equal
// (the default operator) compares it. (API validation only allows an empty
// key with Exists; an unvalidated Equal with an empty key is applied as
// written, as kube-scheduler does.)
func tolerated(t resourceapi.DeviceTaint, tolerations []resourceapi.DeviceToleration) bool {
	for _, tol := range tolerations {
		if tol.Effect != "" && tol.Effect != t.Effect {
			continue
		}
		if tol.Key != "" && tol.Key != t.Key {
			continue
		}
		switch tol.Operator {
		case resourceapi.DeviceTolerationOpExists:
			return true
		case resourceapi.DeviceTolerationOpEqual, "":
			if tol.Value == t.Value {
				return true
			}
		}
	}
	return false
}

// taintsOf are the taints of a result's device: those in its slice and,
// with DRADeviceTaintRules on, those of the DeviceTaintRules that select
// it (a nil selector selects nothing; every field set must equal the
// device's driver, pool or name).
func (k *check) taintsOf(res result) []resourceapi.DeviceTaint {
	taints := res.dev.Device.Taints
	if !k.features.DeviceTaintRules {
		return taints
	}
	for _, r := range k.in.TaintRules {
		sel := r.Spec.DeviceSelector
		if sel == nil || (sel.Driver != nil && *sel.Driver != res.Driver) ||
			(sel.Pool != nil && *sel.Pool != res.Pool) || (sel.Device != nil && *sel.Device != res.Device) {
			continue
		}
		taints = append(taints[:len(taints):len(taints)], r.Spec.Taint)
	}
	return taints
}
