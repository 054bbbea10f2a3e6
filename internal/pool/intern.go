package pool

import (
	"hash/maphash"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// counterInterner shares one capacity map between counter sets with the
// same counters (every GPU of a model has the same counter set, so a
// cluster of 5,000 nodes x 8 GPUs has a handful of distinct maps instead of
// 40,000). CounterSet.Counters is read-only for everybody, so sharing is
// invisible except in memory and time: it is the largest allocation of
// Group otherwise.
type counterInterner struct {
	seed  maphash.Seed
	table map[uint64][]map[string]resource.Quantity
}

// maxCandidates bounds the maps compared per hash, so that a pathological
// input cannot make interning quadratic.
const maxCandidates = 4

func newCounterInterner() counterInterner {
	return counterInterner{seed: maphash.MakeSeed(), table: make(map[uint64][]map[string]resource.Quantity)}
}

func (ci *counterInterner) reset() {
	if len(ci.table) > 1024 {
		ci.table = make(map[uint64][]map[string]resource.Quantity)
		return
	}
	clear(ci.table)
}

// counters returns a capacity map equal to the API counters (same values and
// formats), shared when an equal one was seen before.
func (ci *counterInterner) counters(in map[string]resourceapi.Counter) map[string]resource.Quantity {
	var h uint64
	for name, c := range in {
		// Order-independent: a sum of per-entry hashes.
		h += maphash.String(ci.seed, name)*31 + quantityHash(ci.seed, c.Value)
	}
	candidates := ci.table[h]
	for _, m := range candidates {
		if sameCounters(m, in) {
			return m
		}
	}
	m := make(map[string]resource.Quantity, len(in))
	for name, c := range in {
		m[name] = c.Value
	}
	if len(candidates) < maxCandidates {
		ci.table[h] = append(candidates, m)
	}
	return m
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
