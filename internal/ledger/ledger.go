package ledger

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drastack/drastack/internal/allocator"
)

// Errors of the ledger.
var (
	// ErrNotReady: the ledger takes no decisions yet (this process does
	// not hold the fence, or its sweep has not ended).
	ErrNotReady = errors.New("the allocation ledger is not ready: this process does not hold the allocation fence yet")
	// ErrStale: a reservation was asked for a claim older than the newest
	// state the ledger knows; decide again from the newer one.
	ErrStale = errors.New("the claim changed since it was read")
	// ErrTaken: the claim is allocated or reserved already.
	ErrTaken = errors.New("the claim is allocated or has an allocation being written")
)

// Options configure a Ledger.
type Options struct {
	// Source reads the engine's inputs from the caches (required).
	Source Source
	// Now is the clock of the usage accounting; default time.Now.
	Now func() time.Time
}

// Ledger is the allocation state of one operator process. Its methods may
// be called from any goroutine: the informer handlers report what they
// see (Observe, ObserveDeleted, Invalidate), the loops decide (Decide) and
// report the answers of their writes (Observe, Refused, Ambiguous).
type Ledger struct {
	src   Source
	now   func() time.Time
	turns *turns

	// mu guards everything below and the session cache.
	mu     sync.Mutex
	claims map[types.UID]*record
	ready  bool
	sess   sessionCache
}

// record is what the ledger knows about one claim.
type record struct {
	key types.NamespacedName
	// claim is the newest known state, version its resourceVersion.
	claim   *resourceapi.ResourceClaim
	version Version
	// deleted: the claim is gone; the record is a tombstone kept while a
	// request of this process may still answer for it, so that a late
	// answer cannot bring the claim back.
	deleted bool
	res     *reservation
	// requests counts this process's requests on the claim that may still
	// answer (Track).
	requests int
}

// reservation is a decision of this process whose write is not known to
// have committed (docs/allocation-protocol.md, section 1).
type reservation struct {
	// asRead is the claim as the decision read it, carrying the decided
	// allocation: what the engine records, and what the write sends.
	asRead *resourceapi.ResourceClaim
	// precondition is the version the write is conditioned on.
	precondition Version
	// unit groups the reservations of one placement (a pod's key).
	unit      string
	ambiguous bool
	since     time.Time
}

// New returns an empty ledger that is not ready.
func New(o Options) *Ledger {
	if o.Now == nil {
		o.Now = time.Now
	}
	l := &Ledger{src: o.Source, now: o.Now, turns: newTurns(), claims: map[types.UID]*record{}}
	l.sess.recorded = map[types.UID]bool{}
	return l
}

// Exclusive runs fn in a decision turn without a session: nothing is
// decided while it runs, and every decision after it builds its session
// anew. The taint loop withdraws devices from the partition this way, so
// that no decision that began before can still reserve them.
func (l *Ledger) Exclusive(ctx context.Context, fn func() error) error {
	release, err := l.turns.acquire(ctx, "")
	if err != nil {
		return err
	}
	defer release(0)
	defer l.Invalidate()
	return fn()
}

// Held is a device an allocation or reservation the ledger counts uses.
type Held struct {
	Driver, Pool, Device string
	// Claim is the claim that holds it.
	Claim types.NamespacedName
}

// Holds lists the devices for which match is true that a claim the ledger
// counts as allocated, or a pending reservation, uses, sorted. The taint
// loop asks it, in an Exclusive turn, before a device leaves the
// partition: a held device stays tainted until it is released.
func (l *Ledger) Holds(match func(driver, pool, device string) bool) []Held {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Held
	for _, r := range l.claims {
		c := r.allocated()
		if c == nil {
			continue
		}
		for _, res := range c.Status.Allocation.Devices.Results {
			if match(res.Driver, res.Pool, res.Device) {
				out = append(out, Held{Driver: res.Driver, Pool: res.Pool, Device: res.Device,
					Claim: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Driver != b.Driver {
			return a.Driver < b.Driver
		}
		if a.Pool != b.Pool {
			return a.Pool < b.Pool
		}
		if a.Device != b.Device {
			return a.Device < b.Device
		}
		return a.Claim.String() < b.Claim.String()
	})
	return out
}

// SetReady says whether decisions may be taken: true once this process
// holds the fence and has swept, false when it loses the fence. Not ready
// drops the session, so the next decision is built from what the sweep
// showed.
func (l *Ledger) SetReady(ready bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ready != ready {
		l.ready = ready
		l.bumpLocked()
	}
}

// Ready reports whether decisions may be taken.
func (l *Ledger) Ready() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ready
}

// Observe takes in a state of a claim: an informer event, or the answer
// to a request of this process. A state older than the newest known one
// is ignored. A pending reservation ends when the state is newer than its
// precondition: confirmed if the state carries its allocation, released
// otherwise (the write can never commit).
func (l *Ledger) Observe(c *resourceapi.ResourceClaim) {
	if c == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	v := ParseVersion(c.ResourceVersion)
	r := l.claims[c.UID]
	if r == nil {
		if c.Status.Allocation == nil {
			// Nothing to remember: no decision reads an unallocated claim
			// from the ledger, and the cache delivers its states in order.
			return
		}
		r = &record{key: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}}
		l.claims[c.UID] = r
	}
	if r.deleted || (r.claim != nil && v != 0 && r.version != 0 && v <= r.version) {
		return
	}
	before := r.allocated()
	r.claim, r.version = c, v
	if r.res != nil && newer(v, r.res.precondition) {
		r.res = nil
	}
	l.changedLocked(c.UID, before, r.allocated())
	l.gcLocked(c.UID, r)
}

// ObserveDeleted takes in the deletion of a claim: its allocation and any
// reservation for it end.
func (l *Ledger) ObserveDeleted(c *resourceapi.ResourceClaim) {
	if c == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.claims[c.UID]
	if r == nil {
		// Never allocated as far as the ledger knows, and no request of
		// this process is under way: nothing to forget.
		return
	}
	if r.allocated() != nil {
		l.bumpLocked()
	}
	r.deleted, r.res, r.claim = true, nil, nil
	l.gcLocked(c.UID, r)
}

// Refused ends the reservation of a claim whose write the API server
// refused as invalid: validation depends only on the request and the
// object at the precondition's version, so the same write never commits.
func (l *Ledger) Refused(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.claims[uid]
	if r == nil || r.res == nil {
		return
	}
	before := r.allocated()
	r.res = nil
	l.changedLocked(uid, before, r.allocated())
	l.gcLocked(uid, r)
}

// Ambiguous marks the reservation of a claim whose write got no definite
// answer (a timeout, a 5xx, a reset connection, a 403): it stays, and the
// write is sent again with the same precondition.
func (l *Ledger) Ambiguous(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.claims[uid]; r != nil && r.res != nil {
		r.res.ambiguous = true
	}
}

// Track counts a request of this process on a claim until the returned
// func is called: while one may still answer, the ledger keeps the claim's
// deletion in mind, so that a late answer cannot bring it back.
func (l *Ledger) Track(uid types.UID) func() {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.claims[uid]
	if r == nil {
		r = &record{}
		l.claims[uid] = r
	}
	r.requests++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if r := l.claims[uid]; r != nil {
				r.requests--
				l.gcLocked(uid, r)
			}
		})
	}
}

// Reservation is a pending write of this process, as Reserved returns it.
type Reservation struct {
	// Claim is the claim as the decision read it, with the decided
	// allocation in status: the write sends its status.allocation, with
	// its resourceVersion as the precondition.
	Claim *resourceapi.ResourceClaim
	// Unit is the placement the reservation belongs to.
	Unit string
	// Ambiguous: a write of it got no definite answer.
	Ambiguous bool
	// Since is when the decision was taken.
	Since time.Time
}

// Reserved returns the pending reservation of a claim.
func (l *Ledger) Reserved(uid types.UID) (Reservation, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.claims[uid]
	if r == nil || r.res == nil {
		return Reservation{}, false
	}
	return Reservation{Claim: r.res.asRead, Unit: r.res.unit, Ambiguous: r.res.ambiguous, Since: r.res.since}, true
}

// Unit returns the pending reservations of a placement, by claim name.
func (l *Ledger) Unit(unit string) []Reservation {
	return l.units(func(u string) bool { return u == unit })
}

// UnitsWithPrefix returns the pending reservations of every placement
// whose name starts with prefix, by claim name.
func (l *Ledger) UnitsWithPrefix(prefix string) []Reservation {
	return l.units(func(u string) bool { return u != "" && strings.HasPrefix(u, prefix) })
}

func (l *Ledger) units(match func(string) bool) []Reservation {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Reservation
	for _, r := range l.claims {
		if r.res != nil && match(r.res.unit) {
			out = append(out, Reservation{Claim: r.res.asRead, Unit: r.res.unit, Ambiguous: r.res.ambiguous, Since: r.res.since})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Claim.Name < out[j].Claim.Name })
	return out
}

// Reservations lists the pending reservations, oldest first.
func (l *Ledger) Reservations() []Reservation {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Reservation
	for _, r := range l.claims {
		if r.res != nil {
			out = append(out, Reservation{Claim: r.res.asRead, Unit: r.res.unit, Ambiguous: r.res.ambiguous, Since: r.res.since})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Since.Equal(out[j].Since) {
			return out[i].Since.Before(out[j].Since)
		}
		return out[i].Claim.UID < out[j].Claim.UID
	})
	return out
}

// Pending counts the pending reservations, and how many of them are
// ambiguous.
func (l *Ledger) Pending() (pending, ambiguous int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.claims {
		if r.res != nil {
			pending++
			if r.res.ambiguous {
				ambiguous++
			}
		}
	}
	return pending, ambiguous
}

// State is what the ledger knows of one claim.
type State struct {
	// Allocation is the allocation the ledger counts for the claim: its
	// newest state's, or the pending reservation's.
	Allocation *resourceapi.AllocationResult
	// Reserved: the allocation is a pending reservation of this process.
	Reserved bool
	// Version is the newest known resourceVersion (0 if none is known).
	Version Version
	// Deleted: the claim is known to be gone.
	Deleted bool
}

// StateOf returns what the ledger knows of a claim.
func (l *Ledger) StateOf(uid types.UID) State {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.claims[uid]
	if r == nil {
		return State{}
	}
	s := State{Version: r.version, Deleted: r.deleted, Reserved: r.res != nil}
	if c := r.allocated(); c != nil {
		s.Allocation = c.Status.Allocation
	}
	return s
}

// Newest returns c, or the ledger's state of the same claim when that is
// newer (a response this process saw before the cache did).
func (l *Ledger) Newest(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.claims[c.UID]; r != nil && r.claim != nil && newer(r.version, ParseVersion(c.ResourceVersion)) {
		return r.claim
	}
	return c
}

// allocated is the claim the engine counts as allocated: the pending
// reservation's, else the newest state when it carries an allocation.
func (r *record) allocated() *resourceapi.ResourceClaim {
	switch {
	case r.res != nil:
		return r.res.asRead
	case r.claim != nil && r.claim.Status.Allocation != nil:
		return r.claim
	}
	return nil
}

// changedLocked keeps the session in step with a claim whose counted
// allocation went from before to after: a new one is recorded into it, a
// removed or changed one invalidates it.
func (l *Ledger) changedLocked(uid types.UID, before, after *resourceapi.ResourceClaim) {
	switch {
	case before == nil && after != nil:
		l.queueLocked(after)
	case before != nil && (after == nil || !SameAllocation(before.Status.Allocation, after.Status.Allocation)):
		l.bumpLocked()
	}
}

// gcLocked drops a record nothing needs: no allocation, no reservation,
// no request that may answer.
func (l *Ledger) gcLocked(uid types.UID, r *record) {
	if r.requests > 0 || r.res != nil || (!r.deleted && r.allocated() != nil) {
		return
	}
	delete(l.claims, uid)
}

// allocatedLocked lists the claims the engine counts as allocated.
func (l *Ledger) allocatedLocked() []*resourceapi.ResourceClaim {
	out := make([]*resourceapi.ResourceClaim, 0, len(l.claims))
	for _, r := range l.claims {
		if c := r.allocated(); c != nil {
			out = append(out, c)
		}
	}
	return out
}

// Decision is one decision turn: the session to allocate with and the
// reservations made from it. It is valid only inside Decide's callback.
type Decision struct {
	l    *Ledger
	sess allocator.Session
	// made are the reservations of this turn: if the turn fails, they are
	// dropped (no write of them was sent yet).
	made []types.UID
}

// Session is the engine session of the turn: it counts every allocation
// and reservation the ledger knows.
func (d *Decision) Session() allocator.Session { return d.sess }

// Reserve makes a reservation for claim c, as the decision read it, with
// the allocation alloc, in placement unit: it counts as allocated from now
// on, in this turn's session too. It fails with ErrStale when the ledger
// knows a newer state of c, and with ErrTaken when c is allocated or
// reserved already.
func (d *Decision) Reserve(c *resourceapi.ResourceClaim, alloc *resourceapi.AllocationResult, unit string) error {
	l := d.l
	l.mu.Lock()
	defer l.mu.Unlock()
	v := ParseVersion(c.ResourceVersion)
	r := l.claims[c.UID]
	if r != nil {
		switch {
		case r.deleted:
			return fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, ErrStale)
		case r.allocated() != nil:
			return fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, ErrTaken)
		case r.claim != nil && newer(r.version, v):
			return fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, ErrStale)
		}
	} else {
		r = &record{key: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}}
		l.claims[c.UID] = r
	}
	if c.Status.Allocation != nil {
		return fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, ErrTaken)
	}
	asRead := c.DeepCopy()
	asRead.Status.Allocation = alloc
	if err := d.sess.Record(asRead); err != nil {
		// The session cannot be trusted any more.
		l.bumpLocked()
		l.gcLocked(c.UID, r)
		return fmt.Errorf("record the allocation of %s/%s: %w", c.Namespace, c.Name, err)
	}
	if r.claim == nil || !newer(r.version, v) {
		r.claim, r.version = c, v
	}
	r.res = &reservation{asRead: asRead, precondition: v, unit: unit, since: l.now()}
	l.sess.recorded[c.UID] = true
	d.made = append(d.made, c.UID)
	return nil
}

// abandon drops the reservations of a turn that failed: none of their
// writes was sent, so nothing can commit them.
func (d *Decision) abandon() {
	if len(d.made) == 0 {
		return
	}
	l := d.l
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, uid := range d.made {
		if r := l.claims[uid]; r != nil && r.res != nil {
			r.res = nil
			l.gcLocked(uid, r)
		}
	}
	l.bumpLocked()
}

// Decide runs fn in a decision turn of tenant (a namespace: turns go round
// the tenants, see turns) with a session of engine e that counts every
// allocation and reservation the ledger knows. If fn fails, the
// reservations it made are dropped. It fails with ErrNotReady while the
// ledger is not ready.
func (l *Ledger) Decide(ctx context.Context, tenant string, e allocator.Engine, fn func(*Decision) error) error {
	release, err := l.turns.acquire(ctx, tenant)
	if err != nil {
		return err
	}
	start := l.now()
	defer func() { release(l.now().Sub(start)) }()
	if !l.Ready() {
		return ErrNotReady
	}
	sess, err := l.session(ctx, e)
	// A few rebuilds absorb a burst of changes; beyond that the caller
	// retries with its queue's backoff.
	for range 4 {
		if !errors.Is(err, errSessionChanged) {
			break
		}
		sess, err = l.session(ctx, e)
	}
	if err != nil {
		return err
	}
	d := &Decision{l: l, sess: sess}
	if err := fn(d); err != nil {
		d.abandon()
		return err
	}
	return nil
}

// Allocated lists the claims the ledger counts as allocated, pending
// reservations included, for a read-only engine run outside the turns
// (the verdict of an Unsatisfiable Event).
func (l *Ledger) Allocated() []*resourceapi.ResourceClaim {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.allocatedLocked()
}
