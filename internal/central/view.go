package central

import (
	"hash/fnv"
	"regexp"
	"slices"
	"strconv"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/api/v1alpha1"
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
		if len(s.Spec.Devices) == 0 {
			out = append(out, s)
			continue
		}
		if usable[PoolID{Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name}] {
			out = append(out, withCentralAttribute(p, s))
			continue
		}
		cp := withOwnDevices(s)
		for i := range cp.Spec.Devices {
			cp.Spec.Devices[i].Taints = appendOwn(cp.Spec.Devices[i].Taints, notCentralTaint())
		}
		out = append(out, cp)
	}
	return out
}

// CentralAttribute is the attribute (domain resource.drastack.io, name
// central) the engine view gives every central device: who may use it, as
// comma-framed tokens "<class>@<namespace>" for every class (and "*" for
// claims of no listed class) and namespace ("*": any) of every entry that
// selects the device, with "!i" appended when the entry allows the
// Immediate label (",gpu-topology@*,*@*,"). No real device carries the
// attribute, so a DeviceClass whose selector requires it (ClassSelector)
// matches nothing for kube-scheduler and exactly the devices of its
// entries for the operator: a claim of such a class can be allocated by
// the operator alone (docs/allocation-protocol.md, section 5).
const CentralAttribute resourcev1.QualifiedName = "resource.drastack.io/central"

// anyToken stands for any class or any namespace in CentralAttribute.
const anyToken = "*"

// ClassSelector is the CEL selector of an operator-owned central
// DeviceClass: the device is central for an entry that lists the class. It
// evaluates to false, without an error, on a device without the
// attribute.
func ClassSelector(class string) string {
	return `"central" in device.attributes["resource.drastack.io"] && device.attributes["resource.drastack.io"].central.contains(",` + class + `@")`
}

// withCentralAttribute returns a copy of a central slice whose devices
// carry CentralAttribute (withOwnDevices, each device with a new map of
// attributes).
//
// The copy's resourceVersion gets a suffix that names the attribute values:
// an engine may keep selector results per slice version (the native
// engine does), and the attribute changes without the slice changing
// when a pool joins or leaves the partition or an entry's classes change.
func withCentralAttribute(p *Partition, s *resourcev1.ResourceSlice) *resourcev1.ResourceSlice {
	cp := withOwnDevices(s)
	values := fnv.New64a()
	for i := range cp.Spec.Devices {
		d := &cp.Spec.Devices[i]
		var b strings.Builder
		b.WriteString(",")
		for _, e := range p.Entries(cp.Spec.Driver, cp.Spec.Pool.Name, d.Name) {
			entry := &p.entries[e]
			namespaces := entry.Namespaces
			if len(namespaces) == 0 {
				namespaces = []string{anyToken}
			}
			immediate := ""
			if entry.AllowImmediate {
				immediate = "!i"
			}
			for _, c := range append(slices.Clone(entry.Classes), anyToken) {
				for _, ns := range namespaces {
					b.WriteString(c + "@" + ns + immediate + ",")
				}
			}
		}
		value := b.String()
		_, _ = values.Write([]byte(value))
		attrs := make(map[resourcev1.QualifiedName]resourcev1.DeviceAttribute, len(d.Attributes)+1)
		for k, v := range d.Attributes {
			attrs[k] = v
		}
		attrs[CentralAttribute] = resourcev1.DeviceAttribute{StringValue: &value}
		d.Attributes = attrs
	}
	if cp.ResourceVersion != "" {
		cp.ResourceVersion += "+central-" + strconv.FormatUint(values.Sum64(), 36)
	}
	return cp
}

// Scoped narrows a claim for the operator's engine (after ForOperator) to
// the central devices its requests may use: each request and subrequest
// gets a selector for the devices of entries that list its class (of any
// entry when no entry lists it), whose namespaces admit the claim's
// namespace and, for a claim that asked for immediate allocation by its
// label, that allow it. It returns the claim and the requests no entry
// admits (they can get no device). The input is not modified.
func Scoped(claim *resourcev1.ResourceClaim, entries []v1alpha1.CentralDevices, immediateLabel bool) (*resourcev1.ResourceClaim, []string) {
	out := ForOperator(claim)
	listed := map[string]bool{}
	for _, e := range entries {
		for _, c := range e.Classes {
			listed[c] = true
		}
	}
	var denied []string
	narrow := func(name, class string, selectors []resourcev1.DeviceSelector) []resourcev1.DeviceSelector {
		if !listed[class] {
			class = anyToken
		}
		if !admitted(entries, class, claim.Namespace, immediateLabel) {
			denied = append(denied, name)
		}
		suffix := `(!i)?`
		if immediateLabel {
			suffix = `!i`
		}
		pattern := "," + regexp.QuoteMeta(class) + "@(" + regexp.QuoteMeta(claim.Namespace) + `|\*)` + suffix + ","
		expr := `"central" in device.attributes["resource.drastack.io"] && device.attributes["resource.drastack.io"].central.matches(` + strconv.Quote(pattern) + `)`
		return append(slices.Clone(selectors), resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: expr}})
	}
	for i := range out.Spec.Devices.Requests {
		r := &out.Spec.Devices.Requests[i]
		if r.Exactly != nil {
			r.Exactly.Selectors = narrow(r.Name, r.Exactly.DeviceClassName, r.Exactly.Selectors)
		}
		for j := range r.FirstAvailable {
			sub := &r.FirstAvailable[j]
			sub.Selectors = narrow(r.Name+"/"+sub.Name, sub.DeviceClassName, sub.Selectors)
		}
	}
	return out, denied
}

// admitted says whether some entry lets a claim of class (anyToken: no
// listed class) in namespace use its devices.
func admitted(entries []v1alpha1.CentralDevices, class, namespace string, immediateLabel bool) bool {
	for _, e := range entries {
		if immediateLabel && !e.AllowImmediate {
			continue
		}
		if len(e.Namespaces) > 0 && !slices.Contains(e.Namespaces, namespace) {
			continue
		}
		if class == anyToken || slices.Contains(e.Classes, class) {
			return true
		}
	}
	return false
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
