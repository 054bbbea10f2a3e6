package pool

import (
	"cmp"
	"slices"
	"sync"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	poolpkg "github.com/drastack/drastack/internal/pool"
)

// entry is what the board keeps of one validated pool: enough for the
// DRAStack aggregation, the Prometheus collector and Event decisions,
// without holding on to the DevicePool status itself.
type entry struct {
	id     poolpkg.ID
	health v1alpha1.PoolHealth
	reason string
	alarm  bool // see alarming
	warned bool // the last Event about the pool was a Warning
	// version is the DevicePool's resourceVersion after this process
	// last wrote its status ("" before the first write).
	version string
	devices v1alpha1.DeviceCounts
	// counters with a capacity above zero, for the utilisation metric.
	counters []counterSample
	// problems counted by reason and severity, including those beyond
	// maxProblems.
	problems []problemCount
	// fragmentation of the pool's counters (nil without counter sets).
	fragmentation *v1alpha1.PoolFragmentation
}

type counterSample struct {
	set, counter string
	ratio        float64
}

type problemCount struct {
	reason, severity string
	n                int
}

// newEntry summarises a status (and the full problem list of its report,
// which the status may have capped).
func newEntry(id poolpkg.ID, st *v1alpha1.DevicePoolStatus, problems []poolpkg.Problem, warned bool, version string) *entry {
	e := &entry{id: id, health: st.Health, reason: st.Reason, alarm: alarming(st), warned: warned, version: version, devices: st.Devices,
		fragmentation: st.Fragmentation}
	for _, cs := range st.CounterSets {
		for _, c := range cs.Counters {
			capacity := c.Capacity.AsApproximateFloat64()
			if capacity <= 0 {
				continue
			}
			e.counters = append(e.counters, counterSample{set: cs.Name, counter: c.Name, ratio: c.Consumed.AsApproximateFloat64() / capacity})
		}
	}
	for _, p := range problems {
		i := slices.IndexFunc(e.problems, func(pc problemCount) bool {
			return pc.reason == string(p.Reason) && pc.severity == string(p.Severity)
		})
		if i < 0 {
			e.problems = append(e.problems, problemCount{reason: string(p.Reason), severity: string(p.Severity), n: 1})
		} else {
			e.problems[i].n++
		}
	}
	return e
}

// board holds the latest entry of every pool that has a DevicePool. The
// reconcile workers write it; the DRAStack status writer and the metrics
// collector read it. dirty is signalled (without blocking) whenever the
// aggregate may have changed.
type board struct {
	mu      sync.RWMutex
	entries map[poolpkg.ID]*entry
	dirty   chan struct{}
}

func newBoard() *board {
	return &board{entries: make(map[poolpkg.ID]*entry), dirty: make(chan struct{}, 1)}
}

func (b *board) markDirty() {
	select {
	case b.dirty <- struct{}{}:
	default:
	}
}

func (b *board) get(id poolpkg.ID) *entry {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.entries[id]
}

// set stores a pool's entry; the aggregate is marked dirty only when what
// it depends on (health, reason, alarm) changed.
func (b *board) set(e *entry) {
	b.mu.Lock()
	old := b.entries[e.id]
	b.entries[e.id] = e
	b.mu.Unlock()
	if old == nil || old.health != e.health || old.reason != e.reason || old.alarm != e.alarm {
		b.markDirty()
	}
}

func (b *board) remove(id poolpkg.ID) {
	b.mu.Lock()
	_, had := b.entries[id]
	delete(b.entries, id)
	b.mu.Unlock()
	if had {
		b.markDirty()
	}
}

func (b *board) ids() []poolpkg.ID {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make([]poolpkg.ID, 0, len(b.entries))
	for id := range b.entries {
		out = append(out, id)
	}
	return out
}

// summaries returns the health of every pool, sorted by ID, for aggregate.
func (b *board) summaries() []poolSummary {
	b.mu.RLock()
	out := make([]poolSummary, 0, len(b.entries))
	for _, e := range b.entries {
		out = append(out, poolSummary{id: e.id, health: e.health, reason: e.reason, alarm: e.alarm})
	}
	b.mu.RUnlock()
	slices.SortFunc(out, func(x, y poolSummary) int {
		return cmp.Or(cmp.Compare(x.id.Driver, y.id.Driver), cmp.Compare(x.id.Pool, y.id.Pool))
	})
	return out
}

// snapshot returns every entry. Entries are never modified once stored
// (set replaces them), so the caller may read them without the lock: a
// slow scrape does not hold up the reconcile workers.
func (b *board) snapshot() []*entry {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make([]*entry, 0, len(b.entries))
	for _, e := range b.entries {
		out = append(out, e)
	}
	return out
}
