package pool

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/handover"
	poolpkg "github.com/drastack/drastack/internal/pool"
)

// ControllerName names the controller in logs and controller-runtime's
// metrics.
const ControllerName = "devicepool"

type queue = workqueue.TypedRateLimitingInterface[poolpkg.ID]

// SetupWithManager registers the controller and the DRAStack status
// writer. It does nothing (and says so in the log) when the API server
// does not serve resource.k8s.io/v1: there is nothing to validate, and the
// DRAStack reports the incompatibility through ClusterCompatible instead
// of the operator failing to start.
//
// The controller is a typed controller-runtime controller whose queue
// holds pool IDs rather than object names: handlers on the ResourceSlice,
// ResourceClaim, Node (metadata only), DevicePool and DRAStack informers
// update the model and add exactly the pools an event touched. Compared
// with a hand-made client-go workqueue this keeps controller-runtime's
// leader election, cache-sync wait before the first reconcile (the model
// is complete when validation starts), per-item backoff, de-duplication of
// a pool queued many times, and the controller_runtime_reconcile_* and
// workqueue_* metrics, for no code.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	logger := mgr.GetLogger().WithName(ControllerName)
	if _, err := mgr.GetRESTMapper().RESTMapping(resourceapi.SchemeGroupVersion.WithKind("ResourceSlice").GroupKind(), resourceapi.SchemeGroupVersion.Version); err != nil {
		if meta.IsNoMatchError(err) {
			logger.Info("resource.k8s.io/v1 is not served; DevicePool validation is off until the operator restarts on a cluster with DRA")
			return nil
		}
		return fmt.Errorf("look up ResourceSlice in the API server: %w", err)
	}
	r.init()
	useBoard(r.board)

	workers := r.Workers
	if workers <= 0 {
		workers = DefaultWorkers
	}
	cache := mgr.GetCache()
	nodes := &metav1.PartialObjectMetadata{}
	nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	bld := builder.TypedControllerManagedBy[poolpkg.ID](mgr).
		Named(ControllerName).
		WithOptions(controller.TypedOptions[poolpkg.ID]{MaxConcurrentReconciles: workers}).
		WatchesRawSource(source.TypedKind(cache, &resourceapi.ResourceSlice{}, r.sliceHandler())).
		WatchesRawSource(source.TypedKind(cache, &resourceapi.ResourceClaim{}, r.claimHandler())).
		WatchesRawSource(source.TypedKind(cache, nodes, r.nodeHandler())).
		WatchesRawSource(source.TypedKind(cache, &v1alpha1.DevicePool{}, r.devicePoolHandler())).
		WatchesRawSource(source.TypedKind(cache, &v1alpha1.DRAStack{}, r.stackHandler())).
		WatchesRawSource(source.TypedFunc[poolpkg.ID](r.resync))
	// DeviceTaintRules taint devices too, but the API server serves them
	// only with the DRADeviceTaintRules gate: watch them only when served,
	// or the cache would wait forever for an informer that cannot sync.
	switch _, err := mgr.GetRESTMapper().RESTMapping(resourceapi.SchemeGroupVersion.WithKind("DeviceTaintRule").GroupKind(), resourceapi.SchemeGroupVersion.Version); {
	case err == nil:
		bld = bld.WatchesRawSource(source.TypedKind(cache, &resourceapi.DeviceTaintRule{}, r.ruleHandler()))
	case meta.IsNoMatchError(err):
		logger.Info("resource.k8s.io/v1 DeviceTaintRule is not served (feature gate DRADeviceTaintRules); DevicePools count slice taints only")
	default:
		return fmt.Errorf("look up DeviceTaintRule in the API server: %w", err)
	}
	err := bld.Complete(r)
	if err != nil {
		return fmt.Errorf("build the %s controller: %w", ControllerName, err)
	}
	w := &stackWriter{client: mgr.GetClient(), board: r.board, interval: r.StackStatusInterval, now: r.now}
	if err := mgr.Add(w); err != nil {
		return fmt.Errorf("add the DRAStack pool status writer: %w", err)
	}
	return nil
}

func add(q queue, ids []poolpkg.ID) {
	for _, id := range ids {
		q.Add(id)
	}
}

// addBatched queues the pools after delay (at once when it is not
// positive). The queue keeps one entry per pool and the earliest time it
// was asked for, so every change within delay of a pool's first one is
// validated and written together.
func addBatched(q queue, ids []poolpkg.ID, delay time.Duration) {
	if delay <= 0 {
		add(q, ids)
		return
	}
	for _, id := range ids {
		q.AddAfter(id, delay)
	}
}

// batch returns a configured batching delay, or its default when unset.
func batch(configured, def time.Duration) time.Duration {
	if configured == 0 {
		return def
	}
	return configured
}

// addAll queues every pool at low priority (with controller-runtime's
// priority queue), so that a resync of 10,000 pools does not delay the
// pools that real events touch.
func addAll(q queue, ids []poolpkg.ID) {
	if pq, ok := q.(priorityqueue.PriorityQueue[poolpkg.ID]); ok {
		pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(handler.LowPriority)}, ids...)
		return
	}
	add(q, ids)
}

// allIDs is every pool with slices or with a DevicePool.
func (r *Reconciler) allIDs() []poolpkg.ID {
	ids := r.model.ids()
	seen := make(map[poolpkg.ID]struct{}, len(ids))
	for _, id := range ids {
		seen[id] = struct{}{}
	}
	for _, id := range r.board.ids() {
		if _, dup := seen[id]; !dup {
			ids = append(ids, id)
		}
	}
	return ids
}

type (
	sliceEvent  = handler.TypedFuncs[*resourceapi.ResourceSlice, poolpkg.ID]
	claimEvent  = handler.TypedFuncs[*resourceapi.ResourceClaim, poolpkg.ID]
	ruleEvent   = handler.TypedFuncs[*resourceapi.DeviceTaintRule, poolpkg.ID]
	metaEvent   = handler.TypedFuncs[*metav1.PartialObjectMetadata, poolpkg.ID]
	dpEvent     = handler.TypedFuncs[*v1alpha1.DevicePool, poolpkg.ID]
	stackEvents = handler.TypedFuncs[*v1alpha1.DRAStack, poolpkg.ID]
)

// sliceHandler follows ResourceSlices: the pools a slice event touched
// are validated SliceBatch later.
func (r *Reconciler) sliceHandler() handler.TypedEventHandler[*resourceapi.ResourceSlice, poolpkg.ID] {
	delay := batch(r.SliceBatch, DefaultSliceBatch)
	return sliceEvent{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*resourceapi.ResourceSlice], q queue) {
			if handover.IsCanarySlice(e.Object) {
				return
			}
			addBatched(q, r.model.upsertSlice(nil, e.Object), delay)
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*resourceapi.ResourceSlice], q queue) {
			if e.ObjectOld.ResourceVersion == e.ObjectNew.ResourceVersion {
				return // informer resync: nothing changed
			}
			switch oldCanary, newCanary := handover.IsCanarySlice(e.ObjectOld), handover.IsCanarySlice(e.ObjectNew); {
			case oldCanary && newCanary:
				return
			case newCanary:
				addBatched(q, r.model.deleteSlice(e.ObjectOld), delay)
			case oldCanary:
				addBatched(q, r.model.upsertSlice(nil, e.ObjectNew), delay)
			default:
				addBatched(q, r.model.upsertSlice(e.ObjectOld, e.ObjectNew), delay)
			}
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[*resourceapi.ResourceSlice], q queue) {
			if handover.IsCanarySlice(e.Object) {
				return
			}
			addBatched(q, r.model.deleteSlice(e.Object), delay)
		},
	}
}

// claimHandler follows allocations: the pools whose devices an
// allocation took or gave back are validated ClaimBatch later.
func (r *Reconciler) claimHandler() handler.TypedEventHandler[*resourceapi.ResourceClaim, poolpkg.ID] {
	delay := batch(r.ClaimBatch, DefaultClaimBatch)
	return claimEvent{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*resourceapi.ResourceClaim], q queue) {
			addBatched(q, r.model.upsertClaim(nil, e.Object), delay)
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*resourceapi.ResourceClaim], q queue) {
			addBatched(q, r.model.upsertClaim(e.ObjectOld, e.ObjectNew), delay)
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[*resourceapi.ResourceClaim], q queue) {
			addBatched(q, r.model.deleteClaim(e.Object), delay)
		},
	}
}

// ruleHandler follows DeviceTaintRules: a rule that appears, changes or
// goes queues the pools whose devices it may taint.
func (r *Reconciler) ruleHandler() handler.TypedEventHandler[*resourceapi.DeviceTaintRule, poolpkg.ID] {
	delay := batch(r.SliceBatch, DefaultSliceBatch)
	return ruleEvent{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*resourceapi.DeviceTaintRule], q queue) {
			addBatched(q, r.model.upsertRule(nil, e.Object), delay)
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*resourceapi.DeviceTaintRule], q queue) {
			if e.ObjectOld.Generation == e.ObjectNew.Generation {
				return // status only
			}
			addBatched(q, r.model.upsertRule(e.ObjectOld, e.ObjectNew), delay)
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[*resourceapi.DeviceTaintRule], q queue) {
			addBatched(q, r.model.deleteRule(e.Object), delay)
		},
	}
}

// nodeHandler follows which nodes exist (for the NodePresent condition of
// node-local pools); label and status changes do not matter.
func (r *Reconciler) nodeHandler() handler.TypedEventHandler[*metav1.PartialObjectMetadata, poolpkg.ID] {
	return metaEvent{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*metav1.PartialObjectMetadata], q queue) {
			add(q, r.model.setNode(e.Object.Name, true))
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[*metav1.PartialObjectMetadata], q queue) {
			add(q, r.model.setNode(e.Object.Name, false))
		},
	}
}

// devicePoolHandler queues the pool of a DevicePool that appears (at
// startup: one left from before, perhaps of a pool that is gone) or is
// deleted by someone (it is recreated). Updates are the controller's own
// status writes and are ignored.
func (r *Reconciler) devicePoolHandler() handler.TypedEventHandler[*v1alpha1.DevicePool, poolpkg.ID] {
	queueOwner := func(dp *v1alpha1.DevicePool, q queue) {
		if id, ok := idOf(dp.Annotations); ok {
			q.Add(id)
		}
	}
	return dpEvent{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*v1alpha1.DevicePool], q queue) {
			queueOwner(e.Object, q)
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[*v1alpha1.DevicePool], q queue) {
			if id, ok := idOf(e.Object.Annotations); ok {
				// Deleted by someone: created again at once.
				r.created.Delete(id)
			}
			queueOwner(e.Object, q)
		},
	}
}

// stackHandler reads spec.pools. A change of the grace period or of
// maxProblems changes every status, so every pool is queued; a new
// generation or a new DRAStack makes the pool status of the DRAStack due.
func (r *Reconciler) stackHandler() handler.TypedEventHandler[*v1alpha1.DRAStack, poolpkg.ID] {
	apply := func(st *v1alpha1.DRAStack, q queue) {
		if st != nil && st.Name != v1alpha1.DRAStackName {
			return
		}
		next := configFrom(st)
		old := r.cfg.Swap(&next)
		if old.affectsStatus(next) {
			addAll(q, r.allIDs())
		}
		if old.generation != next.generation || st == nil {
			r.board.markDirty()
		}
	}
	return stackEvents{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*v1alpha1.DRAStack], q queue) {
			apply(e.Object, q)
			r.board.markDirty()
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*v1alpha1.DRAStack], q queue) {
			apply(e.ObjectNew, q)
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[*v1alpha1.DRAStack], q queue) {
			if e.Object.Name == v1alpha1.DRAStackName {
				apply(nil, q)
			}
		},
	}
}

// resync queues every pool every spec.pools.resyncPeriod, to catch what
// events missed (and to refresh how long incomplete pools have been so).
// The period is read again after each round, so a changed spec applies
// from the next round on.
func (r *Reconciler) resync(ctx context.Context, q queue) error {
	go func() {
		for {
			t := time.NewTimer(r.config().resync)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			addAll(q, r.allIDs())
		}
	}()
	return nil
}
