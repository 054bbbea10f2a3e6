package pool

import (
	"cmp"
	"math/big"
)

// Fragmentation says whether the free capacity of a pool with shared
// counters is in one piece: after a day of arrivals and departures, small
// partitions scattered over every GPU (or host block) leave enough
// capacity free in total but no whole GPU for a 7g partition. The measure
// of capacity is the counter set (a GPU, a host's chips): a device's size
// is, summed over the counter sets it draws on, the share of the set it
// takes, averaged over the set's counters (a 7g.40gb MIG partition is
// about one GPU, a 1g.5gb about a tenth, a 2x4 slice over four hosts
// four). The same averaging gives each set's free share.
type Fragmentation struct {
	// CounterSets counts the pool's counter sets with capacity;
	// WholeFree those nothing consumes.
	CounterSets, WholeFree int
	// Free is the free capacity in counter sets: each set's free share
	// (1 minus the consumed share, averaged over its counters), summed.
	Free float64
	// Largest is the partition type of the largest device the pool could
	// give now (usable, not in use, its counters free; taints aside, so
	// that the operator's central devices count), LargestSize its size in
	// counter sets;
	// LargestSize is 0 when no partitionable device is available. Of
	// devices of equal size, the first partition type by attribute and
	// type is named.
	Largest     PartitionType
	LargestSize float64
}

// fragmentation computes the pool's Fragmentation from the usage and the
// free partitionable devices; nil for a pool without counter sets.
func (a *allocView) fragmentation(available []int) *Fragmentation {
	t, u := a.u.t, a.u
	if len(t.sets) == 0 {
		return nil
	}
	f := &Fragmentation{}
	// weight is, per slot, 1 / the counters with capacity of its set (0
	// for a counter without capacity): a device's share of a set is the
	// weighted sum of what it consumes.
	weight := make([]float64, len(t.slots))
	for _, s := range t.sets {
		n, used := 0, 0.0
		whole := true
		for k := range s.layout.names {
			slot := s.first + int32(k)
			capacity := t.capacityFloat(slot)
			if capacity <= 0 {
				continue
			}
			n++
			consumed := capacity - u.leftFloat(slot)
			if consumed != 0 {
				whole = false
			}
			used += min(max(consumed/capacity, 0), 1)
		}
		if n == 0 {
			continue
		}
		for k := range s.layout.names {
			if slot := s.first + int32(k); t.capacityFloat(slot) > 0 {
				weight[slot] = 1 / float64(n)
			}
		}
		f.CounterSets++
		if whole {
			f.WholeFree++
		}
		f.Free += 1 - used/float64(n)
	}
	for _, i := range available {
		if t.partition == nil || t.partition[i] == 0 {
			continue
		}
		size := t.size(i, weight)
		pt := t.partitions[t.partition[i]-1]
		if size > f.LargestSize || (size == f.LargestSize && size > 0 && cmp.Or(cmp.Compare(pt.Attribute, f.Largest.Attribute), cmp.Compare(pt.Type, f.Largest.Type)) < 0) {
			f.Largest, f.LargestSize = pt, size
		}
	}
	return f
}

// size is device i's size in counter sets (see Fragmentation), with the
// slots' weights.
func (t *counterTable) size(i int, weight []float64) float64 {
	var out float64
	for k := t.useStart[i]; k < t.useStart[i+1]; k++ {
		slot := t.uses[k].slot
		if w := weight[slot]; w > 0 {
			out += min(t.useFloat(int(k))/t.capacityFloat(slot), 1) * w
		}
	}
	return out
}

func (t *counterTable) capacityFloat(s int32) float64 {
	sl := &t.slots[s]
	if sl.bigCapacity != nil {
		f, _ := new(big.Float).SetInt(sl.bigCapacity).Float64()
		return f
	}
	return float64(sl.capacity)
}

func (t *counterTable) useFloat(k int) float64 {
	if t.big && t.bigUses[k] != nil {
		f, _ := new(big.Float).SetInt(t.bigUses[k]).Float64()
		return f
	}
	return float64(t.uses[k].amount)
}

func (u *PoolUsage) leftFloat(s int32) float64 {
	if u.bigLeft != nil && u.bigLeft[s] != nil {
		f, _ := new(big.Float).SetInt(u.bigLeft[s]).Float64()
		return f
	}
	return float64(u.left[s])
}
