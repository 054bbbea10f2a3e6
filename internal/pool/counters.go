package pool

import (
	"math"
	"math/big"
	"slices"
)

// counterTable indexes a pool's shared counters and what each device
// consumes of them, for exact and allocation-free accounting (see
// amount.go). Group and Build make it once per pool; it is read-only
// afterwards and shared by every PoolUsage of the pool.
//
// Counters are numbered ("slots") in a fixed order: counter sets by name,
// counters by name within a set.
type counterTable struct {
	sets  []tableSet
	slots []counterSlot
	// Device i consumes uses[useStart[i]:useStart[i+1]].
	useStart []int32
	uses     []counterUse
	// bigUses parallels uses when some slot is kept in big.Int; nil
	// otherwise. Only the entries of big slots are set.
	bigUses []*big.Int
	// flags per device (flagShared, flagCounters).
	flags []uint8
	// big reports whether some slot is kept in big.Int.
	big bool
	// dup marks devices whose name an earlier device has (nil when no
	// name is duplicated): allocations name the first one.
	dup []bool
	// partition is, per device, 1 + its index in partitions, or 0 for
	// devices without a partition type (see partitionOf).
	partition   []int32
	partitions  []PartitionType
	defaultAttr string
}

type tableSet struct {
	cs     *CounterSet
	layout *counterLayout
	first  int32
}

// counterSlot is one counter in its unit (10^unit): the capacity as an
// int64, or in bigCapacity when the counter is kept in big.Int.
type counterSlot struct {
	unit        int32
	capacity    int64
	bigCapacity *big.Int
}

type counterUse struct {
	slot   int32
	format uint8
	amount int64
}

const (
	flagShared   uint8 = 1 << iota // allowMultipleAllocations
	flagCounters                   // consumesCounters is not empty
)

// tableOf returns p's counter table, making one (not kept) for pools that
// were not built by Group or Build.
func tableOf(p *Pool) *counterTable {
	if p.counters != nil {
		return p.counters
	}
	b := getBuilder()
	defer putBuilder(b)
	b.dups = b.dups[:0]
	for i := range p.Devices {
		name := p.Devices[i].Device.Name
		if _, dup := b.deviceAt[name]; dup {
			b.dups = append(b.dups, i)
		} else {
			b.deviceAt[name] = i
		}
	}
	return b.indexCounters(p, true, func(Problem) {})
}

// indexCounters makes p's counter table and, while it reads every
// consumption, checks that every counter a device consumes exists in a
// counter set of the pool. It runs after all slices are added because a
// device and its counter set normally live in different slices.
//
// While the pool is incomplete the missing set may simply be in a slice
// that has not arrived yet (a driver writes its slices one by one), so
// MissingCounterSet is then a warning; it becomes an error once the pool is
// complete. A missing counter in a set that is present cannot be explained
// by a missing slice and is always an error. Consumption of counters the
// pool does not define is left out of the table.
func (b *builder) indexCounters(p *Pool, complete bool, add func(Problem)) *counterTable {
	t := &counterTable{}
	if len(p.CounterSets) > 0 {
		names := sortedKeys(p.CounterSets)
		t.sets = make([]tableSet, len(names))
		n := int32(0)
		for i, name := range names {
			cs := p.CounterSets[name]
			l := layoutOf(cs)
			cs.layout, cs.first = l, n
			t.sets[i] = tableSet{cs: cs, layout: l, first: n}
			n += int32(len(l.names))
		}
		t.slots = make([]counterSlot, n)
	}

	missingSetSeverity := SeverityError
	if !complete {
		missingSetSeverity = SeverityWarning
	}
	t.useStart = make([]int32, len(p.Devices)+1)
	t.flags = make([]uint8, len(p.Devices))
	if len(b.dups) > 0 {
		t.dup = make([]bool, len(p.Devices))
		for _, i := range b.dups {
			t.dup[i] = true
		}
	}
	uses, decs := b.uses[:0], b.decs[:0]
	for i := range p.Devices {
		d := p.Devices[i].Device
		t.useStart[i] = int32(len(uses))
		if deviceAllowsMultiple(d) {
			t.flags[i] |= flagShared
		}
		if len(d.ConsumesCounters) > 0 {
			t.flags[i] |= flagCounters
			t.addPartition(p, i)
		}
		for j := range d.ConsumesCounters {
			c := &d.ConsumesCounters[j]
			cs := p.CounterSets[c.CounterSet]
			if cs == nil {
				msg := "device %s consumes counters from counter set %s that the pool does not define"
				if !complete {
					msg += " (the pool is incomplete; the set may be in a slice that has not been published yet)"
				}
				add(newProblem(ReasonMissingCounterSet, missingSetSeverity, p.Devices[i].Slice.Name, d.Name,
					msg, d.Name, c.CounterSet))
				continue
			}
			for name, v := range c.Counters {
				k, ok := cs.layout.index[name]
				if !ok {
					add(newProblem(ReasonMissingCounter, SeverityError, p.Devices[i].Slice.Name, d.Name,
						"device %s consumes counter %s that counter set %s does not define",
						d.Name, name, cs.Name))
					continue
				}
				uses = append(uses, counterUse{slot: cs.first + k, format: formatCode(v.Value.Format)})
				decs = append(decs, decimalOf(v.Value, b.buf[:]))
			}
		}
		// Map order is random; the table must not be (Build equals Group).
		sortUses(uses[t.useStart[i]:], decs[t.useStart[i]:])
	}
	t.useStart[len(p.Devices)] = int32(len(uses))
	b.uses, b.decs = uses, decs
	if len(uses) > 0 {
		t.uses = slices.Clone(uses)
	}
	t.scale(decs)
	return t
}

// scale picks each slot's unit and converts capacities and consumption.
func (t *counterTable) scale(decs []decimal) {
	if len(t.slots) == 0 {
		return
	}
	const none = math.MaxInt32
	for _, s := range t.sets {
		for k, c := range s.layout.capacity {
			u := int32(none)
			if !c.isZero() {
				u = c.exp
			}
			t.slots[s.first+int32(k)].unit = u
		}
	}
	for k, u := range t.uses {
		if d := decs[k]; !d.isZero() {
			t.slots[u.slot].unit = min(t.slots[u.slot].unit, d.exp)
		}
	}
	// bound[s] is the sum of absolute values, or -1 once the slot needs
	// big.Int.
	bound := make([]int64, len(t.slots))
	addBound := func(s int32, v int64) {
		if bound[s] < 0 {
			return
		}
		if v < 0 {
			v = -v
		}
		if bound[s] += v; bound[s] > smallBound || bound[s] < 0 {
			bound[s] = -1
		}
	}
	for _, s := range t.sets {
		for k, c := range s.layout.capacity {
			i := s.first + int32(k)
			if t.slots[i].unit == none {
				t.slots[i].unit = 0
			}
			v, ok := c.scaled(t.slots[i].unit)
			if !ok {
				bound[i] = -1
				continue
			}
			t.slots[i].capacity = v
			addBound(i, v)
		}
	}
	for k := range t.uses {
		u := &t.uses[k]
		v, ok := decs[k].scaled(t.slots[u.slot].unit)
		if !ok {
			bound[u.slot] = -1
			continue
		}
		u.amount = v
		addBound(u.slot, v)
	}
	for _, b := range bound {
		t.big = t.big || b < 0
	}
	if !t.big {
		return
	}
	// The rare path: counters beyond int64 in their unit.
	t.bigUses = make([]*big.Int, len(t.uses))
	for _, s := range t.sets {
		for k, c := range s.layout.capacity {
			i := s.first + int32(k)
			if bound[i] < 0 {
				t.slots[i].bigCapacity = c.scaledBig(t.slots[i].unit)
			}
		}
	}
	for k, u := range t.uses {
		if bound[u.slot] < 0 {
			t.bigUses[k] = decs[k].scaledBig(t.slots[u.slot].unit)
			t.uses[k].amount = 0
		}
	}
}

// sortUses orders one device's consumptions by slot (insertion sort: a
// device consumes a few counters), keeping decs parallel.
func sortUses(uses []counterUse, decs []decimal) {
	for i := 1; i < len(uses); i++ {
		for j := i; j > 0 && useLess(uses[j], decs[j], uses[j-1], decs[j-1]); j-- {
			uses[j], uses[j-1] = uses[j-1], uses[j]
			decs[j], decs[j-1] = decs[j-1], decs[j]
		}
	}
}

// useLess orders by slot, and consumptions of the same counter (a device
// that lists a counter set twice) by value and format.
func useLess(a counterUse, da decimal, b counterUse, db decimal) bool {
	if a.slot != b.slot {
		return a.slot < b.slot
	}
	if a.format != b.format {
		return a.format < b.format
	}
	if da.exp != db.exp {
		return da.exp < db.exp
	}
	if da.big != nil || db.big != nil {
		return da.big != nil && db.big != nil && da.big.Cmp(db.big) < 0
	}
	return da.m < db.m
}
