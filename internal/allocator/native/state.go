package native

import (
	"strconv"
	"strings"

	"github.com/google/cel-go/common/types/ref"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/utils/ptr"
)

const maxResults = resourceapi.AllocationResultsMaxSize

// usable reports whether device d can be added for alternative sb of slot i
// in the current state: free (or admin access), taints tolerated, counters
// left, and consistent with the constraints decided so far.
func (x *search) usable(i int, sb *sub, d int32) bool {
	s := x.s
	if sb.admin {
		// Admin access may share a device with other claims, but a claim
		// does not get the same device twice.
		claim := x.p.slots[i].claim
		for _, ch := range x.chosen {
			if ch.dev == d && x.p.slots[ch.slot].claim == claim {
				return false
			}
		}
	} else if s.inUse[d] || x.tent[d] > 0 {
		return false
	}
	dev := &s.devs[d]
	if dev.hardTaints && !tolerated(dev.dev.Taints, sb.tolerations) {
		return false
	}
	for _, c := range dev.consumes {
		if s.remaining[c.counter] < c.amount {
			return false
		}
	}
	for _, m := range sb.match {
		if x.matchSet[m] && !containsStr(s.attrValues(x.p.match[m], d), x.matchVal[m]) {
			return false
		}
	}
	for _, m := range sb.distinct {
		vals := s.attrValues(x.p.distinct[m], d)
		if len(vals) == 0 {
			return false
		}
		for _, v := range vals {
			if x.used[m][v] > 0 {
				return false
			}
		}
	}
	return true
}

// apply tentatively allocates d; undo reverts the last apply exactly.
func (x *search) apply(i, b int, d int32) {
	s := x.s
	sb := &x.p.slots[i].subs[b]
	x.tent[d]++
	for _, c := range s.devs[d].consumes {
		s.remaining[c.counter] -= c.amount
	}
	for _, m := range sb.distinct {
		for _, v := range s.attrValues(x.p.distinct[m], d) {
			x.used[m][v]++
		}
	}
	x.chosen = append(x.chosen, choice{slot: i, sub: b, dev: d})
}

func (x *search) undo() {
	s := x.s
	ch := x.chosen[len(x.chosen)-1]
	x.chosen = x.chosen[:len(x.chosen)-1]
	sb := &x.p.slots[ch.slot].subs[ch.sub]
	for _, m := range sb.distinct {
		for _, v := range s.attrValues(x.p.distinct[m], ch.dev) {
			x.used[m][v]--
		}
	}
	for _, c := range s.devs[ch.dev].consumes {
		s.remaining[c.counter] += c.amount
	}
	if x.tent[ch.dev]--; x.tent[ch.dev] == 0 {
		delete(x.tent, ch.dev)
	}
}

// matchValues lists the values of constraint m that enough usable
// candidates of this alternative share, in candidate order, dropping values
// that a later request bound by the same constraint cannot satisfy.
func (x *search) matchValues(i int, sb *sub, c []int32, m int) []string {
	attr := x.p.match[m]
	need := sb.count
	if sb.all {
		need = 1
	}
	counts := map[string]int{}
	var order []string
	for _, d := range c {
		if !x.usable(i, sb, d) {
			continue
		}
		for _, v := range x.s.attrValues(attr, d) {
			if counts[v] == 0 {
				order = append(order, v)
			}
			counts[v]++
		}
	}
	out := order[:0]
	for _, v := range order {
		if counts[v] >= need && x.laterSlotsCanMatch(i, m, v) {
			out = append(out, v)
		}
	}
	return out
}

// laterSlotsCanMatch checks the requests after slot i that constraint m
// binds: each needs an alternative with enough usable devices having v.
func (x *search) laterSlotsCanMatch(i, m int, v string) bool {
	attr := x.p.match[m]
	claim := x.p.slots[i].claim
	for j := i + 1; j < len(x.p.slots) && x.p.slots[j].claim == claim; j++ {
		ok := false
		for b := range x.p.slots[j].subs {
			sb := &x.p.slots[j].subs[b]
			if !containsInt(sb.match, m) {
				ok = true
				break
			}
			c, err := x.candidates(j, b)
			if err != nil {
				return true // reported when the slot is reached
			}
			need, n := max(sb.count, 1), 0
			for _, d := range c {
				if x.usable(j, sb, d) && containsStr(x.s.attrValues(attr, d), v) {
					if n++; n >= need {
						break
					}
				}
			}
			if n >= need {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// enoughDistinct checks that the usable candidates carry enough different
// values for every distinctAttribute constraint to take sb.count devices.
func (x *search) enoughDistinct(i int, sb *sub, c []int32) bool {
	for _, m := range sb.distinct {
		seen := map[string]bool{}
		for _, d := range c {
			if x.usable(i, sb, d) {
				for _, v := range x.s.attrValues(x.p.distinct[m], d) {
					seen[v] = true
				}
			}
			if len(seen) >= sb.count {
				break
			}
		}
		if len(seen) < sb.count {
			x.failf("request %s: fewer than %d different values of %s", sb.name, sb.count, x.p.distinct[m])
			return false
		}
	}
	return true
}

// attrValues returns the values of an attribute of device d as typed keys
// (a scalar is a one-element list); empty when the device lacks it.
func (s *Session) attrValues(attr string, d int32) []string {
	per := s.attrCache[attr]
	if per == nil {
		per = make([][]string, len(s.devs))
		s.attrCache[attr] = per
	}
	if v := per[d]; v != nil {
		return v
	}
	v := attrKeys(lookupAttr(&s.devs[d], attr))
	per[d] = v
	return v
}

func lookupAttr(dev *device, attr string) *resourceapi.DeviceAttribute {
	if a, ok := dev.dev.Attributes[resourceapi.QualifiedName(attr)]; ok {
		return &a
	}
	i := strings.Index(attr, "/")
	if i < 0 || attr[:i] != dev.id.driver {
		return nil
	}
	if a, ok := dev.dev.Attributes[resourceapi.QualifiedName(attr[i+1:])]; ok {
		return &a
	}
	return nil
}

func attrKeys(a *resourceapi.DeviceAttribute) []string {
	out := []string{}
	if a == nil {
		return out
	}
	switch {
	case len(a.IntValues) > 0:
		for _, v := range a.IntValues {
			out = append(out, "i:"+strconv.FormatInt(v, 10))
		}
	case len(a.BoolValues) > 0:
		for _, v := range a.BoolValues {
			out = append(out, "b:"+strconv.FormatBool(v))
		}
	case len(a.StringValues) > 0:
		for _, v := range a.StringValues {
			out = append(out, "s:"+v)
		}
	case len(a.VersionValues) > 0:
		for _, v := range a.VersionValues {
			out = append(out, "v:"+v)
		}
	case a.IntValue != nil:
		out = append(out, "i:"+strconv.FormatInt(*a.IntValue, 10))
	case a.BoolValue != nil:
		out = append(out, "b:"+strconv.FormatBool(*a.BoolValue))
	case a.StringValue != nil:
		out = append(out, "s:"+*a.StringValue)
	case a.VersionValue != nil:
		out = append(out, "v:"+*a.VersionValue)
	}
	return dedupe(out)
}

func dedupe(in []string) []string {
	out := in[:0]
	for i, v := range in {
		if !containsStr(in[:i], v) {
			out = append(out, v)
		}
	}
	return out
}

func containsStr(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// tolerated reports whether every NoSchedule/NoExecute taint is tolerated.
func tolerated(taints []resourceapi.DeviceTaint, tolerations []resourceapi.DeviceToleration) bool {
	for _, t := range taints {
		if t.Effect != resourceapi.DeviceTaintEffectNoSchedule && t.Effect != resourceapi.DeviceTaintEffectNoExecute {
			continue
		}
		ok := false
		for _, tol := range tolerations {
			if resourceclaim.ToleratesTaint(tol, t) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// celValue is the CEL constraint view of device d, built once per session.
func (s *Session) celValue(d int32) (ref.Val, error) {
	if s.celVals == nil {
		s.celVals = make([]ref.Val, len(s.devs))
	}
	if v := s.celVals[d]; v != nil {
		return v, nil
	}
	v, err := s.e.constraints.deviceValue(s.devs[d].id.driver, s.devs[d].dev)
	if err != nil {
		return nil, err
	}
	s.celVals[d] = v
	return v, nil
}

// badPoolReachable reports whether an incomplete or invalid pool has a
// slice reachable from node; "All" requests must not ignore such pools.
func (s *Session) badPoolReachable(node int) bool {
	var name string
	if node >= 0 {
		name = s.nodes[node].Name
	}
	for _, bp := range s.badPools {
		for _, sl := range bp.slices {
			switch {
			case ptr.Deref(sl.Spec.NodeName, "") != "":
				if *sl.Spec.NodeName == name {
					return true
				}
			case ptr.Deref(sl.Spec.AllNodes, false):
				return true
			case sl.Spec.NodeSelector != nil:
				if node >= 0 && newNodeSel(sl.Spec.NodeSelector).match(0, s.nodes[node]) {
					return true
				}
			case ptr.Deref(sl.Spec.PerDeviceNodeSelection, false):
				for di := range sl.Spec.Devices {
					dv := &sl.Spec.Devices[di]
					if ptr.Deref(dv.NodeName, "") == name && name != "" || ptr.Deref(dv.AllNodes, false) ||
						dv.NodeSelector != nil && node >= 0 && newNodeSel(dv.NodeSelector).match(0, s.nodes[node]) {
						return true
					}
				}
			}
		}
	}
	return false
}
