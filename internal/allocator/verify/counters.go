package verify

import (
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/pool"
)

// checkCounters checks shared counters: in every pool where this allocation
// takes a device that consumes counters, what the allocated claims consume
// plus what this allocation consumes must not exceed any counter of the
// pool. Admin-access results consume nothing, as they do not make a device
// busy once allocated.
func (k *check) checkCounters() {
	mine := map[pool.ID]counterUse{}
	charged := map[deviceID]bool{}
	for _, res := range k.results {
		if res.dev == nil || len(res.dev.Device.ConsumesCounters) == 0 || ptr.Deref(res.AdminAccess, false) {
			continue
		}
		// A shared device consumes its counters once, when its first
		// share is allocated.
		if res.ShareID != nil && (charged[res.id] || len(k.shares[res.id]) > 0) {
			continue
		}
		charged[res.id] = true
		u := mine[res.pool.ID]
		if u == nil {
			u = counterUse{}
			mine[res.pool.ID] = u
		}
		u.add(res.dev.Device.ConsumesCounters)
	}
	for id, u := range mine {
		p := k.pools[id]
		before := k.consumed[id]
		for setName, set := range p.CounterSets {
			for counter, capacity := range set.Counters {
				total := before[setName][counter].DeepCopy()
				total.Add(u[setName][counter])
				if total.Cmp(capacity) > 0 {
					k.fail(RuleCounters, "", "pool %s counter %s/%s: allocated claims and this allocation consume %s of %s",
						id, setName, counter, total.String(), capacity.String())
				}
			}
		}
		for setName := range u {
			if p.CounterSets[setName] == nil {
				k.fail(RuleCounters, "", "pool %s has no counter set %s", id, setName)
			}
		}
	}
}
