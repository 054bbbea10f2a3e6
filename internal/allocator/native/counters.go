package native

import (
	"math"
	"math/big"
	"slices"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/drastack/drastack/internal/pool"
)

// Counter arithmetic is exact, as kube-scheduler's resource.Quantity
// arithmetic is: no value is rounded, capped or converted to floating point.
//
// Each counter of a pool is kept in its own unit, the finest decimal unit
// any of its values needs (1 for "7", 10^-3 for "1500m", 10^-9 for "3n",
// 10^15 for "5e15" alone), so that its capacity and every consumption are
// whole numbers of that unit. When those numbers, and every balance the
// search can reach, fit into an int64, the counter is kept as an int64 and
// the inner loop compares int64s. Otherwise (a counter of 1e18 consumed in
// nano-units, say) it is kept as a big.Int, which is slower but still exact.

// consumption is what a device takes of one counter: amount in the
// counter's unit, or big when the counter is kept in big arithmetic.
type consumption struct {
	counter int32 // index into Session.remaining
	amount  int64
	big     *big.Int
}

// scaledCounter is one counter converted to integers of a common unit.
type scaledCounter struct {
	// small: capacity and uses are in capacity and uses; otherwise in
	// bigCapacity and bigUses.
	small       bool
	capacity    int64
	uses        []int64
	bigCapacity *big.Int
	bigUses     []*big.Int
}

// smallBound is the largest |capacity| + sum of |consumptions| kept in
// int64. Every balance the search reaches lies within that sum of the
// capacity (a device's consumption is charged at most once by recorded
// claims, and a tentative choice needs the balance to cover it), so int64
// arithmetic on such a counter can never overflow. Half of MaxInt64 leaves
// a margin for a device listed twice.
const smallBound = math.MaxInt64 / 2

// scaleCounter converts a counter's capacity and the consumption of every
// device of the pool that consumes it.
func scaleCounter(capacity resource.Quantity, uses []resource.Quantity) scaledCounter {
	// A value is unscaled * 10^-scale (inf.Dec, as Quantity keeps it).
	n := len(uses) + 1
	unscaled := make([]*big.Int, n)
	scales := make([]int64, n)
	for i := range n {
		q := capacity
		if i > 0 {
			q = uses[i-1]
		}
		d := q.AsDec()
		unscaled[i], scales[i] = new(big.Int).Set(d.UnscaledBig()), int64(d.Scale())
	}
	// The common unit is 10^-scale for the largest scale.
	scale := slices.Max(scales)
	ints := make([]*big.Int, n)
	bound := new(big.Int)
	negative := false
	for i, v := range unscaled {
		if shift := scale - scales[i]; shift > 0 {
			v.Mul(v, new(big.Int).Exp(big.NewInt(10), big.NewInt(shift), nil))
		}
		ints[i] = v
		negative = negative || v.Sign() < 0
		bound.Add(bound, new(big.Int).Abs(v))
	}
	sc := scaledCounter{}
	// Negative values (which the API server rejects) would let a balance
	// grow without bound; big arithmetic keeps them exact too.
	if !negative && bound.IsInt64() && bound.Int64() <= smallBound {
		sc.small = true
		sc.capacity = ints[0].Int64()
		sc.uses = make([]int64, len(uses))
		for i := range uses {
			sc.uses[i] = ints[i+1].Int64()
		}
		return sc
	}
	sc.bigCapacity = ints[0]
	sc.bigUses = ints[1:]
	return sc
}

// counterRef names one counter of a pool.
type counterRef struct{ set, counter string }

// poolCounters converts every counter of pool p and every device's
// consumption of it. It returns the counters in a fixed order (counter sets
// by name, counters by name) and, per device of p, what it consumes, in the
// order of its consumptions and counter names. Consumption of a counter the
// pool does not define is ignored (such a pool is invalid and never used).
func poolCounters(p *pool.Pool) (refs []counterRef, counters []scaledCounter, perDevice [][]deviceUse) {
	index := map[counterRef]int{}
	for _, setName := range sortedKeys(p.CounterSets) {
		set := p.CounterSets[setName]
		for _, name := range sortedKeys(set.Counters) {
			index[counterRef{setName, name}] = len(refs)
			refs = append(refs, counterRef{setName, name})
		}
	}
	uses := make([][]resource.Quantity, len(refs))
	perDevice = make([][]deviceUse, len(p.Devices))
	for di, pd := range p.Devices {
		for _, cc := range pd.Device.ConsumesCounters {
			for _, name := range sortedKeys(cc.Counters) {
				ci, ok := index[counterRef{cc.CounterSet, name}]
				if !ok {
					continue
				}
				perDevice[di] = append(perDevice[di], deviceUse{counter: ci, use: len(uses[ci])})
				uses[ci] = append(uses[ci], cc.Counters[name].Value)
			}
		}
	}
	counters = make([]scaledCounter, len(refs))
	for ci, ref := range refs {
		counters[ci] = scaleCounter(p.CounterSets[ref.set].Counters[ref.counter], uses[ci])
	}
	return refs, counters, perDevice
}

// deviceUse locates one consumption of a device: counter ci of the pool,
// use-th consumption of that counter.
type deviceUse struct{ counter, use int }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// countersLeft reports whether every counter dev consumes has enough left.
func (s *Session) countersLeft(dev *device) bool {
	for _, c := range dev.consumes {
		if c.big != nil {
			if s.bigRemaining[c.counter].Cmp(c.big) < 0 {
				return false
			}
		} else if s.remaining[c.counter] < c.amount {
			return false
		}
	}
	return true
}

// charge takes (sign -1) or gives back (sign +1) what dev consumes. It
// returns how many balances went from non-negative to negative.
func (s *Session) charge(dev *device, sign int64) (overdrawn int32) {
	for _, c := range dev.consumes {
		if c.big != nil {
			r := s.bigRemaining[c.counter]
			before := r.Sign() >= 0
			if sign < 0 {
				r.Sub(r, c.big)
			} else {
				r.Add(r, c.big)
			}
			if before && r.Sign() < 0 {
				overdrawn++
			}
			continue
		}
		before := s.remaining[c.counter] >= 0
		s.remaining[c.counter] += sign * c.amount
		if before && s.remaining[c.counter] < 0 {
			overdrawn++
		}
	}
	return overdrawn
}
