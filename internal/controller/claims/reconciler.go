package claims

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/native"
	"github.com/drastack/drastack/internal/allocator/upstream"
	claimspkg "github.com/drastack/drastack/internal/claims"
)

// FieldManager owns the claim writes (finalizer, status.allocation) and,
// in the DRAStack status, status.claims and the ClaimsReady condition. It
// is also how the operator recognises its own allocations in
// managedFields (claims.AllocatedBy).
const FieldManager = "drastack-claims"

// ControllerName names the claim loop in logs and controller-runtime's
// metrics; GateControllerName the gate loop.
const (
	ControllerName     = "claims"
	GateControllerName = "claim-gate"
)

// Backoff of unsatisfiable claims: the first retry after a second, then
// doubling up to five minutes. Changes of the cluster retry at once anyway.
const (
	backoffBase = time.Second
	backoffMax  = 5 * time.Minute
)

// Reconciler allocates the operator's claims and removes the scheduling
// gate of pods whose claims it allocated.
type Reconciler struct {
	// Client reads from the manager's cache and writes.
	Client client.Client
	// APIReader reads from the API server, after a write conflict and in
	// the webhook when the cache does not know an object yet.
	APIReader client.Reader
	// Recorder emits Events on claims and pods; nil emits none.
	Recorder events.EventRecorder
	// Engines by name; default native.New() and upstream.New().
	Engines map[string]allocator.Engine
	// StatusInterval is how often the DRAStack's claim status is
	// refreshed; default DefaultStatusInterval.
	StatusInterval time.Duration
	// Now defaults to time.Now; tests replace it.
	Now func() time.Time

	// pods is the gate loop's cache of unscheduled pods.
	pods cache.Cache
	// bindings are kube-scheduler's binding cycles in flight, seen in
	// pods (see settle.go).
	bindings *bindings

	cfg     atomic.Pointer[claimspkg.Config]
	snap    *snapshot
	backoff workqueue.TypedRateLimiter[types.NamespacedName]
	races   chan struct{}

	mu sync.Mutex
	// failures is the last failed attempt per claim, until the claim is
	// allocated or deleted: it decides Events (one per new outcome),
	// retries on cluster changes, and the DRAStack counts.
	failures map[types.NamespacedName]failure
	// since is when each of the operator's unallocated claims was seen to
	// need allocation (creation or deallocation), for the latency metric.
	since map[types.NamespacedName]time.Time
	// writtenAt is when this process wrote each allocation, exactly (the
	// stored timestamp has whole seconds), for the gate loop.
	writtenAt map[types.UID]time.Time
	// deferred is when each claim was first kept from a node where
	// kube-scheduler had a binding in flight (see avoid.go).
	deferred map[types.NamespacedName]time.Time
	// suspects are claims the race watch found losing a race; the claim
	// loop checks them again and takes their allocation back.
	suspects map[types.UID]bool
	// raceCheckStart is when the last completed race check started.
	raceCheckStart time.Time
	// bypassed are claims already reported as allocated without the
	// operator (see bypass.go).
	bypassed map[types.UID]bool
}

// failure is the last failed attempt of one claim.
type failure struct {
	outcome claimspkg.Outcome
	message string
}

func (r *Reconciler) init() {
	registerMetrics()
	if r.Engines == nil {
		r.Engines = map[string]allocator.Engine{
			string(v1alpha1.EngineNative):   native.New(),
			string(v1alpha1.EngineUpstream): upstream.New(),
		}
	}
	if r.APIReader == nil {
		r.APIReader = r.Client
	}
	r.snap = newSnapshot(r.Client)
	r.backoff = workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](backoffBase, backoffMax)
	r.races = make(chan struct{}, 1)
	r.failures = map[types.NamespacedName]failure{}
	r.since = map[types.NamespacedName]time.Time{}
	r.writtenAt = map[types.UID]time.Time{}
	r.deferred = map[types.NamespacedName]time.Time{}
	r.suspects = map[types.UID]bool{}
	r.bypassed = map[types.UID]bool{}
	r.bindings = newBindings()
	inactive := claimspkg.Config{}
	r.cfg.Store(&inactive)
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// config is the configuration the event handlers filter with.
func (r *Reconciler) config() claimspkg.Config { return *r.cfg.Load() }

// setConfig stores the configuration of a DRAStack (nil: none).
func (r *Reconciler) setConfig(st *v1alpha1.DRAStack) claimspkg.Config {
	next := claimspkg.ConfigFrom(st)
	r.cfg.Store(&next)
	return next
}

// loadConfig reads the DRAStack from the cache, so that a reconcile acts on
// the configuration in force even before its event was handled.
func (r *Reconciler) loadConfig(ctx context.Context) (claimspkg.Config, error) {
	var st v1alpha1.DRAStack
	err := r.Client.Get(ctx, client.ObjectKey{Name: v1alpha1.DRAStackName}, &st)
	if client.IgnoreNotFound(err) != nil {
		return claimspkg.Config{}, err
	}
	if err != nil {
		return r.setConfig(nil), nil
	}
	return r.setConfig(&st), nil
}

func (r *Reconciler) engine(name string) (allocator.Engine, bool) {
	e, ok := r.Engines[name]
	return e, ok
}

// wakeRaces asks the race watch for a check.
func (r *Reconciler) wakeRaces() {
	select {
	case r.races <- struct{}{}:
	default:
	}
}

func (r *Reconciler) failureOf(key types.NamespacedName) (failure, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := r.failures[key]
	return f, ok
}

// recordFailure stores the outcome and reports whether it is news (a
// different outcome or message than last time), which is when an Event is
// due.
func (r *Reconciler) recordFailure(key types.NamespacedName, f failure) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev, ok := r.failures[key]
	r.failures[key] = f
	return !ok || prev != f
}

func (r *Reconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	delete(r.failures, key)
	delete(r.since, key)
	delete(r.deferred, key)
	r.mu.Unlock()
	r.backoff.Forget(key)
}

// markWaiting records when a claim started to need allocation.
func (r *Reconciler) markWaiting(key types.NamespacedName, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.since[key]; !ok {
		r.since[key] = at
	}
}

// waitingSince is when the claim started to need allocation: when this
// process saw that, else its creation.
func (r *Reconciler) waitingSince(c *resourceapi.ResourceClaim) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.since[types.NamespacedName{Namespace: c.Namespace, Name: c.Name}]; ok {
		return t
	}
	return c.CreationTimestamp.Time
}

// retriable lists the claims a change of the cluster may help, longest
// waiting first: the queue is FIFO, so a claim that waited longer gets
// the devices that were just released.
func (r *Reconciler) retriable(classChanged bool) []types.NamespacedName {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []types.NamespacedName
	for key, f := range r.failures {
		if claimspkg.RetriggeredBy(f.outcome, classChanged) {
			out = append(out, key)
		}
	}
	slices.SortFunc(out, func(a, b types.NamespacedName) int {
		if c := r.since[a].Compare(r.since[b]); c != 0 {
			return c
		}
		return cmp.Compare(a.String(), b.String())
	})
	return out
}

// noteWritten records when an allocation was written, forgetting entries
// older than the gate loop can need.
func (r *Reconciler) noteWritten(uid types.UID, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writtenAt[uid] = at
	for k, t := range r.writtenAt {
		if at.Sub(t) > 2*settleMax {
			delete(r.writtenAt, k)
		}
	}
}
