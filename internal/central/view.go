package central

import (
	resourcev1 "k8s.io/api/resource/v1"
)

// NotCentralTaintKey marks, in the engine's view only, the devices the
// operator must not allocate: devices of pools that are not central, and
// of central pools whose devices do not all carry the operator's taint
// yet (kube-scheduler could still take them). It is never written to the
// API server.
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
//   - every device outside the pools CentralSlices keeps gets the
//     NotCentralTaintKey taint.
//
// A claim passed through ForOperator tolerates only the operator's own
// taint, so it can get only central devices; one passed through
// ForScheduler tolerates only NotCentralTaintKey, so, like kube-scheduler,
// it never gets a central device. The inputs are not modified.
func EngineView(p *Partition, slices []*resourcev1.ResourceSlice, rules []resourcev1.DeviceTaintRule) []*resourcev1.ResourceSlice {
	applied := ApplyTaintRules(slices, rules)
	usable := map[PoolID]bool{}
	for _, s := range CentralSlices(p, applied) {
		usable[PoolID{Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name}] = true
	}
	out := make([]*resourcev1.ResourceSlice, 0, len(applied))
	for _, s := range applied {
		if s == nil {
			continue
		}
		if len(s.Spec.Devices) == 0 {
			out = append(out, s)
			continue
		}
		if usable[PoolID{Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name}] {
			out = append(out, withCentralAttribute(p, s))
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

// CentralAttribute is the attribute (domain resource.drastack.io, name
// central) the engine view gives every central device: a comma-framed list
// of the DeviceClasses whose claims may use the device (",gpu-topology,").
// No real device carries it, so a DeviceClass whose selector requires it
// (ClassSelector) matches nothing for kube-scheduler and exactly the
// device's central entries for the operator: a claim of such a class can be
// allocated by the operator alone (docs/allocation-protocol.md, section 5).
const CentralAttribute resourcev1.QualifiedName = "resource.drastack.io/central"

// ClassSelector is the CEL selector of an operator-owned central
// DeviceClass: the device carries CentralAttribute naming the class. It
// evaluates to false, without an error, on a device without the
// attribute.
func ClassSelector(class string) string {
	return `"central" in device.attributes["resource.drastack.io"] && device.attributes["resource.drastack.io"].central.contains(",` + class + `,")`
}

// withCentralAttribute returns a copy of a central slice whose devices
// carry CentralAttribute with their entries' classes.
func withCentralAttribute(p *Partition, s *resourcev1.ResourceSlice) *resourcev1.ResourceSlice {
	cp := s.DeepCopy()
	for i := range cp.Spec.Devices {
		d := &cp.Spec.Devices[i]
		classes := ","
		for _, c := range p.Classes(cp.Spec.Driver, cp.Spec.Pool.Name, d.Name) {
			classes += c + ","
		}
		attrs := make(map[resourcev1.QualifiedName]resourcev1.DeviceAttribute, len(d.Attributes)+1)
		for k, v := range d.Attributes {
			attrs[k] = v
		}
		attrs[CentralAttribute] = resourcev1.DeviceAttribute{StringValue: &classes}
		d.Attributes = attrs
	}
	return cp
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
