package claims

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	claimspkg "github.com/drastack/drastack/internal/claims"
)

// book remembers, for the claims or pods one loop is waiting on, the last
// failed attempt and since when each waits. It holds an entry only while
// its object waits: an allocation, a placement or a deletion forgets it,
// so its size follows the backlog, never the history. Safe for concurrent
// use.
type book struct {
	mu sync.Mutex
	// failures is the last failed attempt per object: it decides Events
	// (one per new outcome), retries on cluster changes, and the DRAStack
	// counts.
	failures map[types.NamespacedName]failure
	// since is when each object was seen to need work, for the latency
	// metric and for fairness (longest waiting first).
	since map[types.NamespacedName]time.Time
}

// failure is the last failed attempt of one claim or pod.
type failure struct {
	outcome claimspkg.Outcome
	message string
}

func newBook() *book {
	return &book{failures: map[types.NamespacedName]failure{}, since: map[types.NamespacedName]time.Time{}}
}

func (b *book) failureOf(key types.NamespacedName) (failure, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f, ok := b.failures[key]
	return f, ok
}

// record stores the outcome and reports whether it is news (a different
// outcome or message than last time), which is when an Event is due.
func (b *book) record(key types.NamespacedName, f failure) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	prev, ok := b.failures[key]
	b.failures[key] = f
	return !ok || prev != f
}

// forget drops everything about an object that no longer waits.
func (b *book) forget(key types.NamespacedName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.failures, key)
	delete(b.since, key)
}

// clearOutcomes forgets the outcomes (not the waiting times), after a
// configuration change that may have changed them all.
func (b *book) clearOutcomes() {
	b.mu.Lock()
	defer b.mu.Unlock()
	clear(b.failures)
}

// markWaiting records when an object started to wait, once.
func (b *book) markWaiting(key types.NamespacedName, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.since[key]; !ok {
		b.since[key] = at
	}
}

// waitingSince is when the object started to wait, or fallback.
func (b *book) waitingSince(key types.NamespacedName, fallback time.Time) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t, ok := b.since[key]; ok {
		return t
	}
	return fallback
}

// size is how many objects the book holds (for tests of flat state).
func (b *book) size() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return max(len(b.failures), len(b.since))
}

// retriable lists the objects a change of the cluster may help, longest
// waiting first: the queue is FIFO, so what waited longer gets the
// devices that were just released.
func (b *book) retriable(classChanged bool) []types.NamespacedName {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []types.NamespacedName
	for key, f := range b.failures {
		if claimspkg.RetriggeredBy(f.outcome, classChanged) {
			out = append(out, key)
		}
	}
	slices.SortFunc(out, func(a, b2 types.NamespacedName) int {
		if c := b.since[a].Compare(b.since[b2]); c != 0 {
			return c
		}
		return cmp.Compare(a.String(), b2.String())
	})
	return out
}
