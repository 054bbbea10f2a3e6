package pool

import (
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Ledger records which devices the allocated claims of a cluster use and
// keeps each pool's counter consumption up to date as claims and pools come
// and go. Adding or removing a claim costs O(devices of the claim);
// replacing a pool costs O(devices of the pool + its allocations).
//
// Allocations are remembered by (pool, device name) independently of the
// pool's slices, so a claim may name a pool that is not known yet, or a
// device that a new generation dropped (Assess reports that as
// AllocatedDeviceMissing).
//
// A Ledger is not safe for concurrent use.
type Ledger struct {
	pools  map[ID]*poolState
	claims map[string][]allocRef
}

type poolState struct {
	held  map[string]*holding
	usage *PoolUsage // nil while the pool is unknown
}

// holding is what the recorded claims say about one device name.
type holding struct {
	exclusive int32    // results without adminAccess
	admin     int32    // results with adminAccess
	claims    []string // claim keys, one per result
	// capacity is, per result (parallel to claims), the consumedCapacity
	// of a share of a device that allows multiple allocations (KEP-5075);
	// nil entries for results without one.
	capacity []map[resourceapi.QualifiedName]resource.Quantity
}

type allocRef struct {
	pool     ID
	device   string
	admin    bool
	capacity map[resourceapi.QualifiedName]resource.Quantity
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{pools: make(map[ID]*poolState), claims: make(map[string][]allocRef)}
}

// ClaimKey identifies a claim in the ledger: its UID, or namespace/name
// when it has none (claims read from files).
func ClaimKey(c *resourceapi.ResourceClaim) string {
	if c.UID != "" {
		return string(c.UID)
	}
	return c.Namespace + "/" + c.Name
}

func (l *Ledger) state(id ID) *poolState {
	ps := l.pools[id]
	if ps == nil {
		ps = &poolState{held: make(map[string]*holding)}
		l.pools[id] = ps
	}
	return ps
}

// SetPool adds or replaces a pool (for example after Build for a changed
// pool) and reapplies the recorded allocations to it. Tentative Takes on
// the previous PoolUsage are dropped. It returns the new usage.
func (l *Ledger) SetPool(p *Pool) *PoolUsage {
	ps := l.state(p.ID)
	u := NewPoolUsage(p)
	for name, h := range ps.held {
		if h.exclusive == 0 {
			continue
		}
		if i, ok := u.index[name]; ok {
			u.users[i] += h.exclusive
			u.charge(int(i), -1)
		}
	}
	ps.usage = u
	return u
}

// RemovePool forgets a pool's slices (all its slices were deleted). The
// allocations that name it are kept until their claims are removed.
func (l *Ledger) RemovePool(id ID) {
	ps := l.pools[id]
	if ps == nil {
		return
	}
	ps.usage = nil
	if len(ps.held) == 0 {
		delete(l.pools, id)
	}
}

// Usage returns the allocation state of a pool, or nil if SetPool was not
// called for it.
func (l *Ledger) Usage(id ID) *PoolUsage {
	if ps := l.pools[id]; ps != nil {
		return ps.usage
	}
	return nil
}

// AddClaim records the devices in claim.status.allocation. Adding a claim
// that is already recorded replaces its previous allocation, so informer
// updates can call it for every change; a claim without allocation is
// removed.
func (l *Ledger) AddClaim(c *resourceapi.ResourceClaim) {
	key := ClaimKey(c)
	l.RemoveClaimKey(key)
	if c.Status.Allocation == nil || len(c.Status.Allocation.Devices.Results) == 0 {
		return
	}
	results := c.Status.Allocation.Devices.Results
	refs := make([]allocRef, 0, len(results))
	for i := range results {
		r := &results[i]
		ref := allocRef{
			pool:   ID{Driver: r.Driver, Pool: r.Pool},
			device: r.Device,
			admin:  r.AdminAccess != nil && *r.AdminAccess,
			// The claim is not modified, so its map can be kept.
			capacity: r.ConsumedCapacity,
		}
		refs = append(refs, ref)
		l.hold(key, ref)
	}
	l.claims[key] = refs
}

func (l *Ledger) hold(key string, ref allocRef) {
	ps := l.state(ref.pool)
	h := ps.held[ref.device]
	if h == nil {
		h = &holding{}
		ps.held[ref.device] = h
	}
	h.claims = append(h.claims, key)
	if ref.capacity != nil || h.capacity != nil {
		if h.capacity == nil {
			h.capacity = make([]map[resourceapi.QualifiedName]resource.Quantity, len(h.claims)-1, len(h.claims))
		}
		h.capacity = append(h.capacity, ref.capacity)
	}
	if ref.admin {
		h.admin++
		return
	}
	h.exclusive++
	if ps.usage != nil {
		if i, ok := ps.usage.index[ref.device]; ok {
			ps.usage.Take(int(i))
		}
	}
}

// RemoveClaim forgets a claim's allocation (claim deleted or deallocated).
func (l *Ledger) RemoveClaim(c *resourceapi.ResourceClaim) { l.RemoveClaimKey(ClaimKey(c)) }

// RemoveClaimKey is RemoveClaim by ClaimKey, for delete events that only
// carry a tombstone.
func (l *Ledger) RemoveClaimKey(key string) {
	refs, ok := l.claims[key]
	if !ok {
		return
	}
	delete(l.claims, key)
	for _, ref := range refs {
		ps := l.pools[ref.pool]
		if ps == nil {
			continue
		}
		h := ps.held[ref.device]
		if h == nil {
			continue
		}
		if j := slices.Index(h.claims, key); j >= 0 {
			h.claims = slices.Delete(h.claims, j, j+1)
			if h.capacity != nil {
				h.capacity = slices.Delete(h.capacity, j, j+1)
			}
		}
		if ref.admin {
			h.admin--
		} else {
			h.exclusive--
			if ps.usage != nil {
				if i, ok := ps.usage.index[ref.device]; ok {
					ps.usage.Release(int(i))
				}
			}
		}
		if h.exclusive == 0 && h.admin == 0 {
			delete(ps.held, ref.device)
		}
		if len(ps.held) == 0 && ps.usage == nil {
			delete(l.pools, ref.pool)
		}
	}
}

// Holders tells how many recorded allocations name a device, split into
// exclusive (no adminAccess) and admin, and which claims they come from
// (claim keys, sorted, one per allocation result).
func (l *Ledger) Holders(id ID, device string) (exclusive, admin int, claims []string) {
	ps := l.pools[id]
	if ps == nil {
		return 0, 0, nil
	}
	h := ps.held[device]
	if h == nil {
		return 0, 0, nil
	}
	claims = slices.Clone(h.claims)
	slices.Sort(claims)
	return int(h.exclusive), int(h.admin), claims
}

// Held says whether a recorded allocation names a device of the pool,
// published or not: a pool whose slices are gone still matters to the
// claims that point at it.
func (l *Ledger) Held(id ID) bool {
	ps := l.pools[id]
	return ps != nil && len(ps.held) > 0
}

// Claims is the number of recorded claims.
func (l *Ledger) Claims() int { return len(l.claims) }

// Clone returns an independent copy, for an allocation session that takes
// devices tentatively without touching the shared state. The immutable
// parts of each PoolUsage (device index, consumption table) are shared.
func (l *Ledger) Clone() *Ledger {
	out := &Ledger{
		pools:  make(map[ID]*poolState, len(l.pools)),
		claims: make(map[string][]allocRef, len(l.claims)),
	}
	for k, refs := range l.claims {
		out.claims[k] = slices.Clone(refs)
	}
	for id, ps := range l.pools {
		cp := &poolState{held: make(map[string]*holding, len(ps.held))}
		for name, h := range ps.held {
			cp.held[name] = &holding{exclusive: h.exclusive, admin: h.admin, claims: slices.Clone(h.claims), capacity: slices.Clone(h.capacity)}
		}
		if ps.usage != nil {
			cp.usage = ps.usage.clone()
		}
		out.pools[id] = cp
	}
	return out
}
