package claims

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	claimspkg "github.com/drastack/drastack/internal/claims"
)

// EventGateRemoved is the reason of the Event on a pod whose gate the
// operator removed.
const EventGateRemoved = "AllocationGateRemoved"

// gateWorkers remove gates in parallel: each removal is one API write and
// they do not depend on each other.
const gateWorkers = 2

type (
	podEvents     = handler.TypedFuncs[*corev1.Pod, reconcile.Request]
	gateClaimEvts = handler.TypedFuncs[*resourceapi.ResourceClaim, reconcile.Request]
)

// gateReconciler removes the scheduling gate of pods whose claims the
// operator has allocated.
type gateReconciler struct {
	r *Reconciler
	// pods caches unscheduled pods only (spec.nodeName empty): a gated pod
	// is never scheduled, and a cluster's scheduled pods are far more
	// numerous than the operator needs to hold in memory.
	pods cache.Cache
}

// setupGate registers the gate loop with its own pod cache.
func (r *Reconciler) setupGate(mgr ctrl.Manager) error {
	pods, err := cache.New(mgr.GetConfig(), cache.Options{
		HTTPClient: mgr.GetHTTPClient(),
		Scheme:     mgr.GetScheme(),
		Mapper:     mgr.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Field: fields.OneTermEqualSelector("spec.nodeName", "")},
		},
	})
	if err != nil {
		return fmt.Errorf("create the cache of unscheduled pods: %w", err)
	}
	if err := mgr.Add(pods); err != nil {
		return fmt.Errorf("add the cache of unscheduled pods: %w", err)
	}
	r.pods = pods
	g := &gateReconciler{r: r, pods: pods}
	err = ctrl.NewControllerManagedBy(mgr).
		Named(GateControllerName).
		WithOptions(controller.Options{MaxConcurrentReconciles: gateWorkers}).
		WatchesRawSource(source.TypedKind(pods, &corev1.Pod{}, g.podHandler())).
		WatchesRawSource(source.TypedKind(mgr.GetCache(), &resourceapi.ResourceClaim{}, g.claimHandler())).
		WatchesRawSource(source.TypedKind(mgr.GetCache(), &v1alpha1.DRAStack{}, g.configHandler())).
		Complete(g)
	if err != nil {
		return fmt.Errorf("build the %s controller: %w", GateControllerName, err)
	}
	return nil
}

// Reconcile removes the gate of one pod when its claims are ready.
func (g *gateReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cfg, err := g.r.loadConfig(ctx)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("read the DRAStack: %w", err)
	}
	var pod corev1.Pod
	if err := g.pods.Get(ctx, req.NamespacedName, &pod); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !claimspkg.HasGate(&pod) {
		return ctrl.Result{}, nil
	}
	lookup := func(name string) (*resourceapi.ResourceClaim, bool) {
		var c resourceapi.ResourceClaim
		if err := g.r.Client.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: name}, &c); err != nil {
			return nil, false
		}
		return &c, true
	}
	v := claimspkg.Release(cfg, &pod, lookup)
	if !v.Release {
		log.FromContext(ctx).V(2).Info("Pod waits for its claims", "pod", req.NamespacedName, "waiting", v.Waiting)
		return ctrl.Result{}, nil
	}
	// A claim that just lost a race must not be reserved by this pod before
	// the claim loop took its allocation back; nor may one that can still
	// lose a race to a binding kube-scheduler had in flight when the
	// operator allocated it.
	for _, pc := range claimspkg.PodClaims(&pod) {
		c, ok := lookup(pc.ClaimName)
		if !ok || !movable(c) {
			continue
		}
		if wait, blockers := g.settling(c); wait > 0 {
			log.FromContext(ctx).V(1).Info("Pod waits for kube-scheduler's bindings in flight", "pod", req.NamespacedName, "claim", c.Name, "bindings", blockers)
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		if !g.r.raceChecked(c) {
			g.r.wakeRaces()
			return ctrl.Result{RequeueAfter: settlePoll}, nil
		}
		if g.r.suspect(c.UID) {
			log.FromContext(ctx).V(1).Info("Pod waits: its claim lost a race", "pod", req.NamespacedName, "claim", c.Name)
			return ctrl.Result{RequeueAfter: settlePoll}, nil
		}
	}
	orig := pod.DeepCopy()
	pod.Spec.SchedulingGates = claimspkg.WithoutGate(pod.Spec.SchedulingGates)
	if err := g.r.Client.Patch(ctx, &pod, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldManager)); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: retryNowDelay}, nil
		}
		return ctrl.Result{}, fmt.Errorf("remove the scheduling gate of pod %s: %w", req.NamespacedName, err)
	}
	if g.r.Recorder != nil {
		g.r.Recorder.Eventf(&pod, nil, corev1.EventTypeNormal, EventGateRemoved, "Release", "%s",
			shorten(fmt.Sprintf("removed scheduling gate %s: %s", claimspkg.SchedulingGate, releaseNote(cfg, orig))))
	}
	return ctrl.Result{}, nil
}

func releaseNote(cfg claimspkg.Config, pod *corev1.Pod) string {
	if !cfg.Active || !cfg.GatePods {
		return "gating is off (spec.claims.gatePods of the DRAStack)"
	}
	var names []string
	for _, pc := range claimspkg.PodClaims(pod) {
		if pc.ClaimName != "" {
			names = append(names, pc.ClaimName)
		}
	}
	return "claims allocated: " + strings.Join(names, ", ")
}

func (g *gateReconciler) podHandler() handler.TypedEventHandler[*corev1.Pod, reconcile.Request] {
	add := func(p *corev1.Pod, q queue) {
		if claimspkg.HasGate(p) {
			q.Add(request(p))
		}
	}
	return podEvents{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*corev1.Pod], q queue) {
			g.r.bindings.observe(e.Object, g.r.now())
			add(e.Object, q)
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*corev1.Pod], q queue) {
			g.r.bindings.observe(e.ObjectNew, g.r.now())
			add(e.ObjectNew, q)
		},
		// A pod leaves the cache of unscheduled pods when it is bound.
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[*corev1.Pod], _ queue) {
			g.r.bindings.forget(e.Object.UID)
		},
	}
}

// claimHandler queues the gated pods that use a claim that changed.
func (g *gateReconciler) claimHandler() handler.TypedEventHandler[*resourceapi.ResourceClaim, reconcile.Request] {
	users := func(ctx context.Context, c *resourceapi.ResourceClaim, q queue) {
		var pods corev1.PodList
		if err := g.pods.List(ctx, &pods, client.InNamespace(c.Namespace), client.UnsafeDisableDeepCopy); err != nil {
			log.FromContext(ctx).Error(err, "Listing pods of a changed claim failed", "claim", client.ObjectKeyFromObject(c))
			return
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if !claimspkg.HasGate(p) {
				continue
			}
			for _, pc := range claimspkg.PodClaims(p) {
				if pc.ClaimName == c.Name {
					q.Add(request(p))
					break
				}
			}
		}
	}
	return gateClaimEvts{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[*resourceapi.ResourceClaim], q queue) {
			users(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[*resourceapi.ResourceClaim], q queue) {
			if e.ObjectOld.ResourceVersion != e.ObjectNew.ResourceVersion {
				users(ctx, e.ObjectNew, q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[*resourceapi.ResourceClaim], q queue) {
			users(ctx, e.Object, q)
		},
	}
}

// configHandler queues every gated pod when the configuration changes:
// turning gating off (or deleting the DRAStack) releases them all.
func (g *gateReconciler) configHandler() handler.TypedEventHandler[*v1alpha1.DRAStack, reconcile.Request] {
	all := func(ctx context.Context, st *v1alpha1.DRAStack, q queue) {
		if st != nil && st.Name != v1alpha1.DRAStackName {
			return
		}
		g.r.setConfig(st)
		var pods corev1.PodList
		if err := g.pods.List(ctx, &pods, client.UnsafeDisableDeepCopy); err != nil {
			log.FromContext(ctx).Error(err, "Listing gated pods after a configuration change failed")
			return
		}
		for i := range pods.Items {
			if claimspkg.HasGate(&pods.Items[i]) {
				q.Add(request(&pods.Items[i]))
			}
		}
	}
	return configEvents{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[*v1alpha1.DRAStack], q queue) {
			all(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[*v1alpha1.DRAStack], q queue) {
			// Status writes of the other controllers change nothing here.
			if !claimspkg.ConfigFrom(e.ObjectOld).Equal(claimspkg.ConfigFrom(e.ObjectNew)) {
				all(ctx, e.ObjectNew, q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[*v1alpha1.DRAStack], q queue) { all(ctx, nil, q) },
	}
}
