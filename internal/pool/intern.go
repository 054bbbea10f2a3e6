package pool

import (
	"hash/maphash"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// counterLayout is what counter sets with the same counters share: the
// capacity map, the counter names sorted, each name's position, and each
// capacity decomposed for exact arithmetic. It is read-only once made.
type counterLayout struct {
	counters map[string]resource.Quantity
	names    []string
	index    map[string]int32
	capacity []decimal
}

// counterInterner shares one layout between counter sets with the same
// counters (every GPU of a model has the same counter set, so a cluster of
// 5,000 nodes x 8 GPUs has a handful of distinct layouts instead of
// 40,000). CounterSet.Counters is read-only for everybody, so sharing is
// invisible except in memory and time: it is the largest allocation of
// Group otherwise.
type counterInterner struct {
	seed  maphash.Seed
	table map[uint64][]*counterLayout
	buf   [40]byte
}

// maxCandidates bounds the layouts compared per hash, so that a
// pathological input cannot make interning quadratic.
const maxCandidates = 4

func newCounterInterner() counterInterner {
	return counterInterner{seed: maphash.MakeSeed(), table: make(map[uint64][]*counterLayout)}
}

func (ci *counterInterner) reset() {
	if len(ci.table) > 1024 {
		ci.table = make(map[uint64][]*counterLayout)
		return
	}
	clear(ci.table)
}

// layout returns a layout equal to the API counters (same values and
// formats), shared when an equal one was seen before.
func (ci *counterInterner) layout(in map[string]resourceapi.Counter) *counterLayout {
	var h uint64
	for name, c := range in {
		// Order-independent: a sum of per-entry hashes.
		h += maphash.String(ci.seed, name)*31 + quantityHash(ci.seed, c.Value)
	}
	candidates := ci.table[h]
	for _, l := range candidates {
		if sameCounters(l.counters, in) {
			return l
		}
	}
	l := newLayout(in, ci.buf[:])
	if len(candidates) < maxCandidates {
		ci.table[h] = append(candidates, l)
	}
	return l
}

func newLayout(in map[string]resourceapi.Counter, buf []byte) *counterLayout {
	l := &counterLayout{
		counters: make(map[string]resource.Quantity, len(in)),
		names:    make([]string, 0, len(in)),
		index:    make(map[string]int32, len(in)),
		capacity: make([]decimal, len(in)),
	}
	for name, c := range in {
		l.counters[name] = c.Value
		l.names = append(l.names, name)
	}
	slices.Sort(l.names)
	for i, name := range l.names {
		l.index[name] = int32(i)
		l.capacity[i] = decimalOf(l.counters[name], buf)
	}
	return l
}

// layoutOf returns the layout of a counter set, making one for counter
// sets that were not built by Group or Build.
func layoutOf(cs *CounterSet) *counterLayout {
	if cs.layout != nil {
		return cs.layout
	}
	in := make(map[string]resourceapi.Counter, len(cs.Counters))
	for name, q := range cs.Counters {
		in[name] = resourceapi.Counter{Value: q}
	}
	return newLayout(in, make([]byte, 0, 40))
}

// quantityHash hashes the value only; sameCounters also compares formats.
func quantityHash(seed maphash.Seed, q resource.Quantity) uint64 {
	if v, ok := q.AsInt64(); ok {
		return uint64(v) * 0x9E3779B97F4A7C15
	}
	return maphash.String(seed, q.String())
}

func sameCounters(m map[string]resource.Quantity, in map[string]resourceapi.Counter) bool {
	if len(m) != len(in) {
		return false
	}
	for name, c := range in {
		q, ok := m[name]
		if !ok || q.Format != c.Value.Format || q.Cmp(c.Value) != 0 {
			return false
		}
	}
	return true
}
