package pool

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	poolpkg "github.com/drastack/drastack/internal/pool"
)

// FieldManager owns DevicePool status and, in the DRAStack status,
// pools, summary.pools and the PoolsHealthy condition.
const FieldManager = "drastack-pool"

// DefaultWorkers is how many pools are reconciled in parallel. Validation
// is microseconds; the time goes into API writes, which overlap well: at
// 1,000 nodes with 4 workers a new pool's create and status apply, 0.7 s
// each on a loaded API server, kept the controller at 3 pools a second
// and 10% of a core (make bench-scale). 16 workers still fell behind the
// simulated driver's publication of 2,004 pools (every DevicePool right
// 13.8 s after the last slice), 64 kept up (1.7 s; the two runs back to
// back, beside the same other work). The client-side rate limit, not the
// worker count, bounds the load on the API server.
const DefaultWorkers = 64

// Defaults of Reconciler.SliceBatch and ClaimBatch. A driver writes a
// pool's slices back to back, so a short wait turns the writes of its
// incomplete states into one; allocations arrive in bursts (a thousand
// claims a second, two on each GPU pool), and one write a pool per half
// second keeps the DevicePools a second behind at most while a burst
// costs one write per pool instead of one per allocation (make
// bench-scale).
const (
	DefaultSliceBatch = time.Second
	DefaultClaimBatch = 500 * time.Millisecond
)

// createdWait is how long a DevicePool this process created may be
// missing from its cache before it is created again: the cache shows a
// new object within a second or two even on a loaded API server, and its
// event queues the pool at once.
const createdWait = 10 * time.Second

// Reconciler keeps one DevicePool per resource pool (driver, pool name)
// up to date. It is driven by pool IDs, not by objects: informer events
// update the in-memory model and enqueue the pools they touched (see
// SetupWithManager), and Reconcile validates one pool and writes its
// DevicePool.
type Reconciler struct {
	// Client reads DevicePools and the DRAStack from the manager's cache
	// and writes them.
	Client client.Client
	// Recorder emits health Events on DevicePools; nil emits none.
	Recorder events.EventRecorder
	// Workers is the number of parallel reconciles; default DefaultWorkers.
	Workers int
	// StackStatusInterval is the least time between two writes of the
	// DRAStack's pool status; default DefaultStackStatusInterval.
	StackStatusInterval time.Duration
	// SliceBatch and ClaimBatch batch the status writes of a pool: a pool
	// that slices (or DeviceTaintRules) change is validated and written
	// that long after the first change, a pool that allocations change
	// after ClaimBatch, with every change that arrived meanwhile; default
	// DefaultSliceBatch and DefaultClaimBatch. Negative: at once.
	SliceBatch, ClaimBatch time.Duration
	// Now defaults to time.Now; tests replace it.
	Now func() time.Time

	model *model
	board *board
	cfg   atomic.Pointer[config]
	// created remembers when this process created the DevicePool of a
	// pool its cache does not show yet (see awaitCreated).
	created sync.Map
}

// RBAC of the DevicePool controller; each marker says which code needs it.
//
// setup.go SetupWithManager: ResourceSlice and ResourceClaim informers
// (cache).
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceslices;resourceclaims,verbs=list;watch
// setup.go SetupWithManager: the DeviceTaintRule informer (cache), only
// when the API server serves DeviceTaintRules; the pool model counts the
// devices they taint.
// +kubebuilder:rbac:groups=resource.k8s.io,resources=devicetaintrules,verbs=list;watch
// setup.go SetupWithManager: the Node metadata informer (cache).
// +kubebuilder:rbac:groups="",resources=nodes,verbs=list;watch
// setup.go SetupWithManager informer and getDevicePool (cache), Reconcile
// (create, delete once the pool is gone).
// +kubebuilder:rbac:groups=drastack.io,resources=devicepools,verbs=list;watch;create;delete
// apply.go applyStatus: server-side apply of the status.
// +kubebuilder:rbac:groups=drastack.io,resources=devicepools/status,verbs=patch
// setup.go SetupWithManager informer and stackstatus.go write (cache).
// +kubebuilder:rbac:groups=drastack.io,resources=drastacks,verbs=get;list;watch
// stackstatus.go write: statusapply.Apply, server-side apply of the pool
// status.
// +kubebuilder:rbac:groups=drastack.io,resources=drastacks/status,verbs=patch
// Reconcile emit: Recorder (events.k8s.io/v1 through the manager's event
// broadcaster).
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// init prepares the in-memory state; SetupWithManager and the tests call it.
func (r *Reconciler) init() {
	r.model = newModel()
	r.board = newBoard()
	c := defaultConfig()
	r.cfg.Store(&c)
}

func (r *Reconciler) config() config { return *r.cfg.Load() }

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Reconcile validates one pool and converges its DevicePool: created when
// the pool appears, its status written when it changed, deleted once the
// pool has had no slices for the grace period. It is idempotent; the only
// memory it relies on (since when a pool is incomplete) is also kept in
// the DevicePool status, so a restarted operator picks it up.
func (r *Reconciler) Reconcile(ctx context.Context, id poolpkg.ID) (reconcile.Result, error) {
	logger := log.FromContext(ctx).WithValues("driver", id.Driver, "pool", id.Pool)
	cfg := r.config()
	now := r.now()

	dp, name, err := r.devicePool(ctx, id)
	if err != nil {
		return reconcile.Result{}, err
	}
	var prev *v1alpha1.DevicePoolStatus
	if dp != nil {
		prev = &dp.Status
	}

	v, exists := r.validate(id, prev, now, cfg)
	if !exists {
		r.board.remove(id)
		r.model.forget(id)
		return reconcile.Result{}, nil
	}
	if v.expired {
		if err := r.Client.Delete(ctx, dp, client.Preconditions{UID: &dp.UID}); client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, fmt.Errorf("delete DevicePool %s of gone pool %s: %w", dp.Name, id, err)
		}
		logger.Info("Deleted DevicePool: the pool has had no slices for the grace period", "devicePool", dp.Name, "grace", cfg.grace)
		r.board.remove(id)
		r.model.forget(id)
		return reconcile.Result{}, nil
	}

	if dp == nil {
		if wait, ok := r.awaitCreated(id, now); ok {
			return reconcile.Result{RequeueAfter: wait}, nil
		}
		dp = newDevicePool(name, id)
		if err := r.Client.Create(ctx, dp, client.FieldOwner(FieldManager)); err != nil {
			// AlreadyExists means the cache is behind; the retry sees it.
			return reconcile.Result{}, fmt.Errorf("create DevicePool %s for pool %s: %w", name, id, err)
		}
		r.created.Store(id, now)
		logger.V(1).Info("Created DevicePool", "devicePool", name)
	} else {
		r.created.Delete(id)
	}
	// The cached DevicePool can be compared with only when it shows this
	// process's last write (or this process has not written it yet).
	e := r.board.get(id)
	version := dp.ResourceVersion
	written := false
	if (e != nil && e.version != dp.ResourceVersion) || !statusEqual(&dp.Status, &v.status) {
		if version, err = applyStatus(ctx, r.Client, dp.Name, &v.status); err != nil {
			return reconcile.Result{}, err
		}
		written = true
	}

	// What the last Event said: the board knows it in this process, the
	// previous status after a restart.
	last, warned := prev, prev != nil && alarming(prev)
	if e != nil {
		last, warned = &v1alpha1.DevicePoolStatus{Health: e.health, Reason: e.reason}, e.warned
	}
	if ev, ok := decideEvent(last, &v.status, warned); ok {
		r.emit(dp, ev)
		warned = ev.warning
	}
	// Entries are rebuilt only when something they hold may have changed
	// (problems beyond maxProblems are not in the status, so a pool with
	// more of them is always rebuilt).
	if written || e == nil || e.warned != warned || v.status.MoreProblems > 0 {
		r.board.set(newEntry(id, &v.status, v.problems, warned, version))
	}
	return reconcile.Result{RequeueAfter: v.requeue}, nil
}

// awaitCreated reports whether this process created the pool's
// DevicePool less than createdWait ago and its cache does not show it
// yet: the pool is validated again when the cache does (the DevicePool's
// create event queues it), instead of a second create that can only fail
// as AlreadyExists. It returns when to look again at the latest.
func (r *Reconciler) awaitCreated(id poolpkg.ID, now time.Time) (time.Duration, bool) {
	v, ok := r.created.Load(id)
	if !ok {
		return 0, false
	}
	left := v.(time.Time).Add(createdWait).Sub(now)
	if left <= 0 {
		r.created.Delete(id)
		return 0, false
	}
	return left, true
}

func (r *Reconciler) emit(dp *v1alpha1.DevicePool, ev healthEvent) {
	if r.Recorder == nil {
		return
	}
	kind := corev1.EventTypeNormal
	if ev.warning {
		kind = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(dp, nil, kind, ev.reason, "Validate", "%s", ev.message)
}

func newDevicePool(name string, id poolpkg.ID) *v1alpha1.DevicePool {
	dp := &v1alpha1.DevicePool{ObjectMeta: metav1.ObjectMeta{
		Name:        name,
		Annotations: map[string]string{AnnotationDriver: id.Driver, AnnotationPool: id.Pool},
	}}
	if len(validation.IsValidLabelValue(id.Driver)) == 0 {
		dp.Labels = map[string]string{LabelDriver: id.Driver}
	}
	return dp
}

// devicePool finds the DevicePool of a pool in the cache and the name to
// create it under when there is none: Name(id), or HashedName(id) when
// another pool already holds that name (see Name). An object that exists
// under the hashed name is used even when the plain name has become free,
// so a pool never ends up with two DevicePools.
func (r *Reconciler) devicePool(ctx context.Context, id poolpkg.ID) (*v1alpha1.DevicePool, string, error) {
	plain, hashed := Name(id), HashedName(id)
	atPlain, err := r.getDevicePool(ctx, plain)
	if err != nil {
		return nil, "", err
	}
	if atPlain != nil && owns(atPlain, id) {
		return atPlain, plain, nil
	}
	if hashed == plain {
		if atPlain != nil {
			return nil, "", fmt.Errorf("DevicePool %s belongs to another pool than %s", plain, id)
		}
		return nil, plain, nil
	}
	atHashed, err := r.getDevicePool(ctx, hashed)
	if err != nil {
		return nil, "", err
	}
	switch {
	case atHashed != nil && owns(atHashed, id):
		return atHashed, hashed, nil
	case atPlain == nil:
		return nil, plain, nil
	case atHashed == nil:
		return nil, hashed, nil
	}
	return nil, "", fmt.Errorf("DevicePools %s and %s both belong to other pools than %s", plain, hashed, id)
}

// owns: the DevicePool reports id, or carries no pool annotations at all
// (then it is adopted; the operator is the only writer of DevicePools).
func owns(dp *v1alpha1.DevicePool, id poolpkg.ID) bool {
	got, ok := idOf(dp.Annotations)
	return !ok || got == id
}

func (r *Reconciler) getDevicePool(ctx context.Context, name string) (*v1alpha1.DevicePool, error) {
	var dp v1alpha1.DevicePool
	err := r.Client.Get(ctx, client.ObjectKey{Name: name}, &dp)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get DevicePool %s: %w", name, err)
	}
	return &dp, nil
}

// verdict is what validating one pool decided.
type verdict struct {
	status v1alpha1.DevicePoolStatus
	// problems is the report's full list (status holds at most maxProblems).
	problems []poolpkg.Problem
	// expired: the pool has had no slices for the grace period; its
	// DevicePool goes.
	expired bool
	// requeue is when the verdict changes by itself: the grace period of
	// an incomplete or gone pool ends.
	requeue time.Duration
}

// validate computes a pool's status from the model: the pure part of
// Reconcile, which the benchmarks time. prev is the DevicePool's status
// (nil without a DevicePool). exists is false when the pool has neither
// slices nor a DevicePool: nothing to report.
func (r *Reconciler) validate(id poolpkg.ID, prev *v1alpha1.DevicePoolStatus, now time.Time, cfg config) (v verdict, exists bool) {
	start := time.Now()
	defer func() { validationDuration.Observe(time.Since(start).Seconds()) }()

	p := r.model.pool(id)
	gone := p == nil
	if gone {
		if prev == nil {
			return verdict{}, false
		}
		// A pool whose slices all went away is reported as an empty,
		// incomplete pool of its last known generation until the grace
		// period ends: a driver restart that deletes and republishes its
		// slices does not delete and recreate the DevicePool.
		p = &poolpkg.Pool{ID: id, Generation: prev.Generation, Node: prev.Node, ExpectedSlices: max(int64(prev.Slices.Expected), 1)}
	}

	var seed time.Time
	if prev != nil && prev.IncompleteSince != nil {
		seed = prev.IncompleteSince.Time
	}
	since := r.model.observeIncomplete(p, now, seed)
	if !since.IsZero() {
		left := since.Add(cfg.grace).Sub(now)
		switch {
		case gone && left <= 0 && !r.model.held(id):
			return verdict{expired: true}, true
		case gone && left <= 0:
			// Allocated claims still point at its devices: the DevicePool
			// stays to say so until they are gone (their deletion queues
			// the pool again).
		case gone:
			v.requeue = left
		case left >= 0:
			// IncompletePool appears once the grace period is exceeded;
			// look again just after that.
			v.requeue = left + time.Second
		}
	}

	report := r.model.assess(p, now, since, cfg.grace)
	if why := cfg.withheld[id]; why != "" && gone {
		report.Problems = withheldFirst(report.Problems, why)
	}
	var nodePresent *bool
	if report.Node != "" {
		nodePresent = ptr.To(r.model.hasNode(report.Node))
	}
	v.status = buildStatus(statusInput{
		report:      report,
		prev:        prev,
		now:         now,
		since:       since,
		maxProblems: cfg.maxProblems,
		gone:        gone,
		nodePresent: nodePresent,
	})
	v.problems = report.Problems
	return v, true
}
