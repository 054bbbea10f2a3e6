package pool

import (
	"slices"

	resourceapi "k8s.io/api/resource/v1"
)

// PoolUsage is the allocation state of one pool: which devices are
// allocated and how much of each shared counter they consume. It is built
// once per pool (Ledger.SetPool) and then updated incrementally; the
// queries an allocation engine asks in its inner loop (InUse, Fits,
// CanAllocate, Take, Release) are O(counters the device consumes) and do
// not allocate.
//
// Devices are addressed by their index in Pool().Devices. Counter values
// are kept as int64 per counter "slot" (one per counter of a counter set),
// in units when every value of that counter is a whole number and in
// thousandths otherwise (see scaledAmount for rounding). Health (Assess)
// recomputes consumption with exact resource.Quantity arithmetic and does
// not depend on this approximation.
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
	index map[string]int32

	users []int32 // non-admin allocations per device (recorded + taken)
	flags []uint8

	// Device i consumes uses[useStart[i]:useStart[i+1]].
	useStart []int32
	uses     []counterUse

	capacity []int64 // per slot
	consumed []int64 // per slot
	over     int     // slots with consumed > capacity

	slotSet     []string
	slotCounter []string
	slotMilli   []bool
}

const (
	flagShared   uint8 = 1 << iota // allowMultipleAllocations
	flagCounters                   // consumesCounters is not empty
)

type counterUse struct {
	slot   int32
	amount int64
}

type slotKey struct{ set, counter string }

// NewPoolUsage indexes p with nothing allocated. Consumption of counter
// sets or counters the pool does not define (an invalid pool) is ignored.
func NewPoolUsage(p *Pool) *PoolUsage {
	n := len(p.Devices)
	u := &PoolUsage{
		pool:     p,
		index:    make(map[string]int32, n),
		users:    make([]int32, n),
		flags:    make([]uint8, n),
		useStart: make([]int32, n+1),
	}

	// Slots in a fixed order: counter sets by name, counters by name.
	setNames := make([]string, 0, len(p.CounterSets))
	for name := range p.CounterSets {
		setNames = append(setNames, name)
	}
	slices.Sort(setNames)
	slot := make(map[slotKey]int32)
	for _, setName := range setNames {
		cs := p.CounterSets[setName]
		first := len(u.slotCounter)
		for name := range cs.Counters {
			u.slotCounter = append(u.slotCounter, name)
		}
		slices.Sort(u.slotCounter[first:])
		for i := first; i < len(u.slotCounter); i++ {
			name := u.slotCounter[i]
			u.slotSet = append(u.slotSet, setName)
			u.slotMilli = append(u.slotMilli, !integral(cs.Counters[name]))
			slot[slotKey{setName, name}] = int32(i)
		}
	}
	nSlots := len(u.slotCounter)
	u.capacity = make([]int64, nSlots)
	u.consumed = make([]int64, nSlots)

	// A slot needs thousandths if any device consumes a fraction of it.
	nUses := 0
	for i := range p.Devices {
		for _, c := range p.Devices[i].Device.ConsumesCounters {
			for name, v := range c.Counters {
				if s, ok := slot[slotKey{c.CounterSet, name}]; ok {
					nUses++
					if !integral(v.Value) {
						u.slotMilli[s] = true
					}
				}
			}
		}
	}
	for s := range nSlots {
		q := p.CounterSets[u.slotSet[s]].Counters[u.slotCounter[s]]
		u.capacity[s] = scaledAmount(q, u.slotMilli[s], false)
	}

	u.uses = make([]counterUse, 0, nUses)
	for i := range p.Devices {
		d := p.Devices[i].Device
		if _, dup := u.index[d.Name]; !dup {
			u.index[d.Name] = int32(i)
		}
		if deviceAllowsMultiple(d) {
			u.flags[i] |= flagShared
		}
		if len(d.ConsumesCounters) > 0 {
			u.flags[i] |= flagCounters
		}
		u.useStart[i] = int32(len(u.uses))
		for _, c := range d.ConsumesCounters {
			for name, v := range c.Counters {
				if s, ok := slot[slotKey{c.CounterSet, name}]; ok {
					u.uses = append(u.uses, counterUse{slot: s, amount: scaledAmount(v.Value, u.slotMilli[s], true)})
				}
			}
		}
	}
	u.useStart[n] = int32(len(u.uses))
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
func (u *PoolUsage) InUse(i int) bool { return u.users[i] > 0 && u.flags[i]&flagShared == 0 }

// Fits reports whether the counters device i consumes are available (see
// the type documentation for the exact rule). Devices that consume no
// counters always fit.
func (u *PoolUsage) Fits(i int) bool {
	f := u.flags[i]
	if f&flagCounters == 0 {
		return true
	}
	if f&flagShared != 0 && u.users[i] > 0 {
		return true
	}
	if u.over > 0 {
		return false
	}
	for _, c := range u.uses[u.useStart[i]:u.useStart[i+1]] {
		if u.consumed[c.slot]+c.amount > u.capacity[c.slot] {
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
		u.charge(i, +1)
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
		u.charge(i, -1)
	}
}

func (u *PoolUsage) charge(i int, sign int64) {
	for _, c := range u.uses[u.useStart[i]:u.useStart[i+1]] {
		wasOver := u.consumed[c.slot] > u.capacity[c.slot]
		u.consumed[c.slot] += sign * c.amount
		isOver := u.consumed[c.slot] > u.capacity[c.slot]
		switch {
		case isOver && !wasOver:
			u.over++
		case wasOver && !isOver:
			u.over--
		}
	}
}

// Overconsumed reports whether some counter of the pool is consumed beyond
// its capacity (which blocks every counter-consuming device, as upstream).
func (u *PoolUsage) Overconsumed() bool { return u.over > 0 }

// CounterBalance is one counter of a counter set in the fast fixed-point
// representation: Capacity and Consumed are in units, or in thousandths
// when Milli is true.
type CounterBalance struct {
	CounterSet string
	Counter    string
	Capacity   int64
	Consumed   int64
	Milli      bool
}

// Balances lists every counter in slot order (counter sets by name, then
// counters by name). It allocates; it is meant for debugging and tests.
func (u *PoolUsage) Balances() []CounterBalance {
	out := make([]CounterBalance, len(u.capacity))
	for s := range out {
		out[s] = CounterBalance{
			CounterSet: u.slotSet[s],
			Counter:    u.slotCounter[s],
			Capacity:   u.capacity[s],
			Consumed:   u.consumed[s],
			Milli:      u.slotMilli[s],
		}
	}
	return out
}

// reset forgets all allocations (used when rebuilding from the ledger).
func (u *PoolUsage) reset() {
	clear(u.users)
	clear(u.consumed)
	u.over = 0
}

// deviceAllowsMultiple reports allowMultipleAllocations of an API device.
func deviceAllowsMultiple(d *resourceapi.Device) bool {
	return d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations
}
