package verify

import (
	"slices"
	"strings"

	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/pool"
)

// checkCompatibilityGroups checks KEP-5963 with DRADeviceCompatibilityGroups
// on: on every counter set that a device of this allocation draws on, the
// devices drawing on it (those of allocated claims and this allocation's,
// a shared device counted once) either all declare no groups or all declare
// groups with at least one in common. Admin-access results take no part,
// as they consume no counters. Checked from the definition (set
// intersection over all members), not as a running state.
func (k *check) checkCompatibilityGroups() {
	if !k.features.CompatibilityGroups {
		return
	}
	type setKey struct {
		pool pool.ID
		set  string
	}
	// members per counter set: the group lists, each sorted.
	members := map[setKey][][]string{}
	// recorded counts the members from allocated claims, which come first.
	recorded := map[setKey]int{}
	touched := map[setKey]bool{}
	add := func(id deviceID, mine bool) {
		d := k.devices[id]
		if d == nil {
			return
		}
		p := pool.ID{Driver: id.driver, Pool: id.pool}
		for _, c := range d.Device.ConsumesCounters {
			key := setKey{p, c.CounterSet}
			g := slices.Clone(c.CompatibilityGroups)
			slices.Sort(g)
			members[key] = append(members[key], g)
			if mine {
				touched[key] = true
			} else {
				recorded[key]++
			}
		}
	}
	seen := map[deviceID]bool{}
	for id := range k.inUse {
		seen[id] = true
		add(id, false)
	}
	for id := range k.shares {
		if !seen[id] {
			seen[id] = true
			add(id, false)
		}
	}
	for _, res := range k.results {
		if res.dev == nil || ptr.Deref(res.AdminAccess, false) || seen[res.id] {
			continue
		}
		seen[res.id] = true
		add(res.id, true)
	}
	for key := range touched {
		all := members[key]
		if !consistent(all[:recorded[key]]) {
			// The allocated claims alone already break the rule (the slice
			// changed under them): nothing to judge this allocation by.
			continue
		}
		if !consistent(all) {
			k.fail(RuleCompatibilityGroups, "", "pool %s counter set %s: the devices drawing on it have no compatibility group in common (%s)", key.pool, key.set, groupsString(all))
		}
	}
}

// consistent reports whether devices with these group lists may draw on
// one counter set together: all declare none, or all declare some and the
// lists have a group in common.
func consistent(groups [][]string) bool {
	var common []string
	for i, g := range groups {
		if (len(g) == 0) != (len(groups[0]) == 0) {
			return false
		}
		if i == 0 {
			common = g
			continue
		}
		common = slices.DeleteFunc(slices.Clone(common), func(v string) bool { return !slices.Contains(g, v) })
	}
	return len(groups) == 0 || len(groups[0]) == 0 || len(common) > 0
}

func groupsString(groups [][]string) string {
	parts := make([]string, len(groups))
	for i, g := range groups {
		parts[i] = "[" + strings.Join(g, ",") + "]"
	}
	return strings.Join(parts, " ")
}
