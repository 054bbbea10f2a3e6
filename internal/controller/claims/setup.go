package claims

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/claimpolicy"
)

type (
	queue = workqueue.TypedRateLimitingInterface[reconcile.Request]
	// changeKind tells a handler what changed, for what it retriggers.
	changeKind int
)

const (
	changeDevices changeKind = iota // slices, nodes, rules, deallocations
	changeClasses                   // DeviceClasses
)

// claimWorkers is how many claims are written at once; placementWorkers
// how many pods are placed at once. Decisions are serialized on the
// ledger's turns and take microseconds; the API writes
// of each allocation take milliseconds to a second on a loaded API
// server, so many overlap. At 1,000 nodes (make bench-scale) a status
// write took 150 ms in a burst: 16 workers allocated 96 claims a second,
// 64 workers 127 (the API server's share of the two cores bound it then).
const (
	claimWorkers     = 64
	placementWorkers = 16
)

// DefaultStatusInterval is how often the DRAStack's claim status is
// recomputed; it is written only when it changed.
const DefaultStatusInterval = 2 * time.Second

// SetupWithManager registers the claim loop (immediate claims), the
// placement loop (pods), the taint loop (central devices) and the DRAStack
// status writer. Like the other controllers it does nothing on a cluster
// that does not serve resource.k8s.io/v1.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	logger := mgr.GetLogger().WithName(ControllerName)
	mapper := mgr.GetRESTMapper()
	if _, err := mapper.RESTMapping(resourceapi.SchemeGroupVersion.WithKind("ResourceClaim").GroupKind(), resourceapi.SchemeGroupVersion.Version); err != nil {
		if meta.IsNoMatchError(err) {
			logger.Info("resource.k8s.io/v1 is not served; claim allocation is off until the operator restarts on a cluster with DRA")
			return nil
		}
		return fmt.Errorf("look up ResourceClaim in the API server: %w", err)
	}
	r.init()
	if _, err := mapper.RESTMapping(resourceapi.SchemeGroupVersion.WithKind("DeviceTaintRule").GroupKind(), resourceapi.SchemeGroupVersion.Version); err == nil {
		r.taintRules = true
	} else if !meta.IsNoMatchError(err) {
		return fmt.Errorf("look up DeviceTaintRule in the API server: %w", err)
	} else {
		logger.Info("resource.k8s.io/v1 DeviceTaintRule is not served (feature gate DRADeviceTaintRules); only devices in slices the operator publishes can be central")
	}
	r.source.taintRules = r.taintRules
	if err := r.detectGangs(mapper, logger); err != nil {
		return err
	}
	if err := r.setupPodCache(mgr); err != nil {
		return err
	}
	mcache := mgr.GetCache()

	// A new allocation term queues everything once it is ready: decisions
	// taken before it returned ErrNotReady and were dropped.
	claimsReady, podsReady := make(chan event.GenericEvent), make(chan event.GenericEvent)
	claims := ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		WithOptions(controller.Options{MaxConcurrentReconciles: cmp.Or(r.Workers, claimWorkers)}).
		WatchesRawSource(source.TypedKind(mcache, &resourceapi.ResourceClaim{}, r.claimHandler(r.claims, true, r.claimRequests))).
		WatchesRawSource(source.TypedKind(mcache, &v1alpha1.DRAStack{}, r.configHandler(r.claims, r.allClaims))).
		WatchesRawSource(source.Channel(claimsReady, everything(r.allClaims)))
	claims = r.watchDevices(claims, mcache, r.claims)
	if err := claims.Complete(r); err != nil {
		return fmt.Errorf("build the %s controller: %w", ControllerName, err)
	}

	pl := &placementReconciler{r: r}
	placed := ctrl.NewControllerManagedBy(mgr).
		Named(PlacementControllerName).
		WithOptions(controller.Options{MaxConcurrentReconciles: placementWorkers}).
		WatchesRawSource(source.TypedKind(r.podCache.(cache.Cache), &corev1.Pod{}, r.podHandler())).
		WatchesRawSource(source.TypedKind(mcache, &resourceapi.ResourceClaim{}, r.claimHandler(r.pods, false, r.podsOfClaim))).
		WatchesRawSource(source.TypedKind(mcache, &v1alpha1.DRAStack{}, r.configHandler(r.pods, r.allPods))).
		WatchesRawSource(source.Channel(podsReady, everything(r.allPods)))
	placed = r.watchDevices(placed, mcache, r.pods)
	placed = r.watchGangs(placed, mcache)
	if err := placed.Complete(pl); err != nil {
		return fmt.Errorf("build the %s controller: %w", PlacementControllerName, err)
	}

	if r.taintRules {
		tr := &taintReconciler{r: r}
		one := func(context.Context, client.Object) []reconcile.Request { return []reconcile.Request{taintKey} }
		err := ctrl.NewControllerManagedBy(mgr).
			Named(TaintControllerName).
			// Status writes of the other controllers (about one a second
			// under load) change nothing the taint loop reads.
			Watches(&v1alpha1.DRAStack{}, handler.EnqueueRequestsFromMapFunc(one), builder.WithPredicates(predicate.Funcs{
				UpdateFunc: func(e event.UpdateEvent) bool {
					a, okA := e.ObjectOld.(*v1alpha1.DRAStack)
					b, okB := e.ObjectNew.(*v1alpha1.DRAStack)
					return !okA || !okB || configChanged(a, b) || !slices.Equal(a.Finalizers, b.Finalizers)
				},
			})).
			// The partition reads rules' spec and labels (whose they are),
			// slices' spec and nodes' labels; heartbeats and status writes
			// change none of them.
			Watches(&resourceapi.DeviceTaintRule{}, handler.EnqueueRequestsFromMapFunc(one),
				builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
			// A publication writes slices by the thousand and each
			// reconcile reads every slice and node: batched (taintBatch).
			Watches(&resourceapi.ResourceSlice{}, batched(), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
			// Central classes are restored when changed or deleted.
			Watches(&resourceapi.DeviceClass{}, handler.EnqueueRequestsFromMapFunc(one),
				builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
			Watches(&corev1.Node{}, batched(), builder.WithPredicates(predicate.LabelChangedPredicate{})).
			// A released allocation may end a hold (heldRules): the claim
			// handler that feeds the ledger says so once the ledger knows.
			WatchesRawSource(source.Channel(r.released, handler.EnqueueRequestsFromMapFunc(one))).
			WatchesRawSource(source.TypedKind(r.podCache.(cache.Cache), &corev1.Pod{}, handler.TypedEnqueueRequestsFromMapFunc(
				func(_ context.Context, p *corev1.Pod) []reconcile.Request {
					// Rules wait for gated pods when the configuration goes.
					if !r.cfg.get().Active && claimpolicy.HasGate(p) {
						return []reconcile.Request{taintKey}
					}
					return nil
				}))).
			Complete(tr)
		if err != nil {
			return fmt.Errorf("build the %s controller: %w", TaintControllerName, err)
		}
		// The join barrier of the pools the rules taint (join.go).
		if err := r.setupJoin(mgr, mcache); err != nil {
			return err
		}
	}
	if err := mgr.Add(&termRunner{r: r, ready: []chan event.GenericEvent{claimsReady, podsReady}}); err != nil {
		return fmt.Errorf("add the allocation term: %w", err)
	}
	if err := mgr.Add(&statusWriter{r: r, interval: r.StatusInterval}); err != nil {
		return fmt.Errorf("add the DRAStack claim status writer: %w", err)
	}
	return nil
}

// taintBatch is how long the taint loop waits after a slice or node
// change before it reconciles, taking in every change of that time. At
// 1,000 nodes a publication of 3,000 slices otherwise ran about as many
// reconciles back to back, each listing every slice and node (2 GB of
// allocations in make bench-scale); the rules wait for a new central
// pool that much longer, and nothing is allocated from a pool before its
// rule is in place.
const taintBatch = 200 * time.Millisecond

// batched queues the taint loop's one key taintBatch after any event.
func batched() handler.EventHandler {
	return handler.Funcs{
		CreateFunc:  func(_ context.Context, _ event.CreateEvent, q queue) { q.AddAfter(taintKey, taintBatch) },
		UpdateFunc:  func(_ context.Context, _ event.UpdateEvent, q queue) { q.AddAfter(taintKey, taintBatch) },
		DeleteFunc:  func(_ context.Context, _ event.DeleteEvent, q queue) { q.AddAfter(taintKey, taintBatch) },
		GenericFunc: func(_ context.Context, _ event.GenericEvent, q queue) { q.AddAfter(taintKey, taintBatch) },
	}
}

// setupPodCache makes the placement loop's own cache of pods. It keeps
// only what placement reads (a pod's scheduling fields, its claims and
// the resource requests of its containers), so holding every pod of a
// large cluster stays cheap; the manager's cache, which other controllers
// read whole pods from, is not touched.
func (r *Reconciler) setupPodCache(mgr ctrl.Manager) error {
	pods, err := cache.New(mgr.GetConfig(), cache.Options{
		HTTPClient: mgr.GetHTTPClient(),
		Scheme:     mgr.GetScheme(),
		Mapper:     mgr.GetRESTMapper(),
		ByObject:   map[client.Object]cache.ByObject{&corev1.Pod{}: {Transform: slimPod}},
	})
	if err != nil {
		return fmt.Errorf("create the pod cache of the placement loop: %w", err)
	}
	if err := mgr.Add(pods); err != nil {
		return fmt.Errorf("add the pod cache of the placement loop: %w", err)
	}
	r.podCache = pods
	return nil
}

// slimPod drops what placement never reads from a cached pod.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	// Only who wrote last and when stays of managedFields: the placement
	// loop counts kube-scheduler's verdicts after an allocation
	// (claimpolicy.Unschedulable).
	for i := range p.ManagedFields {
		p.ManagedFields[i].FieldsV1 = nil
	}
	// Only a gang's declaration stays of the annotations (gang.go).
	p.Annotations = gangAnnotations(p.Annotations)
	p.Spec.Volumes = nil
	slim := func(cs []corev1.Container) {
		for i := range cs {
			cs[i] = corev1.Container{Name: cs[i].Name, Resources: cs[i].Resources, RestartPolicy: cs[i].RestartPolicy}
		}
	}
	slim(p.Spec.Containers)
	slim(p.Spec.InitContainers)
	p.Spec.EphemeralContainers = nil
	p.Status.ContainerStatuses = nil
	p.Status.InitContainerStatuses = nil
	p.Status.EphemeralContainerStatuses = nil
	return p, nil
}

// everything queues what all lists, on any event.
func everything(all func(context.Context) []reconcile.Request) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request { return all(ctx) })
}

func request(c client.Object) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: c.GetNamespace(), Name: c.GetName()}}
}

// retriggerBurst is how many waiting claims or pods one change of the
// cluster brings forward, oldest first; the others keep their backoff. A
// change that frees a device helps the oldest waiters; bringing every
// waiter forward on every change reset all backoffs at once.
const retriggerBurst = 16

// retrigger queues what a book says a change of the cluster may help.
func retrigger(b *book, q queue, kind changeKind) {
	for i, key := range b.retriable(kind == changeClasses) {
		if i == retriggerBurst {
			return
		}
		q.Add(reconcile.Request{NamespacedName: key})
	}
}

// watchDevices adds the watches that change which devices exist or are
// free (slices, classes, nodes, DeviceTaintRules): each invalidates the
// engine session and retriggers what b is waiting on.
//
// The Create events a watch replays when it starts (IsInInitialList) only
// retrigger: every session is built from the synced caches, which hold
// those objects already, and invalidating for them threw away the session
// the new term had just built (beginTerm) once per object and loop.
func (r *Reconciler) watchDevices(bld *ctrl.Builder, c cache.Cache, b *book) *ctrl.Builder {
	changed := func(kind changeKind) func(q queue, invalidate bool) {
		return func(q queue, invalidate bool) {
			if invalidate {
				r.ledger.Invalidate()
			}
			retrigger(b, q, kind)
		}
	}
	// Slices and rules: only their spec reaches the engine, and the API
	// server bumps the generation exactly when it changes (a rule's status,
	// which kube-controller-manager writes, and metadata do not): each
	// rebuild of a session re-reads every slice.
	bld = bld.WatchesRawSource(source.TypedKind(c, &resourceapi.ResourceSlice{}, versionChanges[*resourceapi.ResourceSlice](changed(changeDevices), specChanged[*resourceapi.ResourceSlice]))).
		WatchesRawSource(source.TypedKind(c, &resourceapi.DeviceClass{}, versionChanges[*resourceapi.DeviceClass](changed(changeClasses),
			func(a, b *resourceapi.DeviceClass) bool { return a.Generation != b.Generation }))).
		WatchesRawSource(source.TypedKind(c, &corev1.Node{}, r.nodeChanges(b)))
	if r.taintRules {
		// A rule's join (an annotation, join.go) decides whether the
		// engine may allocate its pools, as its spec does.
		bld = bld.WatchesRawSource(source.TypedKind(c, &resourceapi.DeviceTaintRule{}, versionChanges[*resourceapi.DeviceTaintRule](changed(changeDevices),
			func(a, b *resourceapi.DeviceTaintRule) bool { return specChanged(a, b) || joinChanged(a, b) })))
	}
	return bld
}

// nodeChanges follows nodes. Heartbeats change nothing here. The engine
// reads a node's declared features and the labels that slices or the
// central entries select on (ledger.LabelsMatter): a change of those
// invalidates the session. A change of other labels (a pod's nodeSelector
// may read them) only retriggers placements; at 1,000 nodes the
// beta.kubernetes.io labels kube-controller-manager adds to new nodes
// otherwise rebuilt the session faster than it could be built. Placement alone reads cordons, taints and
// allocatable resources (internal/placement): a change of those only
// retriggers what waits, without rebuilding the engine's view (nodes
// tainted and untainted by the node lifecycle controller rebuilt it
// hundreds of times in a 100-node burst).
func (r *Reconciler) nodeChanges(b *book) handler.TypedEventHandler[*corev1.Node, reconcile.Request] {
	devices := func(q queue) {
		r.ledger.Invalidate()
		retrigger(b, q, changeDevices)
	}
	return handler.TypedFuncs[*corev1.Node, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*corev1.Node], q queue) {
			if e.IsInInitialList {
				retrigger(b, q, changeDevices) // see watchDevices
				return
			}
			devices(q)
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*corev1.Node], q queue) {
			old, cur := e.ObjectOld, e.ObjectNew
			switch {
			case old.ResourceVersion == cur.ResourceVersion:
			case !slices.Equal(old.Status.DeclaredFeatures, cur.Status.DeclaredFeatures) ||
				(!maps.Equal(old.Labels, cur.Labels) && r.ledger.LabelsMatter(old.Labels, cur.Labels)):
				devices(q)
			case !maps.Equal(old.Labels, cur.Labels) || old.Spec.Unschedulable != cur.Spec.Unschedulable || !equality.Semantic.DeepEqual(old.Spec.Taints, cur.Spec.Taints) ||
				!equality.Semantic.DeepEqual(old.Status.Allocatable, cur.Status.Allocatable):
				retrigger(b, q, changeDevices)
			}
		},
		DeleteFunc: func(_ context.Context, _ event.TypedDeleteEvent[*corev1.Node], q queue) { devices(q) },
	}
}

// specChanged: the object's generation moved, which the API server does
// for every change of the spec and for nothing else.
func specChanged[T client.Object](a, b T) bool { return a.GetGeneration() != b.GetGeneration() }

// versionChanges calls changed on every create and delete, and on updates
// that changed the object (a new resourceVersion and, when given, differ
// says so); invalidate is false for the creates of the initial list.
func versionChanges[T client.Object](changed func(q queue, invalidate bool), differ func(a, b T) bool) handler.TypedEventHandler[T, reconcile.Request] {
	return handler.TypedFuncs[T, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[T], q queue) { changed(q, !e.IsInInitialList) },
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[T], q queue) {
			if e.ObjectOld.GetResourceVersion() == e.ObjectNew.GetResourceVersion() {
				return
			}
			if differ == nil || differ(e.ObjectOld, e.ObjectNew) {
				changed(q, true)
			}
		},
		DeleteFunc: func(_ context.Context, _ event.TypedDeleteEvent[T], q queue) { changed(q, true) },
	}
}

// claimHandler keeps the ledger in step with every claim, queues what
// requests maps a changed claim to, and, when devices are freed (a
// deallocation or a deletion), retriggers what b waits on.
//
// Both loops watch claims; only the one with note set feeds the ledger,
// so that every claim event is noted once.
func (r *Reconciler) claimHandler(b *book, note bool, requests func(context.Context, *resourceapi.ResourceClaim) []reconcile.Request) handler.TypedEventHandler[*resourceapi.ResourceClaim, reconcile.Request] {
	add := func(ctx context.Context, c *resourceapi.ResourceClaim, q queue) {
		for _, req := range requests(ctx, c) {
			q.Add(req)
		}
	}
	return handler.TypedFuncs[*resourceapi.ResourceClaim, reconcile.Request]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[*resourceapi.ResourceClaim], q queue) {
			if note {
				r.ledger.Observe(e.Object)
				r.noteWaiting(e.Object)
			}
			add(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[*resourceapi.ResourceClaim], q queue) {
			old, cur := e.ObjectOld, e.ObjectNew
			if old.ResourceVersion == cur.ResourceVersion {
				return
			}
			if note {
				r.ledger.Observe(cur)
				r.noteWaiting(cur)
			}
			if old.Status.Allocation != nil && cur.Status.Allocation == nil {
				if note {
					r.noteReleased()
				}
				retrigger(b, q, changeDevices)
			}
			add(ctx, cur, q)
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[*resourceapi.ResourceClaim], q queue) {
			c := e.Object
			if note {
				r.ledger.ObserveDeleted(c)
				r.claims.forget(request(c).NamespacedName)
			}
			if c.Status.Allocation != nil {
				if note {
					r.noteReleased()
				}
				retrigger(b, q, changeDevices)
			}
			add(ctx, c, q)
		},
	}
}

// noteReleased tells the taint loop, after the ledger took in a released
// allocation, that a hold may have ended. One pending event is enough: it
// is handled after this release was noted.
func (r *Reconciler) noteReleased() {
	select {
	case r.released <- event.GenericEvent{}:
	default:
	}
}

// noteWaiting starts the latency clock of an immediate claim that needs
// an allocation when it reaches the operator, before it waits in the
// queue; the claim's reconcile, or its deletion, ends the entry.
func (r *Reconciler) noteWaiting(c *resourceapi.ResourceClaim) {
	if c.Status.Allocation == nil && c.DeletionTimestamp == nil && claimpolicy.IsImmediate(r.cfg.get(), c) {
		r.claims.markWaiting(request(c).NamespacedName, c.CreationTimestamp.Time, r.now())
	}
}

// claimRequests: the claim loop reconciles the operator's claims.
func (r *Reconciler) claimRequests(_ context.Context, c *resourceapi.ResourceClaim) []reconcile.Request {
	if claimpolicy.SelectClaim(r.cfg.get(), c) == claimpolicy.WhyNone {
		return nil
	}
	return []reconcile.Request{request(c)}
}

// podsOfClaim: the placement loop reconciles the unscheduled pods that use
// a claim.
func (r *Reconciler) podsOfClaim(ctx context.Context, c *resourceapi.ResourceClaim) []reconcile.Request {
	var pods corev1.PodList
	if err := r.podCache.List(ctx, &pods, client.InNamespace(c.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "Listing the pods of a changed claim failed", "claim", klogKey(c))
		return nil
	}
	var out []reconcile.Request
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName != "" {
			continue
		}
		for _, ref := range claimpolicy.PodClaims(p) {
			if ref.ClaimName == c.Name {
				out = append(out, request(p))
				break
			}
		}
	}
	return out
}

// podHandler queues unscheduled pods with claims; a pod that is bound or
// goes away changes what a node has left, so waiting pods are retried.
func (r *Reconciler) podHandler() handler.TypedEventHandler[*corev1.Pod, reconcile.Request] {
	relevant := func(p *corev1.Pod) bool { return p.Spec.NodeName == "" && len(p.Spec.ResourceClaims) > 0 }
	return handler.TypedFuncs[*corev1.Pod, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*corev1.Pod], q queue) {
			if relevant(e.Object) {
				q.Add(request(e.Object))
			}
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*corev1.Pod], q queue) {
			if relevant(e.ObjectNew) {
				q.Add(request(e.ObjectNew))
			}
			if e.ObjectOld.Spec.NodeName == "" && e.ObjectNew.Spec.NodeName != "" {
				r.forgetPod(request(e.ObjectNew).NamespacedName)
				r.nodes.forget(request(e.ObjectNew).NamespacedName)
			}
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[*corev1.Pod], q queue) {
			r.forgetPod(request(e.Object).NamespacedName)
			r.nodes.forget(request(e.Object).NamespacedName)
			if e.Object.Spec.NodeName != "" {
				retrigger(r.pods, q, changeDevices)
			}
		},
	}
}

// allClaims lists the operator's claims under the new configuration.
func (r *Reconciler) allClaims(ctx context.Context) []reconcile.Request {
	var claims resourceapi.ResourceClaimList
	if err := r.Client.List(ctx, &claims, client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "Listing claims after a configuration change failed")
		return nil
	}
	var out []reconcile.Request
	for i := range claims.Items {
		out = append(out, r.claimRequests(ctx, &claims.Items[i])...)
	}
	return out
}

// allPods lists every unscheduled pod with claims.
func (r *Reconciler) allPods(ctx context.Context) []reconcile.Request {
	var pods corev1.PodList
	if err := r.podCache.List(ctx, &pods, client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "Listing pods after a configuration change failed")
		return nil
	}
	var out []reconcile.Request
	for i := range pods.Items {
		if p := &pods.Items[i]; p.Spec.NodeName == "" && len(p.Spec.ResourceClaims) > 0 {
			out = append(out, request(p))
		}
	}
	return out
}

// configHandler follows spec.claims: a change clears the outcomes of b,
// invalidates the engine session (central devices may have moved) and
// queues everything all lists.
func (r *Reconciler) configHandler(b *book, all func(context.Context) []reconcile.Request) handler.TypedEventHandler[*v1alpha1.DRAStack, reconcile.Request] {
	apply := func(ctx context.Context, st *v1alpha1.DRAStack, q queue) {
		if st != nil && st.Name != v1alpha1.DRAStackName {
			return
		}
		// A session is served only under the configuration it was built
		// for (ledger.Source.Current); one for an older configuration is
		// dropped here, and one the warmer built for this configuration
		// stays.
		before := r.cfg.cur.Load()
		r.cfg.set(st)
		if r.cfg.cur.Load() != before {
			r.ledger.Invalidate()
		}
		b.clearOutcomes()
		for _, req := range all(ctx) {
			q.Add(req)
		}
	}
	return handler.TypedFuncs[*v1alpha1.DRAStack, reconcile.Request]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[*v1alpha1.DRAStack], q queue) {
			apply(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[*v1alpha1.DRAStack], q queue) {
			// Status writes of the other controllers change nothing here.
			if configChanged(e.ObjectOld, e.ObjectNew) {
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

// configChanged says whether a DRAStack update changed what the claim
// controller reads of it: the claim configuration or the drivers it
// publishes (status writes of the other controllers do not).
func configChanged(old, cur *v1alpha1.DRAStack) bool {
	return !claimpolicy.ConfigFrom(old).Equal(claimpolicy.ConfigFrom(cur)) || !sameMultiHost(old, cur)
}

// sameMultiHost: the drivers the operator publishes did not change.
func sameMultiHost(a, b *v1alpha1.DRAStack) bool {
	return slices.Equal(multiHostDrivers(a), multiHostDrivers(b))
}
