package native

import (
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
)

const maxResults = resourceapi.AllocationResultsMaxSize

// usable reports whether device d can be added for alternative sb of slot i
// in the current state: free (or admin access), taints tolerated, counters
// left, and consistent with the constraints decided so far.
func (x *search) usable(i int, sb *sub, d int32) bool {
	s := x.s
	dev := &s.devs[d]
	if !x.free(i, sb, d) || !x.allowed(d) {
		return false
	}
	if dev.hardTaints && !tolerated(dev.dev.Taints, sb.tolerations) {
		return false
	}
	if !s.countersFree(d, x.tent[d]) {
		return false
	}
	if !x.capacityFree(i, sb, d) {
		return false
	}
	for _, m := range sb.match {
		if x.matchSet[m] && !containsStr(x.values(sb, x.p.match[m], d), x.matchVal[m]) {
			return false
		}
		// A list value (DRAListTypeAttributes off) matches nothing, not
		// even the same shared device taken again for another request.
		if x.matchSet[m] && isListKey(x.matchVal[m:m+1]) && x.inMatchSet(m) {
			return false
		}
	}
	for _, m := range sb.distinct {
		vals := x.values(sb, x.p.distinct[m], d)
		if len(vals) == 0 {
			return false
		}
		for _, v := range vals {
			if x.used[m][v] > 0 {
				return false
			}
		}
		if !x.listFirst(i, m, d, vals) {
			return false
		}
	}
	return true
}

// listFirst applies what kube-scheduler does with a distinctAttribute
// constraint over a list value while DRAListTypeAttributes is off: it
// compares scalars only, so a list value conflicts with no other value,
// but it accepts a device with a list value only as the first device of
// the constraint's set, in its own order (requests in claim order, then
// scheduler order within a request). Device d, with values vals, may join
// constraint m's set for slot i when the set stays one in which at most
// one device has a list value and that device comes first in that order.
func (x *search) listFirst(i, m int, d int32, vals []string) bool {
	if x.s.f.ListTypeAttributes || !x.s.listKeys {
		return true
	}
	list := isListKey(vals)
	for _, ch := range x.chosen {
		csb := &x.p.slots[ch.slot].subs[ch.sub]
		if !containsInt(csb.distinct, m) {
			continue
		}
		other := isListKey(x.values(csb, x.p.distinct[m], ch.dev))
		switch {
		case list && (other || ch.slot < i || x.s.schedulerOrder(ch.dev, d) < 0):
			return false
		case !list && other && ch.slot == i && x.s.schedulerOrder(ch.dev, d) > 0:
			return false
		}
	}
	return true
}

// Notes for a constraint's message when list values are among its
// candidates while DRAListTypeAttributes is off: the user hears that the
// gate, not the values, is what fails.
const (
	listsMatchNothing = " (DRAListTypeAttributes is off: a device's list of values matches no other device)"
	listsOnlyFirst    = " (DRAListTypeAttributes is off: a distinctAttribute constraint takes a device with a list of values only as its first device)"
)

// listsIgnored returns note when some candidate of c has a list value of
// attr for sb while DRAListTypeAttributes is off, else "".
func (x *search) listsIgnored(sb *sub, c []int32, attr, note string) string {
	if x.s.f.ListTypeAttributes || !x.s.listKeys {
		return ""
	}
	for _, d := range c {
		if isListKey(x.values(sb, attr, d)) {
			return note
		}
	}
	return ""
}

// distinctListsIgnored is listsOnlyFirst when a candidate of a request
// bound by a distinctAttribute constraint has a list value of its
// attribute, for a search that found nothing else to blame.
func (x *search) distinctListsIgnored() string {
	for i := range x.p.slots {
		for b := range x.p.slots[i].subs {
			sb := &x.p.slots[i].subs[b]
			for _, m := range sb.distinct {
				if note := x.listsIgnored(sb, x.cands[i][b], x.p.distinct[m], listsOnlyFirst); note != "" {
					return note
				}
			}
		}
	}
	return ""
}

// inMatchSet reports whether a device is already chosen for a request
// that matchAttribute constraint m binds.
func (x *search) inMatchSet(m int) bool {
	for _, ch := range x.chosen {
		if containsInt(x.p.slots[ch.slot].subs[ch.sub].match, m) {
			return true
		}
	}
	return false
}

// isListKey reports whether vals is the key of a list value that
// attrKeysOf gives while DRAListTypeAttributes is off.
func isListKey(vals []string) bool {
	return len(vals) == 1 && strings.HasPrefix(vals[0], "l:")
}

// free reports whether device d is free for alternative sb of slot i: a
// shared device always is (unless held exclusively); others must not be in
// use or chosen, except with admin access, which may share a device with
// other claims but does not give a claim the same device twice.
func (x *search) free(i int, sb *sub, d int32) bool {
	s := x.s
	multi := s.devs[d].multi
	if sb.admin {
		if multi {
			return true
		}
		claim := x.p.slots[i].claim
		for _, ch := range x.chosen {
			if ch.dev == d && x.p.slots[ch.slot].claim == claim {
				return false
			}
		}
		return true
	}
	return !s.inUse[d] && (multi || x.tent[d] == 0)
}

// allowed reports whether the gates and the state of compatibility groups
// let device d be allocated on the search's node (see device.refused,
// device.nodeOps and compat.go).
func (x *search) allowed(d int32) bool {
	dev := &x.s.devs[d]
	switch {
	case dev.refused:
		return false
	case dev.nodeOps && !x.nodeOps:
		return false
	}
	return x.s.compatAdmits(d, x.tent[d])
}

// capacityFree reports whether sb's consumption of d's capacities fits into
// what is left. A consumption that cannot be computed makes the claim
// invalid: the first such error is kept in x.capErr.
func (x *search) capacityFree(i int, sb *sub, d int32) bool {
	f := x.s.fit(sb, d)
	if f.err != nil {
		if x.capErr == nil {
			x.capErr = x.p.capacityError(x.p.slots[i].claim, sb, x.s.devs[d].id, f.err)
		}
		return false
	}
	return x.s.capacityLeft(d, f)
}

// apply tentatively allocates d; undo reverts the last apply exactly.
func (x *search) apply(i, b int, d int32) {
	s := x.s
	sb := &x.p.slots[i].subs[b]
	var groups int32
	if dev := &s.devs[d]; dev.multi {
		if s.shares[d]+x.tent[d] == 0 {
			s.charge(dev, -1)
			groups = x.compatApply(d)
		}
		s.addShare(d, s.fit(sb, d).consumed, +1)
	} else {
		s.charge(dev, -1)
		groups = x.compatApply(d)
	}
	x.tent[d]++
	for _, m := range sb.distinct {
		for _, v := range x.values(sb, x.p.distinct[m], d) {
			x.used[m][v]++
		}
	}
	x.chosen = append(x.chosen, choice{slot: i, sub: b, dev: d, groups: groups})
}

func (x *search) undo() {
	s := x.s
	ch := x.chosen[len(x.chosen)-1]
	x.chosen = x.chosen[:len(x.chosen)-1]
	sb := &x.p.slots[ch.slot].subs[ch.sub]
	for _, m := range sb.distinct {
		for _, v := range x.values(sb, x.p.distinct[m], ch.dev) {
			x.used[m][v]--
		}
	}
	x.compatUndo(ch.groups)
	x.tent[ch.dev]--
	if dev := &s.devs[ch.dev]; dev.multi {
		s.addShare(ch.dev, s.fit(sb, ch.dev).consumed, -1)
		if s.shares[ch.dev]+x.tent[ch.dev] == 0 {
			s.charge(dev, +1)
		}
	} else {
		s.charge(dev, +1)
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
	// Usually few distinct values: parallel slices beat a map, which is
	// built only when there are many.
	var order []string
	var counts []int
	var index map[string]int
	for _, d := range c {
		if !x.usable(i, sb, d) {
			continue
		}
		for _, v := range x.values(sb, attr, d) {
			k := -1
			if index != nil {
				if j, ok := index[v]; ok {
					k = j
				}
			} else {
				for j, o := range order {
					if o == v {
						k = j
						break
					}
				}
			}
			if k >= 0 {
				counts[k]++
				continue
			}
			order = append(order, v)
			counts = append(counts, 1)
			switch {
			case index != nil:
				index[v] = len(order) - 1
			case len(order) > 16:
				index = make(map[string]int, 2*len(order))
				for j, o := range order {
					index[o] = j
				}
			}
		}
	}
	out := order[:0]
	for k, v := range order {
		if counts[k] >= need && x.laterSlotsCanMatch(i, m, v) {
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
			c := x.cands[j][b]
			need, n := max(sb.count, 1), 0
			for _, d := range c {
				if x.usable(j, sb, d) && containsStr(x.values(sb, attr, d), v) {
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
				for _, v := range x.values(sb, x.p.distinct[m], d) {
					seen[v] = true
				}
			}
			if len(seen) >= sb.count {
				break
			}
		}
		if len(seen) < sb.count {
			if x.noneHas(sb, c, x.p.distinct[m]) {
				x.failf("request %s: constraint distinctAttribute %s: none of the %d matching devices has that attribute", sb.name, x.p.distinct[m], len(c))
			} else {
				x.failf("request %s: fewer than %d different values of %s", sb.name, sb.count, x.p.distinct[m])
			}
			return false
		}
	}
	return true
}

// attrValues returns the values of an attribute of device d as typed keys
// (a scalar is a one-element list); empty when the device lacks it. The
// result is shared: callers must not modify it.
func (s *Session) attrValues(attr string, d int32) []string {
	per := s.attrCache[attr]
	if per == nil {
		per = make([][]string, len(s.devs))
		s.attrCache[attr] = per
	}
	if v := per[d]; v != nil {
		return v
	}
	a, ok := lookupAttr(&s.devs[d], attr)
	v := s.attrKeysOf(a, ok, d)
	per[d] = v
	return v
}

// attrKeysOf is attribute a of device d (ok: the device has it) as typed
// keys, as attrValues returns them.
func (s *Session) attrKeysOf(a resourceapi.DeviceAttribute, ok bool, d int32) []string {
	var v []string
	switch {
	case !ok:
		v = noValues
	case hasList(&a) && !s.f.ListTypeAttributes:
		// Without DRAListTypeAttributes kube-scheduler compares scalars
		// only: a list value equals nothing, so a matchAttribute set with
		// it and another device fails, and it differs from every value,
		// so a distinctAttribute set takes it, but only as its first
		// device (search.listFirst). The API server drops list values
		// from slices written while the gate is off; slices written
		// before keep them.
		v = []string{"l:" + strconv.Itoa(int(d))}
		s.listKeys = true
	case !hasList(&a) && a.StringValue != nil:
		// Scalars repeat across devices: share one key list per value.
		if v = s.stringKeys[*a.StringValue]; v == nil {
			v = []string{"s:" + *a.StringValue}
			s.stringKeys[*a.StringValue] = v
		}
	case !hasList(&a) && a.IntValue != nil:
		if v = s.intKeys[*a.IntValue]; v == nil {
			v = []string{"i:" + strconv.FormatInt(*a.IntValue, 10)}
			s.intKeys[*a.IntValue] = v
		}
	default:
		v = attrKeys(&a)
	}
	return v
}

// noValues is the (shared, never modified) value list of a device without
// the attribute.
var noValues = []string{}

func hasList(a *resourceapi.DeviceAttribute) bool {
	return len(a.IntValues) > 0 || len(a.BoolValues) > 0 || len(a.StringValues) > 0 || len(a.VersionValues) > 0
}

func lookupAttr(dev *device, attr string) (resourceapi.DeviceAttribute, bool) {
	if a, ok := dev.dev.Attributes[resourceapi.QualifiedName(attr)]; ok {
		return a, true
	}
	i := strings.Index(attr, "/")
	if i < 0 || attr[:i] != dev.id.driver {
		return resourceapi.DeviceAttribute{}, false
	}
	a, ok := dev.dev.Attributes[resourceapi.QualifiedName(attr[i+1:])]
	return a, ok
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
