package native

import (
	"slices"

	resourceapi "k8s.io/api/resource/v1"
)

// Compatibility groups (KEP-5963, DRADeviceCompatibilityGroups): devices
// that draw on the same counter set may be allocated at the same time only
// if the compatibility groups of all of them have a group in common. A
// device that declares no groups goes only with devices that declare none.
// The devices counted are those already allocated (recorded) and those the
// search has tentatively chosen; a further share of a shared device that
// already has one is not checked again, exactly where its counters are not
// charged again. This is kube-scheduler's rule (structured/internal/
// experimental, compatibility_groups.go), which keeps per counter set the
// running intersection of the groups placed on it.

// groupUse is one counter consumption of a device: the counter set (an
// index into compatState.cur) and the groups it declares, sorted.
type groupUse struct {
	set    int32
	groups []string
}

// groupInter is the running intersection of one counter set.
type groupInter struct {
	// has: some device is placed on the set.
	has bool
	// none: every device placed declared no groups.
	none bool
	// groups is the intersection of the groups declared (when !none),
	// sorted; never modified in place, so a saved value stays valid.
	groups []string
}

// admits reports whether a device declaring groups may join the set.
func (g groupInter) admits(groups []string) bool {
	switch {
	case !g.has:
		return true
	case len(groups) == 0:
		return g.none
	case g.none:
		return false
	}
	for _, v := range groups {
		if _, ok := slices.BinarySearch(g.groups, v); ok {
			return true
		}
	}
	return false
}

// add is the intersection after a device declaring groups joins. Like
// kube-scheduler it stays as it is for a device it would not admit, which
// only recorded allocations can produce.
func (g groupInter) add(groups []string) groupInter {
	if !g.has {
		return groupInter{has: true, none: len(groups) == 0, groups: groups}
	}
	if g.none || len(groups) == 0 {
		return g
	}
	var out []string
	for _, v := range g.groups {
		if _, ok := slices.BinarySearch(groups, v); ok {
			out = append(out, v)
		}
	}
	return groupInter{has: true, groups: out}
}

// compatKey names a counter set of a pool.
type compatKey struct {
	pool int32
	set  string
}

// compatState is the session's side of compatibility groups.
type compatState struct {
	ids map[compatKey]int32
	// cur is the intersection per counter set: the recorded devices' plus,
	// during a search, the tentative choices'.
	cur []groupInter
	// dirty: Record charged a device since cur was computed from the
	// recorded devices; rebuilt before the next search.
	dirty bool
}

// compatGroups lists the counter consumptions of a device of pool pi with
// their groups.
func (s *Session) compatGroups(pi int32, dev *resourceapi.Device) []groupUse {
	if len(dev.ConsumesCounters) == 0 {
		return nil
	}
	if s.compat.ids == nil {
		s.compat.ids = map[compatKey]int32{}
	}
	out := make([]groupUse, 0, len(dev.ConsumesCounters))
	for _, c := range dev.ConsumesCounters {
		k := compatKey{pi, c.CounterSet}
		id, ok := s.compat.ids[k]
		if !ok {
			id = int32(len(s.compat.cur))
			s.compat.ids[k] = id
			s.compat.cur = append(s.compat.cur, groupInter{})
		}
		var groups []string
		if len(c.CompatibilityGroups) > 0 {
			groups = slices.Clone(c.CompatibilityGroups)
			slices.Sort(groups)
			groups = slices.Compact(groups)
		}
		out = append(out, groupUse{set: id, groups: groups})
	}
	return out
}

// rebuildCompat computes the intersections of the recorded devices, in
// snapshot order (kube-scheduler folds them in slice order).
func (s *Session) rebuildCompat() {
	clear(s.compat.cur)
	for d := range s.devs {
		dev := &s.devs[d]
		if len(dev.groups) == 0 || (!s.inUse[d] && s.shares[d] == 0) {
			continue
		}
		for _, u := range dev.groups {
			s.compat.cur[u.set] = s.compat.cur[u.set].add(u.groups)
		}
	}
	s.compat.dirty = false
}

// compatAdmits reports whether device d may join the counter sets it draws
// on. tent is the search's count of tentative choices of d.
func (s *Session) compatAdmits(d int32, tent int32) bool {
	dev := &s.devs[d]
	if len(dev.groups) == 0 || (dev.multi && s.shares[d]+tent > 0) {
		return true
	}
	for _, u := range dev.groups {
		if !s.compat.cur[u.set].admits(u.groups) {
			return false
		}
	}
	return true
}

// groupSaved is an intersection as it was before a tentative choice.
type groupSaved struct {
	set  int32
	prev groupInter
}

// compatApply folds the groups of d into the intersections of its counter
// sets for a tentative choice (called where its counters are charged) and
// returns how many entries it saved on x.groupUndo.
func (x *search) compatApply(d int32) int32 {
	s := x.s
	dev := &s.devs[d]
	for _, u := range dev.groups {
		x.groupUndo = append(x.groupUndo, groupSaved{u.set, s.compat.cur[u.set]})
		s.compat.cur[u.set] = s.compat.cur[u.set].add(u.groups)
	}
	return int32(len(dev.groups))
}

// compatUndo restores the last n saved intersections.
func (x *search) compatUndo(n int32) {
	for ; n > 0; n-- {
		g := x.groupUndo[len(x.groupUndo)-1]
		x.groupUndo = x.groupUndo[:len(x.groupUndo)-1]
		x.s.compat.cur[g.set] = g.prev
	}
}
