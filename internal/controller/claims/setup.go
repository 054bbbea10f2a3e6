package claims

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	claimspkg "github.com/drastack/drastack/internal/claims"
)

type (
	queue        = workqueue.TypedRateLimitingInterface[reconcile.Request]
	claimEvents  = handler.TypedFuncs[*resourceapi.ResourceClaim, reconcile.Request]
	sliceEvents  = handler.TypedFuncs[*resourceapi.ResourceSlice, reconcile.Request]
	classEvents  = handler.TypedFuncs[*resourceapi.DeviceClass, reconcile.Request]
	nodeEvents   = handler.TypedFuncs[*corev1.Node, reconcile.Request]
	configEvents = handler.TypedFuncs[*v1alpha1.DRAStack, reconcile.Request]
)

// SetupWithManager registers the claim loop, the race watch, the gate loop
// and the DRAStack status writer. Like the other controllers it does
// nothing on a cluster that does not serve resource.k8s.io/v1.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	logger := mgr.GetLogger().WithName(ControllerName)
	if _, err := mgr.GetRESTMapper().RESTMapping(resourceapi.SchemeGroupVersion.WithKind("ResourceClaim").GroupKind(), resourceapi.SchemeGroupVersion.Version); err != nil {
		if meta.IsNoMatchError(err) {
			logger.Info("resource.k8s.io/v1 is not served; claim allocation is off until the operator restarts on a cluster with DRA")
			return nil
		}
		return fmt.Errorf("look up ResourceClaim in the API server: %w", err)
	}
	r.init()
	cache := mgr.GetCache()
	// Several workers: allocation decisions are serialized on the engine
	// session (see snapshot), the two API writes per claim, which take
	// far longer, overlap.
	err := ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		WithOptions(controller.Options{MaxConcurrentReconciles: claimWorkers}).
		WatchesRawSource(source.TypedKind(cache, &resourceapi.ResourceClaim{}, r.claimHandler())).
		WatchesRawSource(source.TypedKind(cache, &resourceapi.ResourceSlice{}, r.sliceHandler())).
		WatchesRawSource(source.TypedKind(cache, &resourceapi.DeviceClass{}, r.classHandler())).
		WatchesRawSource(source.TypedKind(cache, &corev1.Node{}, r.nodeHandler())).
		WatchesRawSource(source.TypedKind(cache, &v1alpha1.DRAStack{}, r.configHandler())).
		WatchesRawSource(source.TypedFunc[reconcile.Request](r.watchRaces)).
		Complete(r)
	if err != nil {
		return fmt.Errorf("build the %s controller: %w", ControllerName, err)
	}
	if err := r.setupGate(mgr); err != nil {
		return err
	}
	if err := mgr.Add(&statusWriter{r: r, interval: r.StatusInterval}); err != nil {
		return fmt.Errorf("add the DRAStack claim status writer: %w", err)
	}
	return nil
}

func request(c client.Object) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: c.GetNamespace(), Name: c.GetName()}}
}

// retrigger queues the claims a change of the cluster may help.
func (r *Reconciler) retrigger(q queue, classChanged bool) {
	for _, key := range r.retriable(classChanged) {
		q.Add(reconcile.Request{NamespacedName: key})
	}
}

// claimHandler keeps the snapshot in step with every claim and queues the
// operator's claims. A deallocation or deletion frees devices, so the
// claims that wait for devices are tried again.
func (r *Reconciler) claimHandler() handler.TypedEventHandler[*resourceapi.ResourceClaim, reconcile.Request] {
	ours := func(c *resourceapi.ResourceClaim) bool {
		return claimspkg.SelectClaim(r.config(), c) != claimspkg.WhyNone
	}
	return claimEvents{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*resourceapi.ResourceClaim], q queue) {
			c := e.Object
			r.snap.noteClaim(nil, c)
			if c.Status.Allocation != nil {
				r.wakeRaces()
			}
			if ours(c) {
				if c.Status.Allocation == nil {
					r.markWaiting(request(c).NamespacedName, r.now())
				}
				q.Add(request(c))
			}
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*resourceapi.ResourceClaim], q queue) {
			old, cur := e.ObjectOld, e.ObjectNew
			if old.ResourceVersion == cur.ResourceVersion {
				return
			}
			r.snap.noteClaim(old, cur)
			switch {
			case old.Status.Allocation != nil && cur.Status.Allocation == nil:
				r.retrigger(q, false)
				r.wakeRaces() // holds of this keeper may be stale now
				if ours(cur) {
					r.markWaiting(request(cur).NamespacedName, r.now())
				}
			case old.Status.Allocation == nil && cur.Status.Allocation != nil:
				r.wakeRaces()
			}
			if ours(cur) || ours(old) {
				q.Add(request(cur))
			}
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[*resourceapi.ResourceClaim], q queue) {
			c := e.Object
			r.snap.noteDeleted(c)
			r.forget(request(c).NamespacedName)
			r.clearSuspect(c.UID)
			r.mu.Lock()
			delete(r.bypassed, c.UID)
			r.mu.Unlock()
			if c.Status.Allocation != nil {
				r.retrigger(q, false)
				r.wakeRaces()
			}
		},
	}
}

// sliceHandler: a new or changed slice (a new pool generation, more
// devices) may satisfy waiting claims.
func (r *Reconciler) sliceHandler() handler.TypedEventHandler[*resourceapi.ResourceSlice, reconcile.Request] {
	changed := func(q queue) {
		r.snap.slicesChanged()
		r.retrigger(q, false)
		r.wakeRaces()
	}
	return sliceEvents{
		CreateFunc: func(_ context.Context, _ event.TypedCreateEvent[*resourceapi.ResourceSlice], q queue) { changed(q) },
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*resourceapi.ResourceSlice], q queue) {
			if e.ObjectOld.ResourceVersion != e.ObjectNew.ResourceVersion {
				changed(q)
			}
		},
		DeleteFunc: func(_ context.Context, _ event.TypedDeleteEvent[*resourceapi.ResourceSlice], q queue) { changed(q) },
	}
}

// classHandler: a class that appears may fix a claim that named it.
func (r *Reconciler) classHandler() handler.TypedEventHandler[*resourceapi.DeviceClass, reconcile.Request] {
	changed := func(q queue) {
		r.snap.invalidate()
		r.retrigger(q, true)
	}
	return classEvents{
		CreateFunc: func(_ context.Context, _ event.TypedCreateEvent[*resourceapi.DeviceClass], q queue) { changed(q) },
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*resourceapi.DeviceClass], q queue) {
			if e.ObjectOld.Generation != e.ObjectNew.Generation {
				changed(q)
			}
		},
		DeleteFunc: func(_ context.Context, _ event.TypedDeleteEvent[*resourceapi.DeviceClass], q queue) { changed(q) },
	}
}

// nodeHandler: nodes that come and go, or whose labels change, change
// which devices node selectors reach. Status updates (heartbeats) do not.
func (r *Reconciler) nodeHandler() handler.TypedEventHandler[*corev1.Node, reconcile.Request] {
	changed := func(q queue) {
		r.snap.invalidate()
		r.retrigger(q, false)
	}
	return nodeEvents{
		CreateFunc: func(_ context.Context, _ event.TypedCreateEvent[*corev1.Node], q queue) { changed(q) },
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*corev1.Node], q queue) {
			if !maps.Equal(e.ObjectOld.Labels, e.ObjectNew.Labels) {
				changed(q)
			}
		},
		DeleteFunc: func(_ context.Context, _ event.TypedDeleteEvent[*corev1.Node], q queue) { changed(q) },
	}
}

// configHandler follows spec.claims: a change queues every claim the
// operator allocates under the new configuration (and clears outcomes
// that depended on the old engine).
func (r *Reconciler) configHandler() handler.TypedEventHandler[*v1alpha1.DRAStack, reconcile.Request] {
	apply := func(ctx context.Context, st *v1alpha1.DRAStack, q queue) {
		if st != nil && st.Name != v1alpha1.DRAStackName {
			return
		}
		cfg := r.setConfig(st)
		r.mu.Lock()
		clear(r.failures)
		r.mu.Unlock()
		var claims resourceapi.ResourceClaimList
		if err := r.Client.List(ctx, &claims, client.UnsafeDisableDeepCopy); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Listing claims after a configuration change failed")
			return
		}
		for i := range claims.Items {
			if claimspkg.SelectClaim(cfg, &claims.Items[i]) != claimspkg.WhyNone {
				q.Add(request(&claims.Items[i]))
			}
		}
	}
	return configEvents{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[*v1alpha1.DRAStack], q queue) {
			apply(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[*v1alpha1.DRAStack], q queue) {
			// Status writes of the other controllers change nothing here.
			if !claimspkg.ConfigFrom(e.ObjectOld).Equal(claimspkg.ConfigFrom(e.ObjectNew)) {
				apply(ctx, e.ObjectNew, q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[*v1alpha1.DRAStack], q queue) {
			if e.Object.Name == v1alpha1.DRAStackName {
				apply(ctx, nil, q)
			}
		},
	}
}

// claimWorkers is how many claims are written at once.
const claimWorkers = 4

// DefaultStatusInterval is how often the DRAStack's claim status is
// recomputed; it is written only when it changed.
const DefaultStatusInterval = 2 * time.Second
