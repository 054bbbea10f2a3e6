package claims

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/native"
	"github.com/drastack/drastack/internal/allocator/upstream"
	"github.com/drastack/drastack/internal/claimpolicy"
)

// FieldManager owns the claim writes (finalizer, status.allocation), the
// pod gate removals, the operator's DeviceTaintRules and, in the DRAStack
// status, status.claims and the ClaimsReady condition. It is also how the
// operator recognises its own allocations in managedFields
// (claims.AllocatedBy).
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
// Its state lives in small types that each own their fields and locking:
// the configuration (configStore), the engine's view of the cluster
// (snapshot), and the outcome books of waiting claims and pods (book).
type Reconciler struct {
	// Client reads from the manager's cache and writes.
	Client client.Client
	// APIReader reads from the API server, after a write conflict.
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
	// Now defaults to time.Now; tests replace it.
	Now func() time.Time

	cfg     configStore
	snap    *snapshot
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
	// decisions orders allocations before the removal of central taints
	// (see allocationBarrier).
	decisions allocationBarrier
}

// allocationBarrier lets the taint loop wait until every allocation
// decided under an earlier configuration has been written or dropped.
// The claim and placement loops hold it shared for a whole reconcile,
// from reading the configuration to the last write, so they never wait
// for each other; the taint loop takes it exclusively for an instant
// before it removes a taint (a device leaving the central partition, or
// the DRAStack going). Every reconcile that began before has then ended,
// and every later one reads a configuration at least as new as the one
// the taint loop acted on (all read the same informer cache), so no
// allocation of a device that kube-scheduler may now allocate can still
// be written: the removal is ordered by construction, not by a delay.
type allocationBarrier struct {
	mu sync.RWMutex
}

// enter marks the start of a reconcile that may allocate; call the
// returned func when it ends.
func (b *allocationBarrier) enter() func() {
	b.mu.RLock()
	return b.mu.RUnlock
}

// drain returns once every reconcile that entered before it has ended.
func (b *allocationBarrier) drain() {
	b.mu.Lock()
	//nolint:staticcheck // an empty critical section is the point: a barrier.
	b.mu.Unlock()
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
	r.snap = newSnapshot(r.Client, &r.cfg)
	r.snap.api = r.APIReader
	r.claims = newBook()
	r.pods = newBook()
	r.nodes = newNodeMemory()
	r.backoff = workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](backoffBase, backoffMax)
	r.cfg.set(nil)
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

// engineFeatures returns the engine's feature switches for the cluster.
func (s *configStore) engineFeatures() *allocator.Features {
	if v := s.cur.Load(); v != nil {
		return v.features
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
