package claims

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/drastack/drastack/internal/pool"
)

// Race is a device or counter that allocated claims were given twice: two
// allocators (the operator and kube-scheduler) chose from the same free
// devices before either saw the other's write. Its reason is the pool
// reason code the DevicePool reports for the same finding.
type Race struct {
	// Reason is pool.ReasonDeviceDoubleAllocated or
	// pool.ReasonCounterOverconsumed.
	Reason pool.Reason
	Pool   pool.ID
	// Device given twice (DeviceDoubleAllocated).
	Device string
	// CounterSet and Counter consumed beyond capacity (CounterOverconsumed).
	CounterSet, Counter string
	// Claims involved, namespace/name, sorted.
	Claims []string
}

func (r Race) String() string {
	if r.Reason == pool.ReasonDeviceDoubleAllocated {
		return fmt.Sprintf("device %s of pool %s is allocated to %v", r.Device, r.Pool, r.Claims)
	}
	return fmt.Sprintf("counter %s of counter set %s in pool %s is over-consumed by %v", r.Counter, r.CounterSet, r.Pool, r.Claims)
}

// poolIndex finds a pool's devices by name.
type poolIndex struct {
	p    *pool.Pool
	byID map[string]int
}

func indexPools(pools []*pool.Pool) map[pool.ID]*poolIndex {
	out := make(map[pool.ID]*poolIndex, len(pools))
	for _, p := range pools {
		ix := &poolIndex{p: p, byID: make(map[string]int, len(p.Devices))}
		for i := range p.Devices {
			if _, dup := ix.byID[p.Devices[i].Device.Name]; !dup {
				ix.byID[p.Devices[i].Device.Name] = i
			}
		}
		out[p.ID] = ix
	}
	return out
}

// held is one device an allocation holds exclusively (not adminAccess),
// in a pool the slices publish.
type held struct {
	ix  *poolIndex
	dev *resourceapi.Device
}

// heldDevices lists the devices of a claim's allocation that count for
// races: results without adminAccess naming a device of a known pool.
// Devices the pools do not publish are the pool validator's business
// (AllocatedDeviceMissing).
func heldDevices(c *resourceapi.ResourceClaim, pools map[pool.ID]*poolIndex) []held {
	if c.Status.Allocation == nil {
		return nil
	}
	var out []held
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.AdminAccess != nil && *r.AdminAccess {
			continue
		}
		ix := pools[pool.ID{Driver: r.Driver, Pool: r.Pool}]
		if ix == nil {
			continue
		}
		i, ok := ix.byID[r.Device]
		if !ok {
			continue
		}
		out = append(out, held{ix: ix, dev: ix.p.Devices[i].Device})
	}
	return out
}

func shared(d *resourceapi.Device) bool {
	return d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations
}

type deviceKey struct {
	pool   pool.ID
	device string
}

type counterKey struct {
	pool         pool.ID
	set, counter string
}

// ledger accumulates what a set of allocations takes.
type ledger struct {
	owners   map[deviceKey][]string
	paid     map[deviceKey]bool
	consumed map[counterKey]resource.Quantity
	users    map[counterKey][]string
}

func newLedger() *ledger {
	return &ledger{
		owners:   map[deviceKey][]string{},
		paid:     map[deviceKey]bool{},
		consumed: map[counterKey]resource.Quantity{},
		users:    map[counterKey][]string{},
	}
}

// clash returns the first race that adding the claim's devices would
// cause, or nil.
func (l *ledger) clash(key string, devs []held) *Race {
	extra := map[counterKey]resource.Quantity{}
	for _, h := range devs {
		dk := deviceKey{h.ix.p.ID, h.dev.Name}
		if owners := l.owners[dk]; len(owners) > 0 && !shared(h.dev) {
			return &Race{Reason: pool.ReasonDeviceDoubleAllocated, Pool: dk.pool, Device: dk.device, Claims: sortedWith(owners, key)}
		}
		if l.paid[dk] {
			continue
		}
		for _, cc := range h.dev.ConsumesCounters {
			for name, v := range cc.Counters {
				ck := counterKey{dk.pool, cc.CounterSet, name}
				sum := extra[ck]
				sum.Add(v.Value)
				extra[ck] = sum
			}
		}
	}
	keys := make([]counterKey, 0, len(extra))
	for ck := range extra {
		keys = append(keys, ck)
	}
	slices.SortFunc(keys, compareCounterKeys)
	for _, ck := range keys {
		capacity, ok := capacityOf(devs, ck)
		if !ok {
			continue // the pool is invalid for that already
		}
		total := l.consumed[ck].DeepCopy()
		total.Add(extra[ck])
		if total.Cmp(capacity) > 0 {
			return &Race{Reason: pool.ReasonCounterOverconsumed, Pool: ck.pool, CounterSet: ck.set, Counter: ck.counter, Claims: sortedWith(l.users[ck], key)}
		}
	}
	return nil
}

// add records the claim's devices and their consumption (once per
// device, like kube-scheduler).
func (l *ledger) add(key string, devs []held) {
	for _, h := range devs {
		dk := deviceKey{h.ix.p.ID, h.dev.Name}
		l.owners[dk] = append(l.owners[dk], key)
		if l.paid[dk] {
			continue
		}
		l.paid[dk] = true
		for _, cc := range h.dev.ConsumesCounters {
			for name, v := range cc.Counters {
				ck := counterKey{dk.pool, cc.CounterSet, name}
				sum := l.consumed[ck].DeepCopy()
				sum.Add(v.Value)
				l.consumed[ck] = sum
				if !slices.Contains(l.users[ck], key) {
					l.users[ck] = append(l.users[ck], key)
				}
			}
		}
	}
}

func capacityOf(devs []held, ck counterKey) (resource.Quantity, bool) {
	for _, h := range devs {
		if h.ix.p.ID != ck.pool {
			continue
		}
		cs := h.ix.p.CounterSets[ck.set]
		if cs == nil {
			return resource.Quantity{}, false
		}
		q, ok := cs.Counters[ck.counter]
		return q, ok
	}
	return resource.Quantity{}, false
}

func compareCounterKeys(a, b counterKey) int {
	return cmp.Or(cmp.Compare(a.pool.Driver, b.pool.Driver), cmp.Compare(a.pool.Pool, b.pool.Pool),
		cmp.Compare(a.set, b.set), cmp.Compare(a.counter, b.counter))
}

func sortedWith(keys []string, key string) []string {
	out := append(slices.Clone(keys), key)
	slices.Sort(out)
	return slices.Compact(out)
}

func claimKey(c *resourceapi.ResourceClaim) string { return c.Namespace + "/" + c.Name }

// FindRaces lists every device given twice and every counter consumed
// beyond its capacity by the allocated claims, over the current
// generation of the given pools, ignoring hold claims (which repeat a
// device on purpose, see IsHold). It is the check the claim controller runs
// after each write and whenever an allocation appears; the pool validator
// (pool.Assess) reports the same findings as DeviceDoubleAllocated and
// CounterOverconsumed.
func FindRaces(pools []*pool.Pool, claims []*resourceapi.ResourceClaim) []Race {
	ix := indexPools(pools)
	l := newLedger()
	for _, c := range sortedClaims(WithoutHolds(claims)) {
		l.add(claimKey(c), heldDevices(c, ix))
	}
	var out []Race
	for dk, owners := range l.owners {
		if len(owners) < 2 {
			continue
		}
		d := ix[dk.pool].p.Devices[ix[dk.pool].byID[dk.device]].Device
		if shared(d) {
			continue
		}
		out = append(out, Race{Reason: pool.ReasonDeviceDoubleAllocated, Pool: dk.pool, Device: dk.device, Claims: sortedWith(owners[1:], owners[0])})
	}
	for ck, used := range l.consumed {
		cs := ix[ck.pool].p.CounterSets[ck.set]
		if cs == nil {
			continue
		}
		capacity, ok := cs.Counters[ck.counter]
		if !ok || used.Cmp(capacity) <= 0 {
			continue
		}
		users := l.users[ck]
		out = append(out, Race{Reason: pool.ReasonCounterOverconsumed, Pool: ck.pool, CounterSet: ck.set, Counter: ck.counter, Claims: sortedWith(users[1:], users[0])})
	}
	slices.SortFunc(out, func(a, b Race) int {
		return cmp.Or(cmp.Compare(a.Reason, b.Reason), cmp.Compare(a.Pool.Driver, b.Pool.Driver), cmp.Compare(a.Pool.Pool, b.Pool.Pool),
			cmp.Compare(a.Device, b.Device), cmp.Compare(a.CounterSet, b.CounterSet), cmp.Compare(a.Counter, b.Counter))
	})
	return out
}

func sortedClaims(claims []*resourceapi.ResourceClaim) []*resourceapi.ResourceClaim {
	out := slices.Clone(claims)
	slices.SortFunc(out, func(a, b *resourceapi.ResourceClaim) int { return cmp.Compare(claimKey(a), claimKey(b)) })
	return out
}

// Loser is a claim whose allocation must be taken back.
type Loser struct {
	Claim *resourceapi.ResourceClaim
	// Race is what it collided with; Claims names the claims it collided
	// with and itself.
	Race Race
}

// Losers decides which allocations give way so that nothing is given
// twice. Claims are kept in this order, each only if it collides with
// none kept before it:
//
//  1. claims that may not move (movable false: allocated by someone else,
//     reserved by a consumer, or being deleted) — they are kept even when
//     they collide, since nobody may touch them;
//  2. movable claims by allocationTimestamp, oldest first, then by name.
//
// So the allocation written last gives way, and the operator never takes
// back kube-scheduler's allocations or one a pod already uses. Holds are
// ignored. Every
// movable claim that collides is returned, with the race it lost. The
// order makes the answer the same however the claims are listed, so
// independent reconciles of the claims agree.
func Losers(pools []*pool.Pool, claims []*resourceapi.ResourceClaim, movable func(*resourceapi.ResourceClaim) bool) []Loser {
	ix := indexPools(pools)
	type entry struct {
		c       *resourceapi.ResourceClaim
		movable bool
	}
	entries := make([]entry, 0, len(claims))
	for _, c := range claims {
		if c.Status.Allocation != nil && !IsHold(c) {
			entries = append(entries, entry{c, movable(c)})
		}
	}
	slices.SortFunc(entries, func(a, b entry) int {
		if a.movable != b.movable {
			if a.movable {
				return 1
			}
			return -1
		}
		if a.movable {
			if c := allocatedAt(a.c).Compare(allocatedAt(b.c)); c != 0 {
				return c
			}
		}
		return cmp.Compare(claimKey(a.c), claimKey(b.c))
	})
	l := newLedger()
	var out []Loser
	for _, e := range entries {
		key := claimKey(e.c)
		devs := heldDevices(e.c, ix)
		if e.movable {
			if r := l.clash(key, devs); r != nil {
				out = append(out, Loser{Claim: e.c, Race: *r})
				continue
			}
		}
		l.add(key, devs)
	}
	return out
}

// allocatedAt is when the claim was allocated; the zero time (sorting
// first) when the allocator did not say.
func allocatedAt(c *resourceapi.ResourceClaim) time.Time {
	if t := c.Status.Allocation.AllocationTimestamp; t != nil {
		return t.Time
	}
	return time.Time{}
}
