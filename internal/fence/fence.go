// Package fence makes the writes of a deposed allocation leader fail by
// construction (docs/allocation-protocol.md, section 2). Leader election
// is not fencing: a leader learns that it lost its lease only when it next
// tries to renew it, and a paused process does not try. The fence is a
// Lease of its own whose holder names the term (one leadership of one
// process); a term may write an object only if it read it before its own
// last confirmation of the fence (Rule W), and a new term sweeps what an
// earlier term could still write. Confirmations are JSON patches with a
// `test` of the holder, so they commit only while the term holds the
// fence, and any number may be in flight.
package fence

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/drastack/drastack/internal/ledger"
)

// The fence's Lease lives in the operator's namespace beside the
// leader-election Lease, and is written only by the elected leader, under
// the operator's Role in that namespace (the markers of
// internal/controller/claims term.go: get, update and patch of this Lease
// by name, create of leases).
const (
	// DefaultName is the name of the fence's Lease.
	DefaultName = "drastack-allocation-fence"
	// ScopeAnnotation records the DeviceClasses that make a claim the
	// operator's under the configuration of the holding term: a new term
	// sweeps the claims the previous term could write.
	ScopeAnnotation = "drastack.io/fence-scope"
	// seqAnnotation is what a confirmation changes, so that each one
	// commits a new version.
	seqAnnotation = "drastack.io/fence-confirmation"
)

// Retries of a confirmation that got no definite answer back off between
// these bounds: for liveness only, nothing waits on time for correctness.
const (
	minRetry = 10 * time.Millisecond
	maxRetry = time.Second
)

// ErrLost: the term does not hold the fence (any more): another term
// acquired it, or the Lease is gone. Nothing may be written.
var ErrLost = errors.New("this process no longer holds the allocation fence: another term took it")

// Fence is the allocation fence of one process. Any goroutine may call its
// methods.
type Fence struct {
	client    client.Client
	reader    client.Reader
	key       types.NamespacedName
	identity  string
	onLost    func()
	sleep     func(time.Duration)
	newTerm   func() string
	mu        sync.Mutex
	term      string
	holding   bool
	acquired  ledger.Version
	last      ledger.Version
	seq       uint64
	inFlight  bool
	waiters   []waiter
	lostError error
	// lost is closed when the term's fence is found lost.
	lost chan struct{}
	// scope is what the term's fence records.
	scope []string
}

type waiter struct {
	after ledger.Version
	done  chan error
}

// Options configure a Fence.
type Options struct {
	// Client writes the Lease.
	Client client.Client
	// Reader reads it from the API server itself (never a cache: the
	// acquisition must see the previous term's last write); default Client.
	Reader client.Reader
	// Namespace and Name of the Lease; Name defaults to DefaultName.
	Namespace, Name string
	// Identity names this process (the leader-election identity).
	Identity string
	// OnLost is called once when a held fence is found lost.
	OnLost func()
	// Sleep waits between retries; default time.Sleep (tests replace it).
	Sleep func(time.Duration)
	// NewTerm names a new term; default a random name (the simulation
	// replays with names of its own).
	NewTerm func() string
}

// New returns a fence this process does not hold yet.
func New(o Options) *Fence {
	if o.Name == "" {
		o.Name = DefaultName
	}
	if o.Sleep == nil {
		o.Sleep = time.Sleep
	}
	if o.NewTerm == nil {
		o.NewTerm = func() string { return rand.Text()[:16] }
	}
	if o.Reader == nil {
		o.Reader = o.Client
	}
	return &Fence{client: o.Client, reader: o.Reader, key: types.NamespacedName{Namespace: o.Namespace, Name: o.Name}, identity: o.Identity, onLost: o.OnLost, sleep: o.Sleep, newTerm: o.NewTerm}
}

// Acquire starts a new term: it makes this process the fence's holder with
// an optimistic update and records scope (sorted class names). It returns
// the scope the previous term recorded and the version at which the term
// began: every object an earlier term could still write was read before
// it, so sweeping the unallocated claims older than it (and in either
// scope) leaves earlier terms nothing to write.
func (f *Fence) Acquire(ctx context.Context, scope []string) (previous []string, acquired ledger.Version, err error) {
	term := f.newTerm()
	holder := f.identity + "#" + term
	scopeJSON, err := json.Marshal(sortedSet(scope))
	if err != nil {
		return nil, 0, err
	}
	for {
		var lease coordinationv1.Lease
		err := f.reader.Get(ctx, f.key, &lease)
		switch {
		case apierrors.IsNotFound(err):
			lease = coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Namespace: f.key.Namespace, Name: f.key.Name,
					Labels:      map[string]string{"app.kubernetes.io/part-of": "drastack"},
					Annotations: map[string]string{ScopeAnnotation: string(scopeJSON), seqAnnotation: "0"}},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseTransitions: ptr.To[int32](0)},
			}
			err = f.client.Create(ctx, &lease)
			if apierrors.IsAlreadyExists(err) {
				continue
			}
		case err != nil:
			return nil, 0, fmt.Errorf("read the allocation fence %s: %w", f.key, err)
		default:
			previous = parseScope(lease.Annotations[ScopeAnnotation])
			if lease.Annotations == nil {
				lease.Annotations = map[string]string{}
			}
			lease.Annotations[ScopeAnnotation] = string(scopeJSON)
			lease.Annotations[seqAnnotation] = "0"
			lease.Spec.HolderIdentity = ptr.To(holder)
			lease.Spec.LeaseTransitions = ptr.To(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
			err = f.client.Update(ctx, &lease)
			if apierrors.IsConflict(err) {
				continue
			}
		}
		if err != nil {
			return nil, 0, fmt.Errorf("acquire the allocation fence %s: %w", f.key, err)
		}
		v := ledger.ParseVersion(lease.ResourceVersion)
		f.mu.Lock()
		f.term, f.holding, f.acquired, f.last, f.seq, f.lostError = term, true, v, v, 0, nil
		f.lost, f.scope = make(chan struct{}), sortedSet(scope)
		f.mu.Unlock()
		return previous, v, nil
	}
}

// Term returns the current term ("" before Acquire).
func (f *Fence) Term() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.term
}

// Lost is closed when the current term's fence is found lost (nil before
// Acquire).
func (f *Fence) Lost() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lost
}

// EnsureScope records classes in the term's scope, unless they are there
// already (SetScope).
func (f *Fence) EnsureScope(ctx context.Context, classes []string) error {
	f.mu.Lock()
	missing := false
	for _, c := range classes {
		if _, found := slices.BinarySearch(f.scope, c); !found {
			missing = true
			break
		}
	}
	union := sortedSet(append(slices.Clone(f.scope), classes...))
	f.mu.Unlock()
	if !missing {
		return nil
	}
	return f.SetScope(ctx, union)
}

// Holding reports whether this process holds the fence as far as it knows.
func (f *Fence) Holding() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.holding
}

// Allows reports whether an object read at version v may be written now
// (Rule W): the term holds the fence and confirmed it after v.
func (f *Fence) Allows(v ledger.Version) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.holding && v != 0 && v < f.last
}

// Await returns once an object read at version v may be written, sending
// confirmations as needed (one confirmation serves every waiter it
// covers), or ErrLost when the term lost the fence. A version of 0 (not a
// number) can never be written.
func (f *Fence) Await(ctx context.Context, v ledger.Version) error {
	if v == 0 {
		return fmt.Errorf("an object without a numeric resourceVersion cannot be written under the fence")
	}
	f.mu.Lock()
	switch {
	case !f.holding:
		err := f.lostErrorLocked()
		f.mu.Unlock()
		return err
	case v < f.last:
		f.mu.Unlock()
		return nil
	}
	w := waiter{after: v, done: make(chan error, 1)}
	f.waiters = append(f.waiters, w)
	if !f.inFlight {
		f.inFlight = true
		go f.confirmLoop(context.WithoutCancel(ctx))
	}
	f.mu.Unlock()
	select {
	case err := <-w.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *Fence) lostErrorLocked() error {
	if f.lostError != nil {
		return f.lostError
	}
	return ErrLost
}

// confirmLoop sends confirmations back to back while anyone waits.
func (f *Fence) confirmLoop(ctx context.Context) {
	delay := minRetry
	for {
		v, err := f.confirm(ctx)
		if err != nil && !errors.Is(err, ErrLost) {
			// No definite answer: the waiters keep waiting (nothing is
			// written meanwhile) and the confirmation is sent again.
			f.sleep(delay)
			delay = min(2*delay, maxRetry)
		} else {
			delay = minRetry
		}
		f.mu.Lock()
		lost := false
		switch {
		case errors.Is(err, ErrLost):
			lost = f.loseLocked(err)
		case err == nil && v > f.last:
			f.last = v
		}
		kept := f.waiters[:0]
		for _, w := range f.waiters {
			switch {
			case !f.holding:
				w.done <- f.lostErrorLocked()
			case w.after < f.last:
				w.done <- nil
			default:
				kept = append(kept, w)
			}
		}
		f.waiters = kept
		if len(f.waiters) == 0 || !f.holding {
			f.inFlight = false
			f.mu.Unlock()
			f.notifyLost(lost)
			return
		}
		f.mu.Unlock()
		f.notifyLost(lost)
	}
}

// Confirm sends one confirmation and returns the fence's new version.
// Ambiguous failures (timeouts, 5xx) are returned as they are: the caller
// tries again.
func (f *Fence) confirm(ctx context.Context) (ledger.Version, error) {
	f.mu.Lock()
	if !f.holding {
		f.mu.Unlock()
		return 0, ErrLost
	}
	f.seq++
	holder := f.identity + "#" + f.term
	seq := f.seq
	f.mu.Unlock()
	ops := []map[string]any{
		{"op": "test", "path": "/spec/holderIdentity", "value": holder},
		{"op": "add", "path": "/metadata/annotations/" + jsonPointerEscape(seqAnnotation), "value": strconv.FormatUint(seq, 10)},
	}
	return f.patch(ctx, ops)
}

// SetScope records the scope of the term's configuration (sorted class
// names), as a confirmation does. A term records a new scope before it
// writes claims selected under it.
func (f *Fence) SetScope(ctx context.Context, scope []string) error {
	raw, err := json.Marshal(sortedSet(scope))
	if err != nil {
		return err
	}
	f.mu.Lock()
	holder := f.identity + "#" + f.term
	f.mu.Unlock()
	v, err := f.patch(ctx, []map[string]any{
		{"op": "test", "path": "/spec/holderIdentity", "value": holder},
		{"op": "add", "path": "/metadata/annotations/" + jsonPointerEscape(ScopeAnnotation), "value": string(raw)},
	})
	f.mu.Lock()
	lost := false
	switch {
	case errors.Is(err, ErrLost):
		lost = f.loseLocked(err)
	case err == nil:
		f.scope = sortedSet(scope)
		if v > f.last {
			f.last = v
		}
	}
	f.mu.Unlock()
	f.notifyLost(lost)
	return err
}

func (f *Fence) patch(ctx context.Context, ops []map[string]any) (ledger.Version, error) {
	data, err := json.Marshal(ops)
	if err != nil {
		return 0, err
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: f.key.Namespace, Name: f.key.Name}}
	err = f.client.Patch(ctx, lease, client.RawPatch(types.JSONPatchType, data))
	switch {
	case err == nil:
		return ledger.ParseVersion(lease.ResourceVersion), nil
	case apierrors.IsNotFound(err):
		return 0, fmt.Errorf("%w (the Lease %s is gone)", ErrLost, f.key)
	}
	// A failed test of the holder is a 422; so is much else, and a
	// timeout says nothing. Whose the fence is decides.
	var cur coordinationv1.Lease
	if gerr := f.reader.Get(ctx, f.key, &cur); gerr == nil {
		f.mu.Lock()
		mine := f.identity + "#" + f.term
		f.mu.Unlock()
		if ptr.Deref(cur.Spec.HolderIdentity, "") != mine {
			return 0, fmt.Errorf("%w: held by %s", ErrLost, ptr.Deref(cur.Spec.HolderIdentity, ""))
		}
	} else if apierrors.IsNotFound(gerr) {
		return 0, fmt.Errorf("%w (the Lease %s is gone)", ErrLost, f.key)
	}
	return 0, fmt.Errorf("confirm the allocation fence %s: %w", f.key, err)
}

// loseLocked marks the fence lost and reports whether it was held; the
// caller calls f.onLost once it has released f.mu.
func (f *Fence) loseLocked(err error) bool {
	if !f.holding {
		return false
	}
	f.holding, f.lostError = false, err
	close(f.lost)
	return true
}

// notifyLost calls OnLost when a fence was just lost.
func (f *Fence) notifyLost(lost bool) {
	if lost && f.onLost != nil {
		f.onLost()
	}
}

func parseScope(s string) []string {
	var out []string
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil
	}
	return out
}

func sortedSet(in []string) []string {
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out)
}

// jsonPointerEscape escapes a map key for a JSON pointer (RFC 6901).
func jsonPointerEscape(s string) string {
	out := make([]byte, 0, len(s))
	for i := range len(s) {
		switch s[i] {
		case '~':
			out = append(out, '~', '0')
		case '/':
			out = append(out, '~', '1')
		default:
			out = append(out, s[i])
		}
	}
	return string(out)
}
