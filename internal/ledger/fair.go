package ledger

import (
	"context"
	"sync"
	"time"
)

// usageDecay is how much of a tenant's past engine time still counts after
// each decision: a tenant that used the engine a lot waits behind the
// others for a while, not for ever.
const usageDecay = 0.9

// turns hands out the one decision turn of a ledger: at most one holder at
// a time, and when several tenants (namespaces) wait, the one that used the
// least engine time recently goes first (first come first served within a
// tenant). One namespace with claims that search for seconds therefore
// delays the others by at most one decision each, not by all of its own.
// Any goroutine may call it.
type turns struct {
	mu      sync.Mutex
	held    bool
	waiting map[string][]chan struct{}
	// arrived orders tenants by their oldest waiter, to break ties.
	arrived map[string]uint64
	seq     uint64
	usage   map[string]float64
}

func newTurns() *turns {
	return &turns{waiting: map[string][]chan struct{}{}, arrived: map[string]uint64{}, usage: map[string]float64{}}
}

// acquire waits for the turn of tenant. The returned release must be
// called with the engine time the turn used.
func (t *turns) acquire(ctx context.Context, tenant string) (func(used time.Duration), error) {
	t.mu.Lock()
	if !t.held && len(t.waiting) == 0 {
		t.held = true
		t.mu.Unlock()
		return t.releaser(tenant), nil
	}
	ch := make(chan struct{})
	if len(t.waiting[tenant]) == 0 {
		t.seq++
		t.arrived[tenant] = t.seq
	}
	t.waiting[tenant] = append(t.waiting[tenant], ch)
	t.mu.Unlock()
	select {
	case <-ch:
		return t.releaser(tenant), nil
	case <-ctx.Done():
		t.mu.Lock()
		defer t.mu.Unlock()
		select {
		case <-ch:
			// Handed the turn as the context ended: pass it on.
			t.handOffLocked()
		default:
			t.dropLocked(tenant, ch)
		}
		return nil, ctx.Err()
	}
}

func (t *turns) releaser(tenant string) func(time.Duration) {
	var once sync.Once
	return func(used time.Duration) {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			for k, u := range t.usage {
				if u *= usageDecay; u < float64(time.Microsecond) {
					delete(t.usage, k)
				} else {
					t.usage[k] = u
				}
			}
			t.usage[tenant] += float64(used)
			t.handOffLocked()
		})
	}
}

// handOffLocked gives the turn to the next waiter, or frees it.
func (t *turns) handOffLocked() {
	next, found := "", false
	for tenant := range t.waiting {
		if !found || t.usage[tenant] < t.usage[next] ||
			(t.usage[tenant] == t.usage[next] && t.arrived[tenant] < t.arrived[next]) {
			next, found = tenant, true
		}
	}
	if !found {
		t.held = false
		return
	}
	q := t.waiting[next]
	ch := q[0]
	if len(q) == 1 {
		delete(t.waiting, next)
		delete(t.arrived, next)
	} else {
		t.waiting[next] = q[1:]
	}
	t.held = true
	close(ch)
}

func (t *turns) dropLocked(tenant string, ch chan struct{}) {
	q := t.waiting[tenant]
	for i, c := range q {
		if c == ch {
			q = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	if len(q) == 0 {
		delete(t.waiting, tenant)
		delete(t.arrived, tenant)
		return
	}
	t.waiting[tenant] = q
}
