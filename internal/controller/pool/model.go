package pool

import (
	"slices"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	poolpkg "github.com/drastack/drastack/internal/pool"
)

// model is the controller's in-memory view of the cluster, kept up to
// date by informer events: the ResourceSlices of every pool, the Ledger of
// allocated claims, which nodes exist, and since when each pool has been
// incomplete. Every event method returns the pools it touched, so one
// event costs work proportional to what it changed and only those pools
// are validated again.
//
// The slices are the informer's own objects (never copied, never
// modified): the model adds a map entry and a pointer per slice on top of
// the cache, not a second copy of the data.
//
// A model is safe for concurrent use: informer handlers write under the
// lock, reconcile workers read under the read lock.
type model struct {
	mu sync.RWMutex
	// slices of each pool, every generation, in no particular order.
	slices map[poolpkg.ID][]*resourceapi.ResourceSlice
	// onNode counts, per node name, the slices each pool has there, to
	// find the pools a Node event concerns.
	onNode map[string]map[poolpkg.ID]int
	nodes  map[string]struct{}
	ledger *poolpkg.Ledger
	// incompleteSince is when each pool was first seen incomplete (or,
	// for a pool without slices, first seen gone).
	incompleteSince map[poolpkg.ID]time.Time
	// built is each pool as poolpkg.Build made it from its current
	// slices, dropped whenever one of them changes. Pools are read-only
	// and the informer's objects are immutable, so a pool whose slices
	// did not change validates from the same Pool: a resync of 10,000
	// pools rebuilds none of them.
	built map[poolpkg.ID]*poolpkg.Pool
	// rules are the DeviceTaintRules by name (empty when the cluster
	// serves none).
	rules map[string]*resourceapi.DeviceTaintRule
	// claimNames are namespace/name of the allocated claims by ledger key
	// (UID), for messages.
	claimNames map[string]string
}

func newModel() *model {
	return &model{
		slices:          make(map[poolpkg.ID][]*resourceapi.ResourceSlice),
		onNode:          make(map[string]map[poolpkg.ID]int),
		nodes:           make(map[string]struct{}),
		ledger:          poolpkg.NewLedger(),
		incompleteSince: make(map[poolpkg.ID]time.Time),
		built:           make(map[poolpkg.ID]*poolpkg.Pool),
		rules:           make(map[string]*resourceapi.DeviceTaintRule),
		claimNames:      make(map[string]string),
	}
}

func sliceNode(s *resourceapi.ResourceSlice) string {
	if s.Spec.NodeName != nil {
		return *s.Spec.NodeName
	}
	return ""
}

// upsertSlice records a new or changed slice. old is the previous version
// (nil for an add); when the update moved the slice to another pool, both
// pools are returned.
func (m *model) upsertSlice(old, s *resourceapi.ResourceSlice) []poolpkg.ID {
	m.mu.Lock()
	defer m.mu.Unlock()
	id := poolpkg.KeyOf(s)
	touched := []poolpkg.ID{id}
	delete(m.built, id)
	if old != nil {
		if oldID := poolpkg.KeyOf(old); oldID != id {
			m.removeLocked(oldID, old)
			touched = append(touched, oldID)
		} else if sliceNode(old) != sliceNode(s) {
			m.countNode(sliceNode(old), id, -1)
			m.countNode(sliceNode(s), id, +1)
		}
	}
	list := m.slices[id]
	for i, cur := range list {
		if cur.Name == s.Name {
			list[i] = s
			return touched
		}
	}
	m.slices[id] = append(list, s)
	m.countNode(sliceNode(s), id, +1)
	return touched
}

// deleteSlice forgets a slice.
func (m *model) deleteSlice(s *resourceapi.ResourceSlice) []poolpkg.ID {
	m.mu.Lock()
	defer m.mu.Unlock()
	id := poolpkg.KeyOf(s)
	m.removeLocked(id, s)
	return []poolpkg.ID{id}
}

func (m *model) removeLocked(id poolpkg.ID, s *resourceapi.ResourceSlice) {
	list := m.slices[id]
	i := slices.IndexFunc(list, func(cur *resourceapi.ResourceSlice) bool { return cur.Name == s.Name })
	if i < 0 {
		return
	}
	delete(m.built, id)
	m.countNode(sliceNode(list[i]), id, -1)
	list[i] = list[len(list)-1]
	list[len(list)-1] = nil
	list = list[:len(list)-1]
	if len(list) == 0 {
		delete(m.slices, id)
		return
	}
	m.slices[id] = list
}

func (m *model) countNode(node string, id poolpkg.ID, delta int) {
	if node == "" {
		return
	}
	pools := m.onNode[node]
	if pools == nil {
		if delta < 0 {
			return
		}
		pools = make(map[poolpkg.ID]int)
		m.onNode[node] = pools
	}
	n := pools[id] + delta
	if n > 0 {
		pools[id] = n
		return
	}
	delete(pools, id)
	if len(pools) == 0 {
		delete(m.onNode, node)
	}
}

// upsertClaim records a claim's allocation (replacing what the previous
// version allocated). Claim updates that leave the allocation as it was
// (the common case: reservedFor, conditions, devices status) touch
// nothing.
func (m *model) upsertClaim(old, c *resourceapi.ResourceClaim) []poolpkg.ID {
	if old != nil && sameAllocation(old, c) {
		return nil
	}
	touched := allocatedPools(c)
	if old != nil {
		touched = appendNew(touched, allocatedPools(old)...)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ledger.AddClaim(c)
	if key := poolpkg.ClaimKey(c); c.Status.Allocation != nil {
		m.claimNames[key] = c.Namespace + "/" + c.Name
	} else {
		delete(m.claimNames, key)
	}
	return touched
}

// deleteClaim forgets a claim's allocation.
func (m *model) deleteClaim(c *resourceapi.ResourceClaim) []poolpkg.ID {
	touched := allocatedPools(c)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ledger.RemoveClaim(c)
	delete(m.claimNames, poolpkg.ClaimKey(c))
	return touched
}

// allocatedPools lists the pools a claim's allocation names.
func allocatedPools(c *resourceapi.ResourceClaim) []poolpkg.ID {
	if c == nil || c.Status.Allocation == nil {
		return nil
	}
	var out []poolpkg.ID
	for _, r := range c.Status.Allocation.Devices.Results {
		out = appendNew(out, poolpkg.ID{Driver: r.Driver, Pool: r.Pool})
	}
	return out
}

// sameAllocation compares what the Ledger records of two claim versions:
// identity and, per result, driver, pool, device and adminAccess.
func sameAllocation(a, b *resourceapi.ResourceClaim) bool {
	if poolpkg.ClaimKey(a) != poolpkg.ClaimKey(b) {
		return false
	}
	ra, rb := results(a), results(b)
	if len(ra) != len(rb) {
		return false
	}
	for i := range ra {
		x, y := &ra[i], &rb[i]
		if x.Driver != y.Driver || x.Pool != y.Pool || x.Device != y.Device ||
			(x.AdminAccess != nil && *x.AdminAccess) != (y.AdminAccess != nil && *y.AdminAccess) {
			return false
		}
	}
	return true
}

func results(c *resourceapi.ResourceClaim) []resourceapi.DeviceRequestAllocationResult {
	if c.Status.Allocation == nil {
		return nil
	}
	return c.Status.Allocation.Devices.Results
}

func appendNew(list []poolpkg.ID, ids ...poolpkg.ID) []poolpkg.ID {
	for _, id := range ids {
		if !slices.Contains(list, id) {
			list = append(list, id)
		}
	}
	return list
}

// setNode records that a node exists (or not) and returns the pools with
// slices on it.
func (m *model) setNode(name string, exists bool) []poolpkg.ID {
	m.mu.Lock()
	defer m.mu.Unlock()
	if exists {
		m.nodes[name] = struct{}{}
	} else {
		delete(m.nodes, name)
	}
	var out []poolpkg.ID
	for id := range m.onNode[name] {
		out = append(out, id)
	}
	return out
}

// hasNode reports whether a Node of that name exists.
func (m *model) hasNode(name string) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	_, ok := m.nodes[name]
	return ok
}

// slicesOf returns the slices of a pool (a copy of the list; the objects
// are shared and must not be modified).
func (m *model) slicesOf(id poolpkg.ID) []*resourceapi.ResourceSlice {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return slices.Clone(m.slices[id])
}

// pool returns the pool built from its current slices: the one built
// before when none of them changed since, else a new one (nil when the
// pool has no slices).
func (m *model) pool(id poolpkg.ID) *poolpkg.Pool {
	m.mu.RLock()
	p, members := m.built[id], m.slices[id]
	if p == nil {
		members = slices.Clone(members)
	}
	m.mu.RUnlock()
	if p != nil || len(members) == 0 {
		return p
	}
	// Build outside the lock; keep the result only if the slices are
	// still the ones it was built from.
	p = poolpkg.Build(id, members)
	m.mu.Lock()
	if slices.Equal(m.slices[id], members) {
		m.built[id] = p
	}
	m.mu.Unlock()
	return p
}

// upsertRule records a new or changed DeviceTaintRule and returns the
// pools whose devices it (or its previous version) may taint.
func (m *model) upsertRule(old, r *resourceapi.DeviceTaintRule) []poolpkg.ID {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old != nil {
		delete(m.rules, old.Name)
	}
	m.rules[r.Name] = r
	return m.poolsOfLocked(old, r)
}

// deleteRule forgets a DeviceTaintRule.
func (m *model) deleteRule(r *resourceapi.DeviceTaintRule) []poolpkg.ID {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.rules, r.Name)
	return m.poolsOfLocked(r)
}

// poolsOfLocked lists the pools with slices that one of rules selects.
func (m *model) poolsOfLocked(rules ...*resourceapi.DeviceTaintRule) []poolpkg.ID {
	var out []poolpkg.ID
	for id := range m.slices {
		for _, r := range rules {
			if r != nil && poolpkg.RuleMatchesPool(r, id) {
				out = append(out, id)
				break
			}
		}
	}
	return out
}

// rulesOf returns the DeviceTaintRules that may taint devices of a pool.
func (m *model) rulesOf(id poolpkg.ID) []*resourceapi.DeviceTaintRule {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []*resourceapi.DeviceTaintRule
	for _, r := range m.rules {
		if poolpkg.RuleMatchesPool(r, id) {
			out = append(out, r)
		}
	}
	return out
}

// ids lists every pool that has slices.
func (m *model) ids() []poolpkg.ID {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]poolpkg.ID, 0, len(m.slices))
	for id := range m.slices {
		out = append(out, id)
	}
	return out
}

// assess runs pool.AssessPool against the ledger and the DeviceTaintRules.
func (m *model) assess(p *poolpkg.Pool, now, since time.Time, grace time.Duration) poolpkg.Report {
	rules := m.rulesOf(p.ID)
	m.mu.RLock()
	defer m.mu.RUnlock()
	return poolpkg.AssessPool(p, m.ledger, poolpkg.AssessInput{Now: now, IncompleteSince: since, Grace: grace, TaintRules: rules,
		ClaimName: func(key string) string { return m.claimNames[key] }})
}

// held says whether allocated claims point at devices of the pool.
func (m *model) held(id poolpkg.ID) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.ledger.Held(id)
}

// observeIncomplete returns since when p has been incomplete (zero when it
// is complete, which also clears the record). seed is a time recorded
// earlier (DevicePool status.incompleteSince, which survives restarts of
// the operator); the earlier of seed and what the model remembers wins.
func (m *model) observeIncomplete(p *poolpkg.Pool, now, seed time.Time) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p.Complete() {
		delete(m.incompleteSince, p.ID)
		return time.Time{}
	}
	since, ok := m.incompleteSince[p.ID]
	if !ok {
		since = now
	}
	if !seed.IsZero() && seed.Before(since) {
		since = seed
	}
	m.incompleteSince[p.ID] = since
	return since
}

// forget drops what the model remembers about a pool that is gone for
// good (its DevicePool was deleted).
func (m *model) forget(id poolpkg.ID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.incompleteSince, id)
}
