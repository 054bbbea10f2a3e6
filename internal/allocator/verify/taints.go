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
