package publisher

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/controller/specgate"
	"github.com/drastack/drastack/internal/controller/statusapply"
	"github.com/drastack/drastack/internal/note"
)

// FieldManager owns status.multiHost; no other controller writes it.
const FieldManager = "drastack-publisher"

// invalidRecheck is when an invalid spec is checked again without an
// event: what made it invalid may be a namespace, which is not watched.
const invalidRecheck = 5 * time.Second

// retireCheckInterval is how often a driver that left the spec is checked
// for remaining slices before its controller is stopped. The library
// removes them within a second or two; a few seconds keep the check cheap.
const retireCheckInterval = 2 * time.Second

// Reconciler publishes the multi-host pools of the DRAStack. It reconciles
// only the singleton DRAStack; every Node change that can change a pool
// (added, removed, relabelled, cordoned) enqueues it.
type Reconciler struct {
	// Client reads the DRAStack and Nodes (from the manager's cache) and
	// writes status.
	Client client.Client
	// KubeClient is what the resourceslice library publishes with, and
	// what retiring drivers are checked with.
	KubeClient kubernetes.Interface
	// Recorder emits Events on the DRAStack; nil disables them.
	Recorder events.EventRecorder
	// Gate is the whole-spec check: the pools of an invalid spec are not
	// published (see Reconcile). Nil: every spec is acted on (tests).
	Gate *specgate.Gate

	drivers drivers
	cancel  context.CancelFunc

	mu sync.Mutex
	// stack is the DRAStack the library's errors are reported on.
	stack *v1alpha1.DRAStack
	// lastError is the last publishing error reported per driver, so that
	// a retried failure is one Event, not one per retry.
	lastError map[string]string
}

// RBAC of the multi-host publisher; each marker says which code needs it.
//
// reconciler.go Reconcile and SetupWithManager For (cache).
// +kubebuilder:rbac:groups=drastack.io,resources=drastacks,verbs=get;list;watch
// reconciler.go Reconcile: statusapply.Apply, server-side apply of
// status.multiHost.
// +kubebuilder:rbac:groups=drastack.io,resources=drastacks/status,verbs=patch
// reconciler.go Reconcile and SetupWithManager Watches (cache).
// +kubebuilder:rbac:groups="",resources=nodes,verbs=list;watch
// drivers.go start: the resourceslice library
// (k8s.io/dynamic-resource-allocation/resourceslice) lists and watches its
// driver's slices and creates, updates and deletes them (it never patches,
// and reads no Node for a DRAStack owner); reconciler.go nodelessSlices
// lists. Slices are created with an ownerReference to the DRAStack, which
// the OwnerReferencesPermissionEnforcement admission plugin allows only a
// client that may delete them.
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceslices,verbs=list;watch;create;update;delete
// events.go recordChanges and reconciler.go publishError: Recorder
// (events.k8s.io/v1 through the manager's event broadcaster).
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile publishes what spec.multiHost and the Nodes describe and
// reports it. It is level based: the desired pools are computed from
// scratch every time and handed to the library, which writes only what
// differs from the slices that exist.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if req.Name != v1alpha1.DRAStackName {
		// Only the singleton is acted on; the stack reconciler reports
		// any other.
		return ctrl.Result{}, nil
	}
	logger := log.FromContext(ctx)
	var st v1alpha1.DRAStack
	if err := r.Client.Get(ctx, req.NamespacedName, &st); err != nil {
		if apierrors.IsNotFound(err) {
			r.drivers.stop()
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get DRAStack %s: %w", req.Name, err)
	}
	if st.DeletionTimestamp != nil {
		// The garbage collector removes the slices with their owner; a
		// running controller would put them back.
		r.drivers.stop()
		return ctrl.Result{}, nil
	}
	if r.Gate != nil {
		v, err := r.Gate.Check(ctx, &st, specgate.What{})
		if err != nil {
			return ctrl.Result{}, err
		}
		if !v.Valid() {
			// An invalid spec changes nothing that runs: the library
			// controllers keep publishing the pools of the last valid
			// spec, as they were (restarted, the operator starts none, and
			// the slices stay as they are). SpecValid says why.
			logger.Info("The spec is invalid; the published pools stay as they are until it is valid", "generation", st.Generation)
			cond := publishedCondition(st.Generation, false, nil, nil)
			if err := r.writeStatus(ctx, &st, st.Status.MultiHost, cond); err != nil {
				return ctrl.Result{}, err
			}
			return ctrl.Result{RequeueAfter: invalidRecheck}, nil
		}
	}
	r.remember(&st)

	var nodes corev1.NodeList
	// Compute only reads them; a deep copy of every node per reconcile
	// was a fifth of the operator's CPU at 1,000 nodes.
	if err := r.Client.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, fmt.Errorf("list nodes: %w", err)
	}
	desired := Compute(st.Spec.MultiHost, nodes.Items)
	TaintCentral(&desired, st.Spec.Claims.Central)
	owner := ownerOf(v1alpha1.GroupVersion.String(), "DRAStack", st.Name, st.UID)
	retiring, startErr := r.drivers.apply(owner, desired.Drivers)
	logger.V(1).Info("Desired multi-host pools handed to the publisher", "drivers", len(desired.Drivers), "pools", len(desired.Summaries), "retiring", retiring)

	var result ctrl.Result
	var stillRetiring []string
	for _, driver := range retiring {
		n, err := r.nodelessSlices(ctx, driver)
		if err != nil {
			return ctrl.Result{}, err
		}
		if n == 0 {
			r.drivers.retire(driver)
			logger.Info("Stopped publishing for a driver that left spec.multiHost", "driver", driver)
			continue
		}
		stillRetiring = append(stillRetiring, driver)
		result.RequeueAfter = retireCheckInterval
	}

	r.recordChanges(&st, desired.Status)
	cond := publishedCondition(st.Generation, true, stillRetiring, startErr)
	if err := r.writeStatus(ctx, &st, desired.Status, cond); err != nil {
		return ctrl.Result{}, err
	}
	if startErr != nil {
		return ctrl.Result{}, startErr
	}
	return result, nil
}

// writeStatus applies status.multiHost and the MultiHostPublished
// condition when either changed. Only the fields this manager owns are
// written; an empty multiHost releases it when the spec has no entry left.
func (r *Reconciler) writeStatus(ctx context.Context, st *v1alpha1.DRAStack, multiHost []v1alpha1.MultiHostStatus, cond metav1.Condition) error {
	prev := meta.FindStatusCondition(st.Status.Conditions, ConditionPublished)
	if apiequality.Semantic.DeepEqual(st.Status.MultiHost, multiHost) && prev != nil &&
		prev.Status == cond.Status && prev.Reason == cond.Reason && prev.Message == cond.Message && prev.ObservedGeneration == cond.ObservedGeneration {
		return nil
	}
	conds := statusapply.KeepTransitionTimes(st.Status.Conditions, []metav1.Condition{cond}, metav1.Now())
	status := map[string]any{"conditions": conds}
	if len(multiHost) > 0 {
		status["multiHost"] = multiHost
	}
	err := statusapply.Apply(ctx, r.Client, v1alpha1.GroupVersion.String(), "DRAStack", "", st.Name, FieldManager, status)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// ConditionPublished is the publisher's condition on the DRAStack: which
// generation of spec.multiHost it acted on. True with reason Published
// once the pools of that generation are handed to the library and no
// driver that left the spec still has slices (Retiring until then); False
// with reason SpecInvalid while the spec is held (nothing new published),
// or StartFailed when a driver's publishing could not start.
const ConditionPublished = "MultiHostPublished"

// Reasons of ConditionPublished.
const (
	ReasonPublished   = "Published"
	ReasonRetiring    = "Retiring"
	ReasonSpecInvalid = "SpecInvalid"
	ReasonStartFailed = "StartFailed"
)

// publishedCondition says what the publisher did with a generation.
func publishedCondition(generation int64, valid bool, retiring []string, startErr error) metav1.Condition {
	c := metav1.Condition{Type: ConditionPublished, ObservedGeneration: generation}
	switch {
	case !valid:
		c.Status, c.Reason = metav1.ConditionFalse, ReasonSpecInvalid
		c.Message = "the spec is invalid (see SpecValid): the pools of the last valid spec stay published as they are"
	case startErr != nil:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, ReasonStartFailed, note.Shorten(startErr.Error(), maxNote)
	case len(retiring) > 0:
		c.Status, c.Reason = metav1.ConditionTrue, ReasonRetiring
		c.Message = "removing the slices of " + strings.Join(retiring, ", ") + ", which left spec.multiHost"
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, ReasonPublished, "the pools of spec.multiHost are published as the spec says"
	}
	return c
}

// nodelessSlices counts the slices of a driver that the library owns.
func (r *Reconciler) nodelessSlices(ctx context.Context, driver string) (int, error) {
	sel := fields.Set{
		resourceapi.ResourceSliceSelectorDriver:   driver,
		resourceapi.ResourceSliceSelectorNodeName: "",
	}.String()
	list, err := r.KubeClient.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return 0, fmt.Errorf("list node-less slices of driver %s: %w", driver, err)
	}
	return len(list.Items), nil
}

// remember keeps the DRAStack for Events about publishing errors, which
// arrive from the library's goroutines, and forgets past errors: a new
// desired state deserves a fresh report.
func (r *Reconciler) remember(st *v1alpha1.DRAStack) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stack = &v1alpha1.DRAStack{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "DRAStack"},
		ObjectMeta: metav1.ObjectMeta{Name: st.Name, UID: st.UID},
	}
	r.lastError = nil
}

// publishError is the library's ErrorHandler: it logs every error and
// emits one Warning Event per distinct error of a driver.
func (r *Reconciler) publishError(ctx context.Context, driver string, err error, msg string) {
	klog.FromContext(ctx).Error(err, "Publishing multi-host slices failed", "driver", driver, "operation", msg)
	r.mu.Lock()
	defer r.mu.Unlock()
	text := fmt.Sprintf("%s: %v", msg, err)
	if r.lastError[driver] == text || r.stack == nil || r.Recorder == nil {
		return
	}
	if r.lastError == nil {
		r.lastError = map[string]string{}
	}
	r.lastError[driver] = text
	r.Recorder.Eventf(r.stack, nil, corev1.EventTypeWarning, EventPublishFailed, "Publish", "driver %s: %s", driver, truncateNote(text))
}

// SetupWithManager registers the reconciler and a runnable that stops the
// library's controllers when the manager stops.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.KubeClient == nil {
		return fmt.Errorf("publisher: KubeClient is required")
	}
	base, cancel := context.WithCancel(klog.NewContext(context.Background(), mgr.GetLogger().WithName("multihost-publisher")))
	r.cancel = cancel
	r.drivers = drivers{kube: r.KubeClient, base: base, onError: r.publishError}
	if err := mgr.Add(stopper{r}); err != nil {
		cancel()
		return fmt.Errorf("add publisher shutdown hook: %w", err)
	}
	toStack := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: v1alpha1.DRAStackName}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		// Status writes (ours and other controllers') do not change what
		// is published.
		For(&v1alpha1.DRAStack{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Node{}, toStack, builder.WithPredicates(hostChanged())).
		Named("multihost-publisher").
		Complete(r)
}

// stopper stops the library's controllers on manager shutdown. Published
// slices stay: a restarted operator adopts them.
type stopper struct{ r *Reconciler }

func (s stopper) Start(ctx context.Context) error {
	<-ctx.Done()
	s.r.drivers.stop()
	s.r.cancel()
	return nil
}

// NeedLeaderElection is false: stopping is needed whether or not this
// replica leads.
func (stopper) NeedLeaderElection() bool { return false }

// hostChanged passes Node events that can change a pool: creation,
// deletion, labels, cordoning and the start of a deletion. Status
// heartbeats, which are most Node updates, are dropped.
func hostChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			oldNode, ok1 := e.ObjectOld.(*corev1.Node)
			newNode, ok2 := e.ObjectNew.(*corev1.Node)
			if !ok1 || !ok2 {
				return true
			}
			return !apiequality.Semantic.DeepEqual(oldNode.Labels, newNode.Labels) ||
				oldNode.Spec.Unschedulable != newNode.Spec.Unschedulable ||
				(oldNode.DeletionTimestamp == nil) != (newNode.DeletionTimestamp == nil)
		},
	}
}
