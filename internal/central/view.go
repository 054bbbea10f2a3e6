package central

import (
	resourcev1 "k8s.io/api/resource/v1"
)

// NotCentralTaintKey marks, in the engine's view only, the devices the
// operator must not allocate: devices of pools that are not central, of
// central pools whose devices do not all carry the operator's taint yet
// (kube-scheduler could still take them), and of central pools that have
// not joined the partition (kube-scheduler may still write allocations it
// decided before it saw the taint). It is never written to the API server.
const NotCentralTaintKey = "resource.drastack.io/not-central"

// notCentralTaint is the taint EngineView puts on devices the operator
// must leave alone.
func notCentralTaint() resourcev1.DeviceTaint {
	return resourcev1.DeviceTaint{Key: NotCentralTaintKey, Effect: resourcev1.DeviceTaintEffectNoSchedule}
}

// EngineView returns the slices one engine session allocates both kinds
// of claims from, so that a pod's operator claims and its kube-scheduler
// claims can be tried together on one node:
//
//   - the NoSchedule/NoExecute taints of the DeviceTaintRules are applied
//     (ApplyTaintRules), so every taint kube-scheduler honours is honoured;
//   - every device outside the pools CentralSlices keeps, and of the pools
//     joined does not report joined, gets the NotCentralTaintKey taint
//     (docs/allocation-protocol.md, section 4: a pool is the operator's
//     only once it joined; package handover decides that).
//
// A claim passed through ForOperator tolerates only the operator's own
// taint, so it can get only central devices; one passed through
// ForScheduler tolerates only NotCentralTaintKey, so, like kube-scheduler,
// it never gets a central device. The inputs are not modified.
// A nil joined joins no pool.
func EngineView(p *Partition, slices []*resourcev1.ResourceSlice, rules []resourcev1.DeviceTaintRule, joined func(PoolID) bool) []*resourcev1.ResourceSlice {
	applied := ApplyTaintRules(slices, rules)
	usable := map[PoolID]bool{}
	for _, s := range CentralSlices(p, applied) {
		id := PoolID{Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name}
		if _, seen := usable[id]; !seen {
			usable[id] = joined != nil && joined(id)
		}
	}
	out := make([]*resourcev1.ResourceSlice, 0, len(applied))
	for _, s := range applied {
		if s == nil {
			continue
		}
		if usable[PoolID{Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name}] || len(s.Spec.Devices) == 0 {
			out = append(out, s)
			continue
		}
		cp := s.DeepCopy()
		for i := range cp.Spec.Devices {
			cp.Spec.Devices[i].Taints = append(cp.Spec.Devices[i].Taints, notCentralTaint())
		}
		out = append(out, cp)
	}
	return out
}

// ForScheduler returns a copy of a kube-scheduler claim that tolerates the
// NotCentralTaintKey taint of EngineView: in that view it can get exactly
// the devices kube-scheduler could give it.
func ForScheduler(c *resourcev1.ResourceClaim) *resourcev1.ResourceClaim {
	return tolerating(c, resourcev1.DeviceToleration{
		Key: NotCentralTaintKey, Operator: resourcev1.DeviceTolerationOpExists, Effect: resourcev1.DeviceTaintEffectNoSchedule,
	})
}

// tolerating returns a deep copy of c whose every request and subrequest
// also tolerates t.
func tolerating(c *resourcev1.ResourceClaim, t resourcev1.DeviceToleration) *resourcev1.ResourceClaim {
	out := c.DeepCopy()
	for i := range out.Spec.Devices.Requests {
		r := &out.Spec.Devices.Requests[i]
		if r.Exactly != nil {
			r.Exactly.Tolerations = append(r.Exactly.Tolerations, t)
		}
		for j := range r.FirstAvailable {
			r.FirstAvailable[j].Tolerations = append(r.FirstAvailable[j].Tolerations, t)
		}
	}
	return out
}
