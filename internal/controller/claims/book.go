package claims

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/drastack/drastack/internal/claimpolicy"
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
	// seen is when this process first saw each of them need work, at
	// full precision (creation timestamps have whole seconds): the start
	// of the allocation latency metric.
	seen map[types.NamespacedName]time.Time
}

// failure is the last failed attempt of one claim or pod.
type failure struct {
	outcome claimpolicy.Outcome
	message string
}

func newBook() *book {
	return &book{failures: map[types.NamespacedName]failure{}, since: map[types.NamespacedName]time.Time{}, seen: map[types.NamespacedName]time.Time{}}
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
	delete(b.seen, key)
}

// clearOutcomes forgets the outcomes (not the waiting times), after a
// configuration change that may have changed them all.
func (b *book) clearOutcomes() {
	b.mu.Lock()
	defer b.mu.Unlock()
	clear(b.failures)
}

// markWaiting records when an object started to wait, once.
// at is when it was created (or deallocated), now when this process sees
// that.
func (b *book) markWaiting(key types.NamespacedName, at, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.since[key]; !ok {
		b.since[key] = at
		b.seen[key] = now
	}
}

// seenSince is when this process first saw the object wait, or fallback.
func (b *book) seenSince(key types.NamespacedName, fallback time.Time) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t, ok := b.seen[key]; ok {
		return t
	}
	return fallback
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
	return max(len(b.failures), len(b.since), len(b.seen))
}

// retriable lists the objects a change of the cluster may help, longest
// waiting first: the queue is FIFO, so what waited longer gets the
// devices that were just released.
func (b *book) retriable(classChanged bool) []types.NamespacedName {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []types.NamespacedName
	for key, f := range b.failures {
		if claimpolicy.RetriggeredBy(f.outcome, classChanged) {
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

// nodeMemory remembers, per pod, the node the operator last placed its
// claims on and the nodes kube-scheduler turned down: when a pod comes back
// for a new placement without its gate, kube-scheduler had it and did not
// bind it where its claims were (its PostFilter, or the operator's
// placementTimeout, took them back), so that node is tried last next time
// instead of the same placement being made again and again. An entry lives
// until the pod is bound or deleted. Safe for concurrent use.
type nodeMemory struct {
	mu       sync.Mutex
	placedOn map[types.NamespacedName]string
	avoid    map[types.NamespacedName]map[string]bool
}

func newNodeMemory() *nodeMemory {
	return &nodeMemory{placedOn: map[types.NamespacedName]string{}, avoid: map[types.NamespacedName]map[string]bool{}}
}

// placed records a placement.
func (m *nodeMemory) placed(key types.NamespacedName, node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.placedOn[key] = node
}

// turnedDown marks the last placement's node as one kube-scheduler did
// not take, and returns every such node of the pod.
func (m *nodeMemory) turnedDown(key types.NamespacedName) map[string]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n, ok := m.placedOn[key]; ok {
		if m.avoid[key] == nil {
			m.avoid[key] = map[string]bool{}
		}
		m.avoid[key][n] = true
		delete(m.placedOn, key)
	}
	return m.avoid[key]
}

// avoided returns the nodes kube-scheduler turned down for the pod.
func (m *nodeMemory) avoided(key types.NamespacedName) map[string]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.avoid[key]
}

// forget drops a pod that was bound or deleted.
func (m *nodeMemory) forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.placedOn, key)
	delete(m.avoid, key)
}

// size is how many pods it holds (for tests of flat state).
func (m *nodeMemory) size() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return max(len(m.placedOn), len(m.avoid))
}
