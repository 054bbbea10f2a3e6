package central

import (
	resourcev1 "k8s.io/api/resource/v1"
)

// TaintKey is the key of the taint the operator puts on central devices.
// It lives under the operator's own domain so that no driver or
// administrator taint is ever mistaken for it: the operator tolerates this
// key and nothing else.
const TaintKey = "resource.drastack.io/central"

// TaintEffect is NoSchedule: kube-scheduler must not allocate a central
// device, but claims already allocated with one (by kube-scheduler before
// the device became central, or by the operator) keep it and their pods keep
// running. NoExecute would evict them.
const TaintEffect = resourcev1.DeviceTaintEffectNoSchedule

// Taint is the taint on every central device, in DeviceTaintRules and in the
// slices the operator publishes itself. It carries no value: the key alone
// says "allocated by the operator only".
func Taint() resourcev1.DeviceTaint {
	return resourcev1.DeviceTaint{Key: TaintKey, Effect: TaintEffect}
}

// Toleration tolerates exactly the operator's taint: its key with the
// NoSchedule effect, so a NoExecute taint someone sets with the same key
// still evicts.
func Toleration() resourcev1.DeviceToleration {
	return resourcev1.DeviceToleration{
		Key:      TaintKey,
		Operator: resourcev1.DeviceTolerationOpExists,
		Effect:   TaintEffect,
	}
}

// ForOperator returns a copy of claim in which every request and every
// subrequest tolerates the operator's taint, for the operator's engine: the
// operator ignores its own taint and honours every other one (driver taints,
// administrators' DeviceTaintRules). Requests that already tolerate it are
// left as they are. The claim passed in is not modified; nil stays nil.
func ForOperator(claim *resourcev1.ResourceClaim) *resourcev1.ResourceClaim {
	if claim == nil {
		return nil
	}
	out := claim.DeepCopy()
	tolerateAll(&out.Spec)
	return out
}

// ForOperatorSpec is ForOperator for a bare claim spec (a
// ResourceClaimTemplate's, for example).
func ForOperatorSpec(spec *resourcev1.ResourceClaimSpec) *resourcev1.ResourceClaimSpec {
	if spec == nil {
		return nil
	}
	out := spec.DeepCopy()
	tolerateAll(out)
	return out
}

// tolerateAll adds the operator's toleration in place to every request and
// subrequest of spec, which must be the caller's own copy.
func tolerateAll(spec *resourcev1.ResourceClaimSpec) {
	for i := range spec.Devices.Requests {
		req := &spec.Devices.Requests[i]
		if req.Exactly != nil {
			req.Exactly.Tolerations = withToleration(req.Exactly.Tolerations)
		}
		for j := range req.FirstAvailable {
			sub := &req.FirstAvailable[j]
			sub.Tolerations = withToleration(sub.Tolerations)
		}
	}
}

// withToleration appends the operator's toleration unless it is there.
// Only the exact toleration counts as present: a broader one written by the
// user (any key) already tolerates the taint too, but adding ours next to it
// is harmless and keeps the check simple and obvious.
func withToleration(tols []resourcev1.DeviceToleration) []resourcev1.DeviceToleration {
	want := Toleration()
	for _, t := range tols {
		if t.Key == want.Key && t.Operator == want.Operator && t.Effect == want.Effect && t.Value == "" && t.TolerationSeconds == nil {
			return tols
		}
	}
	return append(tols, want)
}

// hasTaint says whether taints hold the operator's taint with a hard effect.
func hasTaint(taints []resourcev1.DeviceTaint) bool {
	for _, t := range taints {
		if t.Key == TaintKey && t.Effect == TaintEffect {
			return true
		}
	}
	return false
}
