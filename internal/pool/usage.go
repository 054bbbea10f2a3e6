package pool

import (
	"math/big"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// PoolUsage is the allocation state of one pool: which devices are
// allocated and how much of each shared counter they consume. It is built
// once per pool (Ledger.SetPool) and then updated incrementally; the
// queries an allocation engine asks in its inner loop (InUse, Fits,
// CanAllocate, Take, Release) are O(counters the device consumes) and do
// not allocate.
//
// Devices are addressed by their index in Pool().Devices. Counter
// arithmetic is exact (amount.go): each counter is kept as an int64 in its
// own decimal unit, or as a big.Int when it does not fit. Assess uses the
// same accounting, so the health a DevicePool reports and the answers an
// engine gets cannot disagree.
//
// Semantics follow kube-scheduler (k8s.io/dynamic-resource-allocation
// v0.37.2, structured/internal/*/allocator_*.go, and the scheduler's
// foreachAllocatedDevice):
//   - An allocation result with adminAccess: true does not make a device
//     busy and does not consume counters. Such results are never given to
//     PoolUsage; the Ledger only counts them for reporting.
//   - A device's counters are consumed once while it is allocated, however
//     many allocations name it (upstream keeps allocated devices in a set).
//   - A device consuming counters fits only if, after adding its
//     consumption, no counter of the pool exceeds its capacity. Upstream
//     compares every counter of the pool, not only the ones the device
//     consumes, so a pool whose existing allocations already over-consume
//     any counter admits no further counter-consuming device. Fits does
//     the same.
//   - A device with allowMultipleAllocations: true is never "in use"
//     (several claims may share it) and, once allocated, its counters are
//     already paid for, so it always fits again. Its consumable capacity
//     (per-share capacity requests) is not tracked here.
//
// A PoolUsage is not safe for concurrent use.
type PoolUsage struct {
	pool  *Pool
	t     *counterTable
	index map[string]int32

	users []int32 // non-admin allocations per device (recorded + taken)

	// left is capacity minus consumption per slot; bigLeft holds it for
	// slots kept in big.Int (nil entries otherwise, nil without such slots).
	left    []int64
	bigLeft []*big.Int
	over    int // slots with left < 0
}

// NewPoolUsage indexes p with nothing allocated. Consumption of counter
// sets or counters the pool does not define (an invalid pool) is ignored.
func NewPoolUsage(p *Pool) *PoolUsage {
	u := newUsage(p)
	u.index = make(map[string]int32, len(p.Devices))
	for i := range p.Devices {
		name := p.Devices[i].Device.Name
		if _, dup := u.index[name]; !dup {
			u.index[name] = int32(i)
		}
	}
	return u
}

// newUsage is NewPoolUsage without the device-name index (Assess does not
// need it).
func newUsage(p *Pool) *PoolUsage {
	t := tableOf(p)
	u := &PoolUsage{
		pool:  p,
		t:     t,
		users: make([]int32, len(p.Devices)),
		left:  make([]int64, len(t.slots)),
	}
	for s := range t.slots {
		u.left[s] = t.slots[s].capacity
	}
	if t.big {
		u.bigLeft = make([]*big.Int, len(t.slots))
		for s := range t.slots {
			if c := t.slots[s].bigCapacity; c != nil {
				u.bigLeft[s] = new(big.Int).Set(c)
			}
		}
	}
	return u
}

// Pool is the pool this usage indexes.
func (u *PoolUsage) Pool() *Pool { return u.pool }

// Index returns the index in Pool().Devices of the device with this name
// (the first one if the name is duplicated).
func (u *PoolUsage) Index(device string) (int, bool) {
	i, ok := u.index[device]
	return int(i), ok
}

// Allocated reports whether any non-admin allocation names device i.
func (u *PoolUsage) Allocated(i int) bool { return u.users[i] > 0 }

// InUse reports whether device i is taken: allocated, and not a device
// that allows multiple allocations. Admin-access requests may use a device
// that is in use; other requests may not.
func (u *PoolUsage) InUse(i int) bool { return u.users[i] > 0 && u.t.flags[i]&flagShared == 0 }

// Fits reports whether the counters device i consumes are available (see
// the type documentation for the exact rule). Devices that consume no
// counters always fit.
func (u *PoolUsage) Fits(i int) bool {
	f := u.t.flags[i]
	if f&flagCounters == 0 {
		return true
	}
	if f&flagShared != 0 && u.users[i] > 0 {
		return true
	}
	if u.over > 0 {
		return false
	}
	t := u.t
	for k := t.useStart[i]; k < t.useStart[i+1]; k++ {
		c := &t.uses[k]
		if t.big && t.bigUses[k] != nil {
			if u.bigLeft[c.slot].Cmp(t.bigUses[k]) < 0 {
				return false
			}
		} else if u.left[c.slot] < c.amount {
			return false
		}
	}
	return true
}

// CanAllocate reports whether a request without admin access may take
// device i now: not in use and its counters fit. Taints, selectors and node
// reachability are the caller's business.
func (u *PoolUsage) CanAllocate(i int) bool { return !u.InUse(i) && u.Fits(i) }

// Take records one more non-admin allocation of device i, consuming its
// counters if it was not allocated yet. An engine uses Take and Release
// for tentative choices while it searches; it must Release what it does not
// keep. A kept choice is either left taken or, to make it part of the
// recorded state, released and then recorded with Ledger.AddClaim (doing
// both would count it twice). Take does not check Fits.
func (u *PoolUsage) Take(i int) {
	u.users[i]++
	if u.users[i] == 1 {
		u.charge(i, -1)
	}
}

// Release undoes one Take (or one recorded allocation). Releasing a device
// that is not allocated does nothing.
func (u *PoolUsage) Release(i int) {
	if u.users[i] == 0 {
		return
	}
	u.users[i]--
	if u.users[i] == 0 {
		u.charge(i, +1)
	}
}

// charge adds (sign +1) or takes (sign -1) what device i consumes to or
// from the balances.
func (u *PoolUsage) charge(i int, sign int64) {
	t := u.t
	for k := t.useStart[i]; k < t.useStart[i+1]; k++ {
		c := &t.uses[k]
		if t.big && t.bigUses[k] != nil {
			l := u.bigLeft[c.slot]
			wasOver := l.Sign() < 0
			if sign < 0 {
				l.Sub(l, t.bigUses[k])
			} else {
				l.Add(l, t.bigUses[k])
			}
			u.countOver(wasOver, l.Sign() < 0)
			continue
		}
		wasOver := u.left[c.slot] < 0
		u.left[c.slot] += sign * c.amount
		u.countOver(wasOver, u.left[c.slot] < 0)
	}
}

func (u *PoolUsage) countOver(was, is bool) {
	switch {
	case is && !was:
		u.over++
	case was && !is:
		u.over--
	}
}

// Overconsumed reports whether some counter of the pool is consumed beyond
// its capacity (which blocks every counter-consuming device, as upstream).
func (u *PoolUsage) Overconsumed() bool { return u.over > 0 }

// slotOver reports whether slot s is consumed beyond its capacity.
func (u *PoolUsage) slotOver(s int) bool {
	if u.bigLeft != nil && u.bigLeft[s] != nil {
		return u.bigLeft[s].Sign() < 0
	}
	return u.left[s] < 0
}

// consumed returns what allocated devices consume of slot s, exactly, in
// format f.
func (u *PoolUsage) consumed(s int, f resource.Format) resource.Quantity {
	sl := &u.t.slots[s]
	if u.bigLeft != nil && u.bigLeft[s] != nil {
		return bigQuantityOf(new(big.Int).Sub(sl.bigCapacity, u.bigLeft[s]), sl.unit, f)
	}
	return quantityOf(sl.capacity-u.left[s], sl.unit, f)
}

// CounterBalance is one counter of a counter set: its capacity and what
// the allocated and taken devices consume of it, exactly.
type CounterBalance struct {
	CounterSet string
	Counter    string
	Capacity   resource.Quantity
	Consumed   resource.Quantity
}

// Balances lists every counter in slot order (counter sets by name, then
// counters by name). It allocates; it is meant for debugging and tests.
func (u *PoolUsage) Balances() []CounterBalance {
	var out []CounterBalance
	for _, s := range u.t.sets {
		for k, name := range s.layout.names {
			capacity := s.layout.counters[name]
			out = append(out, CounterBalance{
				CounterSet: s.cs.Name,
				Counter:    name,
				Capacity:   capacity,
				Consumed:   u.consumed(int(s.first)+k, capacity.Format),
			})
		}
	}
	return out
}

// clone copies the mutable state; the table and index are shared.
func (u *PoolUsage) clone() *PoolUsage {
	c := *u
	c.users = append([]int32(nil), u.users...)
	c.left = append([]int64(nil), u.left...)
	if u.bigLeft != nil {
		c.bigLeft = make([]*big.Int, len(u.bigLeft))
		for s, l := range u.bigLeft {
			if l != nil {
				c.bigLeft[s] = new(big.Int).Set(l)
			}
		}
	}
	return &c
}

// deviceAllowsMultiple reports allowMultipleAllocations of an API device.
func deviceAllowsMultiple(d *resourceapi.Device) bool {
	return d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations
}
