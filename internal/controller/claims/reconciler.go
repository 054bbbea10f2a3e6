package claims

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/native"
	"github.com/drastack/drastack/internal/allocator/upstream"
	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/fence"
	"github.com/drastack/drastack/internal/ledger"
)

// FieldManager owns the claim writes (finalizer, status.allocation), the
// pod gate removals, the operator's DeviceTaintRules and, in the DRAStack
// status, status.claims and the ClaimsReady condition. It is also how the
// operator recognises its own allocations in managedFields
// (claimpolicy.AllocatedBy).
const FieldManager = "drastack-claims"

// Names of the loops in logs and controller-runtime's metrics.
const (
	// ControllerName allocates immediate claims, which need no pod.
	ControllerName = "claims"
	// PlacementControllerName places the operator claims of pods, lifts
	// their gates, and places again what could not run.
	PlacementControllerName = "claim-placement"
	// TaintControllerName keeps the central devices tainted.
	TaintControllerName = "central-taints"
)

// Backoff of unsatisfiable claims and pods: the first retry after a
// second, then doubling up to five minutes. Changes of the cluster retry at
// once anyway.
const (
	backoffBase = time.Second
	backoffMax  = 5 * time.Minute
)

// Reconciler allocates the operator's claims from the devices only the
// operator allocates (spec.claims.central), places pods' claims on nodes
// where the pods fit, and keeps the central devices tainted so that
// kube-scheduler never allocates them: the two allocators never share a
// device, so neither can give one away twice.
//
// What the decisions read is owned by one ledger (package ledger); writes
// are fenced to this process's term (package fence). docs/allocation-protocol.md
// is the specification. The loops hold no other state than their outcome
// books (book), the configuration (configStore) and where pods were
// placed (nodeMemory).
type Reconciler struct {
	// Client reads from the manager's cache and writes.
	Client client.Client
	// APIReader reads from the API server: after a write conflict, and for
	// the fence's sweep.
	APIReader client.Reader
	// Recorder emits Events on claims and pods; nil emits none.
	Recorder events.EventRecorder
	// Engines by name; default native.New() and upstream.New().
	Engines map[string]allocator.Engine
	// StatusInterval is how often the DRAStack's claim status is
	// refreshed; default DefaultStatusInterval.
	StatusInterval time.Duration
	// MaxSteps bounds each engine search; 0 is the engine's default.
	MaxSteps int64
	// Workers is how many immediate claims are reconciled (and their
	// allocations written) at once; default claimWorkers.
	Workers int
	// Now defaults to time.Now; tests replace it.
	Now func() time.Time
	// FenceNamespace holds the allocation fence's Lease (the operator's
	// namespace); Identity names this process in it.
	FenceNamespace, Identity string

	cfg     configStore
	ledger  *ledger.Ledger
	fence   termFence
	source  *cacheSource
	claims  *book // immediate claims waiting for devices
	pods    *book // pods waiting for a placement
	nodes   *nodeMemory
	backoff workqueue.TypedRateLimiter[types.NamespacedName]
	// podCache holds the pods the placement loop reads (see placement.go);
	// nil until SetupWithManager.
	podCache client.Reader
	// taintRules is false on a cluster that does not serve
	// resource.k8s.io/v1 DeviceTaintRule: only slices the operator
	// publishes itself carry the central taint there.
	taintRules bool
	// serialWrites sends a unit's writes, and a sweep's, one after the
	// other instead of in parallel: the deterministic simulation runs one
	// goroutine at a time.
	serialWrites bool
	// retired are the DeviceTaintRules the taint loop deleted or narrowed
	// that the cache may still show (retiredRules).
	retired retiredRules
	// sleep waits between the retries of a sweep write without a
	// definite answer (sleepCtx when nil). The simulation's clock is its
	// own: it does not wait in real time.
	sleep func(context.Context, time.Duration)
	// off switches parts of the protocol off, for the simulation to show
	// what each one prevents; always zero outside it.
	off protocolSwitches
	// released wakes the taint loop when the ledger took in a released
	// allocation (noteReleased).
	released chan event.GenericEvent
	// gangs is what the placement loop keeps about gangs (gang.go).
	gangs *gangState
}

// protocolSwitches turn parts of docs/allocation-protocol.md off. Only the
// simulation sets them, to show that it finds the problem each part
// prevents (issue 20's list).
type protocolSwitches struct {
	// ambiguousFrees ends a reservation when its write has no definite
	// answer (problem 1).
	ambiguousFrees bool
	// expireAfter ends a reservation this long after its decision, as
	// writtenTTL did (problem 2).
	expireAfter time.Duration
	// noFence writes without the term fence and starts terms without a
	// sweep (problem 3).
	noFence bool
	// noHolds lets devices leave the partition while allocations hold
	// them (problem 5).
	noHolds bool
	// noUndo leaves half placements as they are (problem 8).
	noUndo bool
	// timerFromCondition starts the recovery timer at the PodScheduled
	// condition's lastTransitionTime and counts any Unschedulable verdict,
	// as Replace did before (problem 7).
	timerFromCondition bool
	// noJoin lets the engine use a central pool as soon as the cache
	// shows its DeviceTaintRule, before the join barrier ran (problem 4).
	noJoin bool
	// trustCache lets the engine use a rule the taint loop deleted or
	// narrowed until the cache shows that (retiredRules; seed 11928).
	trustCache bool
	// keepLostRound goes on with a round whose canary rule another
	// process deleted (seeds 49218, 52306: no canary is refused again).
	keepLostRound bool
}

// termFence is what the loops use of the allocation fence
// (*fence.Fence; unit tests of single branches use a stand-in, since the
// fake client's resourceVersions do not share one counter).
type termFence interface {
	// Acquire starts a term; see fence.Fence.Acquire.
	Acquire(ctx context.Context, scope []string) ([]string, ledger.Version, error)
	// Term names the current term.
	Term() string
	// Await returns once an object read at v may be written (Rule W).
	Await(ctx context.Context, v ledger.Version) error
	// EnsureScope records classes in the term's scope.
	EnsureScope(ctx context.Context, classes []string) error
	// Lost is closed when the term's fence is found lost.
	Lost() <-chan struct{}
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
	r.released = make(chan event.GenericEvent, 1)
	r.source = &cacheSource{reader: r.Client, cfg: &r.cfg, taintRules: r.taintRules, off: &r.off, retired: &r.retired}
	r.ledger = ledger.New(ledger.Options{Source: r.source, Now: r.now})
	if r.fence == nil {
		r.fence = fence.New(fence.Options{Client: r.Client, Reader: r.APIReader, Namespace: r.FenceNamespace, Identity: r.Identity,
			OnLost: func() { r.ledger.SetReady(false) }})
	}
	r.claims = newBook()
	r.pods = newBook()
	r.nodes = newNodeMemory()
	r.gangs = newGangState()
	r.backoff = workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](backoffBase, backoffMax)
	r.cfg.set(nil)
	if r.sleep == nil {
		r.sleep = sleepCtx
	}
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Reconciler) engine(name string) (allocator.Engine, bool) {
	e, ok := r.Engines[name]
	return e, ok
}

// loadConfig reads the DRAStack from the cache, so that a reconcile acts on
// the configuration in force even before its event was handled.
func (r *Reconciler) loadConfig(ctx context.Context) (claimpolicy.Config, error) {
	_, cfg, err := r.loadStack(ctx)
	return cfg, err
}

// loadStack is loadConfig that also returns the DRAStack (nil when there is
// none), for loops that write Events on it or make it an owner.
func (r *Reconciler) loadStack(ctx context.Context) (*v1alpha1.DRAStack, claimpolicy.Config, error) {
	var st v1alpha1.DRAStack
	err := r.Client.Get(ctx, client.ObjectKey{Name: v1alpha1.DRAStackName}, &st)
	if client.IgnoreNotFound(err) != nil {
		return nil, claimpolicy.Config{}, err
	}
	if err != nil {
		return nil, r.cfg.set(nil), nil
	}
	return &st, r.cfg.set(&st), nil
}

// configStore is the configuration the event handlers filter with. Any
// goroutine may call it.
type configStore struct {
	cur atomic.Pointer[configVersion]
}

type configVersion struct {
	cfg claimpolicy.Config
	// multiHost are the drivers the operator publishes itself: their
	// node-less slices carry the central taint in the slice.
	multiHost []string
	// features are the engine's switches from the cluster probe (nil: the
	// engine's defaults).
	features *allocator.Features
}

// get returns the configuration in force.
func (s *configStore) get() claimpolicy.Config {
	if v := s.cur.Load(); v != nil {
		return v.cfg
	}
	return claimpolicy.Config{}
}

// published returns the drivers of spec.multiHost.
func (s *configStore) published() []string {
	if v := s.cur.Load(); v != nil {
		return v.multiHost
	}
	return nil
}

// set stores the configuration of a DRAStack (nil: none) and returns it.
// A configuration equal to the one in force leaves that one in place, so
// that the stored version changes exactly when the configuration does
// (unchangedSince compares versions by identity).
func (s *configStore) set(st *v1alpha1.DRAStack) claimpolicy.Config {
	v := newConfigVersion(st)
	for {
		old := s.cur.Load()
		if old != nil && old.equal(v) {
			return old.cfg
		}
		if s.cur.CompareAndSwap(old, v) {
			return v.cfg
		}
	}
}

// unchangedSince reports whether v is the configuration in force.
func (s *configStore) unchangedSince(v *configVersion) bool { return s.cur.Load() == v }

func newConfigVersion(st *v1alpha1.DRAStack) *configVersion {
	v := &configVersion{cfg: claimpolicy.ConfigFrom(st)}
	if v.cfg.Active {
		v.multiHost = multiHostDrivers(st)
		v.features = claimpolicy.EngineFeatures(st.Status.Cluster)
	}
	return v
}

// configOf is the claim configuration of a version (none for nil).
func configOf(v *configVersion) claimpolicy.Config {
	if v == nil {
		return claimpolicy.Config{}
	}
	return v.cfg
}

// publishedOf are the drivers the operator publishes under a version.
func publishedOf(v *configVersion) []string {
	if v == nil {
		return nil
	}
	return v.multiHost
}

// multiHostDrivers are the drivers the operator publishes for st.
func multiHostDrivers(st *v1alpha1.DRAStack) []string {
	var out []string
	for _, mh := range st.Spec.MultiHost {
		out = append(out, mh.Driver)
	}
	return out
}

// equal: both decide and build sessions alike.
func (v *configVersion) equal(o *configVersion) bool {
	return v.cfg.Equal(o.cfg) && slices.Equal(v.multiHost, o.multiHost) &&
		(v.features == nil) == (o.features == nil) && (v.features == nil || *v.features == *o.features)
}
