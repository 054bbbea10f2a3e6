package claims

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/central"
	"github.com/drastack/drastack/internal/claimpolicy"
)

// The taint loop owns the DeviceTaintRules that keep kube-scheduler off
// central devices: it creates, updates and deletes only rules labelled as
// the operator's (central.Owned). It reads them from the manager's cache.
// +kubebuilder:rbac:groups=resource.k8s.io,resources=devicetaintrules,verbs=list;watch;create;patch;delete
// It holds the DRAStack with a finalizer while rules exist (patch).
// +kubebuilder:rbac:groups=drastack.io,resources=drastacks,verbs=patch

// taintKey is the only request of the taint loop: it converges every rule
// at once, since one spec change can move many.
var taintKey = reconcile.Request{NamespacedName: client.ObjectKey{Name: "central"}}

// EventTaintRules is the reason of the Events on the DRAStack when the
// operator's DeviceTaintRules change.
const EventTaintRules = "CentralDevicesTainted"

// CleanupFinalizer holds a DRAStack while the operator's DeviceTaintRules
// exist. The rules are owned by the DRAStack, so that they go with it
// even when the operator is gone; without the finalizer, deleting the
// DRAStack would let the garbage collector remove them while pods still
// carry the gate or an allocation is being written. With it, the taint
// loop removes them in order (gates lifted, allocations drained) and then
// lets the DRAStack go.
const CleanupFinalizer = "drastack.io/claims-cleanup"

// taintReconciler keeps the DeviceTaintRules of spec.claims.central in
// place (central.Partition.TaintRules).
type taintReconciler struct {
	r *Reconciler
}

// Reconcile converges the operator's rules. When the configuration goes
// away, the rules go only once no pod carries the operator's gate: the
// placement loop lifts every gate first, and until then the devices stay
// out of kube-scheduler's reach, so it never allocates an operator claim
// without its constraints.
func (t *taintReconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	r := t.r
	stack, cfg, err := r.loadStack(ctx)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("read the DRAStack: %w", err)
	}
	haveStack := stack != nil
	var existing resourceapi.DeviceTaintRuleList
	if err := r.Client.List(ctx, &existing); err != nil {
		return ctrl.Result{}, fmt.Errorf("list DeviceTaintRules: %w", err)
	}
	var desired []resourceapi.DeviceTaintRule
	switch {
	case cfg.Active && len(cfg.Central) > 0:
		part, err := t.partition(ctx, cfg)
		if err != nil {
			// SpecValid of the DRAStack names the field; keep what is.
			log.FromContext(ctx).Info("Central devices not updated: the spec is invalid", "err", err)
			return ctrl.Result{}, nil
		}
		desired = part.TaintRules()
		if len(desired) > 0 {
			// Before the first rule exists, so that no rule is ever
			// left to the garbage collector alone.
			if err := t.setFinalizer(ctx, stack, true); err != nil {
				return ctrl.Result{}, err
			}
		}
	case cfg.Active:
		// No central entry left: nothing is central, whatever pods wait
		// (their claims now need devices the spec no longer names).
	default:
		// The DRAStack is gone or going: the placement loop lifts every
		// gate; the rules go after the last one.
		gated, err := t.gatedPods(ctx)
		if err != nil || gated > 0 {
			log.FromContext(ctx).V(1).Info("DeviceTaintRules stay until no pod is gated", "gated", gated)
			return ctrl.Result{}, err
		}
	}
	diff, conflicts := central.DiffTaintRules(desired, existing.Items)
	if len(conflicts) > 0 && haveStack {
		r.event(stack, corev1.EventTypeWarning, EventTaintRules, "Taint", "DeviceTaintRules %s exist but are not the operator's; their devices are not central", strings.Join(conflicts, ", "))
	}
	// Owned by the DRAStack, so that they go with it even when the
	// operator is gone; CleanupFinalizer keeps the DRAStack, and so the
	// rules, until the operator has lifted the gates. No
	// blockOwnerDeletion: nothing waits for the rules.
	var owner []metav1.OwnerReference
	if haveStack && cfg.Active {
		ref := metav1.NewControllerRef(stack, v1alpha1.GroupVersion.WithKind("DRAStack"))
		ref.BlockOwnerDeletion = nil
		owner = []metav1.OwnerReference{*ref}
	}
	for i := range diff.Create {
		rule := &diff.Create[i]
		rule.OwnerReferences = owner
		if err := r.Client.Create(ctx, rule, client.FieldOwner(FieldManager)); err != nil && !apierrors.IsAlreadyExists(err) {
			return ctrl.Result{}, fmt.Errorf("create DeviceTaintRule %s: %w", rule.Name, err)
		}
	}
	if len(diff.Update) > 0 || len(diff.Delete) > 0 {
		// An update can narrow a rule: devices leave the partition as
		// surely as with a delete. Every allocation decided under the
		// configuration that still named them ends first.
		r.decisions.drain()
	}
	for i := range diff.Update {
		rule := &diff.Update[i]
		var cur resourceapi.DeviceTaintRule
		if err := r.Client.Get(ctx, client.ObjectKeyFromObject(rule), &cur); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		upd := cur.DeepCopy()
		upd.Labels, upd.Spec = rule.Labels, rule.Spec
		if err := r.Client.Patch(ctx, upd, optimistic(&cur), client.FieldOwner(FieldManager)); err != nil && !apierrors.IsConflict(err) {
			return ctrl.Result{}, fmt.Errorf("update DeviceTaintRule %s: %w", rule.Name, err)
		}
	}
	for i := range diff.Delete {
		rule := &diff.Delete[i]
		if err := r.Client.Delete(ctx, rule, client.Preconditions{UID: &rule.UID}); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("delete DeviceTaintRule %s: %w", rule.Name, err)
		}
	}
	if !diff.Empty() {
		r.snap.invalidate()
		log.FromContext(ctx).Info("Central devices tainted", "created", len(diff.Create), "updated", len(diff.Update), "deleted", len(diff.Delete))
		if haveStack {
			r.event(stack, corev1.EventTypeNormal, EventTaintRules, "Taint", "DeviceTaintRules for central devices: %d created, %d updated, %d deleted",
				len(diff.Create), len(diff.Update), len(diff.Delete))
		}
	}
	if len(desired) == 0 && ownedRules(existing.Items) == len(diff.Delete) {
		// No rule of the operator is left: nothing holds the DRAStack.
		return ctrl.Result{}, t.setFinalizer(ctx, stack, false)
	}
	return ctrl.Result{}, nil
}

// ownedRules counts the operator's rules among rules.
func ownedRules(rules []resourceapi.DeviceTaintRule) int {
	n := 0
	for i := range rules {
		if central.Owned(&rules[i]) {
			n++
		}
	}
	return n
}

// setFinalizer adds or removes CleanupFinalizer with a merge patch that
// carries the resourceVersion (a conflict is retried by the queue, with
// the DRAStack read again). A nil stack, or one already as wanted, is
// left alone; a terminating DRAStack never gets the finalizer back.
func (t *taintReconciler) setFinalizer(ctx context.Context, stack *v1alpha1.DRAStack, on bool) error {
	if stack == nil || controllerutil.ContainsFinalizer(stack, CleanupFinalizer) == on || (on && stack.DeletionTimestamp != nil) {
		return nil
	}
	upd := stack.DeepCopy()
	if on {
		controllerutil.AddFinalizer(upd, CleanupFinalizer)
	} else {
		controllerutil.RemoveFinalizer(upd, CleanupFinalizer)
	}
	if err := t.r.Client.Patch(ctx, upd, optimistic(stack), client.FieldOwner(FieldManager)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("%s finalizer %s of DRAStack %s: %w", map[bool]string{true: "add", false: "remove"}[on], CleanupFinalizer, stack.Name, err)
	}
	return nil
}

// partition reads slices and nodes from the cache into a central.Partition.
func (t *taintReconciler) partition(ctx context.Context, cfg claimpolicy.Config) (*central.Partition, error) {
	r := t.r
	var slices resourceapi.ResourceSliceList
	if err := r.Client.List(ctx, &slices, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list ResourceSlices: %w", err)
	}
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list Nodes: %w", err)
	}
	in := central.Inputs{Entries: cfg.Central, Published: r.cfg.published()}
	for i := range slices.Items {
		in.Slices = append(in.Slices, &slices.Items[i])
	}
	for i := range nodes.Items {
		in.Nodes = append(in.Nodes, &nodes.Items[i])
	}
	return central.NewPartition(in)
}

// gatedPods counts the pods that carry the operator's gate.
func (t *taintReconciler) gatedPods(ctx context.Context) (int, error) {
	if t.r.podCache == nil {
		return 0, nil
	}
	var pods corev1.PodList
	if err := t.r.podCache.List(ctx, &pods, client.UnsafeDisableDeepCopy); err != nil {
		return 0, fmt.Errorf("list pods: %w", err)
	}
	n := 0
	for i := range pods.Items {
		if claimpolicy.HasGate(&pods.Items[i]) {
			n++
		}
	}
	return n, nil
}
