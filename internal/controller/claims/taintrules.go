package claims

import (
	"context"
	"fmt"
	"slices"
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
	"github.com/drastack/drastack/internal/handover"
	"github.com/drastack/drastack/internal/ledger"
)

// The taint loop owns the DeviceTaintRules that keep kube-scheduler off
// central devices: it creates, updates and deletes only rules labelled as
// the operator's (central.Owned). It reads them from the manager's cache.
// +kubebuilder:rbac:groups=resource.k8s.io,resources=devicetaintrules,verbs=list;watch;create;patch;delete
// It owns the central DeviceClasses of spec.claims.central[].classes the
// same way (central.OwnedClass), read from the cache too.
// +kubebuilder:rbac:groups=resource.k8s.io,resources=deviceclasses,verbs=list;watch;create;patch;delete
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

// EventTaintRestored is the reason of the Warning on the DRAStack when the
// taint loop put back a central rule that someone else deleted or changed.
const EventTaintRestored = "CentralTaintRestored"

// taintReconciler keeps the DeviceTaintRules of spec.claims.central in
// place (central.Partition.TaintRules).
type taintReconciler struct {
	r *Reconciler
	// reportedNotOwned are the central classes last reported as not the
	// operator's: reported once per change (one worker runs this loop).
	reportedNotOwned string
	// seen are the pool rules of the operator this process saw or made
	// and did not delete itself: one of them missing was deleted by
	// someone else. Only the loop's one worker uses it.
	seen map[string]bool
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
	var (
		desired []resourceapi.DeviceTaintRule
		part    *central.Partition
	)
	switch {
	case cfg.Active && len(cfg.Central) > 0:
		part, err = t.partition(ctx, cfg)
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
	// Devices leave the partition only when no allocation holds them
	// (docs/allocation-protocol.md, section 4): a held device keeps a
	// rule of its own until it is released.
	held := t.heldRules(part, existing.Items)
	diff, conflicts := central.DiffTaintRules(append(slices.Clone(desired), held...), existing.Items)
	if len(conflicts) > 0 && haveStack {
		r.event(stack, corev1.EventTypeWarning, EventTaintRules, "Taint", "DeviceTaintRules %s exist but are not the operator's; their devices are not central", strings.Join(conflicts, ", "))
	}
	if len(diff.Update) > 0 || len(diff.Delete) > 0 {
		// An update can narrow a rule: devices leave the partition as
		// surely as with a delete. That happens in an exclusive turn of
		// the ledger, which decides again which devices are held: no
		// decision that began under the configuration that still named
		// them can reserve them afterwards.
		err := r.ledger.Exclusive(ctx, func() error {
			held = t.heldRules(part, existing.Items)
			diff, _ = central.DiffTaintRules(append(slices.Clone(desired), held...), existing.Items)
			return t.apply(ctx, diff, owner)
		})
		if err != nil {
			return ctrl.Result{}, err
		}
	} else if err := t.apply(ctx, diff, owner); err != nil {
		return ctrl.Result{}, err
	}
	desired = append(desired, held...)
	if err := t.classes(ctx, stack, cfg, owner); err != nil {
		return ctrl.Result{}, err
	}
	t.noteRestored(stack, existing.Items, diff)
	if !diff.Empty() {
		r.ledger.Invalidate()
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

// EventCentralClasses is the reason of the Events about central classes.
const EventCentralClasses = "CentralClasses"

// classes keeps the operator-owned central DeviceClasses of
// spec.claims.central[].classes (central.DiffClasses): created when
// missing, restored when changed, deleted when no entry lists them. A
// class of the same name the operator did not create is used as it is,
// and reported: kube-scheduler may allocate its claims when their pods are
// not gated, without their constraints.
func (t *taintReconciler) classes(ctx context.Context, stack *v1alpha1.DRAStack, cfg claimpolicy.Config, owner []metav1.OwnerReference) error {
	r := t.r
	var existing resourceapi.DeviceClassList
	if err := r.Client.List(ctx, &existing); err != nil {
		return fmt.Errorf("list DeviceClasses: %w", err)
	}
	var wanted []string
	if cfg.Active {
		wanted = cfg.CentralClasses
	}
	d := central.DiffClasses(wanted, existing.Items)
	for i := range d.Create {
		c := &d.Create[i]
		c.OwnerReferences = owner
		if err := r.Client.Create(ctx, c, client.FieldOwner(FieldManager)); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create central DeviceClass %s: %w", c.Name, err)
		}
	}
	for i := range d.Update {
		c := &d.Update[i]
		var cur resourceapi.DeviceClass
		if err := r.Client.Get(ctx, client.ObjectKeyFromObject(c), &cur); err != nil {
			return client.IgnoreNotFound(err)
		}
		upd := cur.DeepCopy()
		upd.Spec = c.Spec
		if err := r.Client.Patch(ctx, upd, optimistic(&cur), client.FieldOwner(FieldManager)); err != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("restore central DeviceClass %s: %w", c.Name, err)
		}
	}
	for i := range d.Delete {
		c := &d.Delete[i]
		if err := r.Client.Delete(ctx, c, client.Preconditions{UID: &c.UID, ResourceVersion: &c.ResourceVersion}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("delete central DeviceClass %s: %w", c.Name, err)
		}
	}
	notOwned := strings.Join(d.NotOwned, ", ")
	if stack != nil && notOwned != "" && notOwned != t.reportedNotOwned {
		msg := fmt.Sprintf("DeviceClasses %s exist and were not created by the operator: they are used as they are, so kube-scheduler may allocate their claims, without their constraints, whenever their pods are not gated; delete them and the operator creates classes only it can serve", strings.Join(d.NotOwned, ", "))
		r.event(stack, corev1.EventTypeWarning, EventCentralClasses, "Classes", "%s", msg)
	}
	t.reportedNotOwned = notOwned
	if n := len(d.Create) + len(d.Update) + len(d.Delete); n > 0 && stack != nil {
		r.event(stack, corev1.EventTypeNormal, EventCentralClasses, "Classes", "central DeviceClasses: %d created, %d restored, %d deleted", len(d.Create), len(d.Update), len(d.Delete))
	}
	return nil
}

// apply writes diff: creations with owner, updates and deletions with
// the existing rule's resourceVersion as precondition.
func (t *taintReconciler) apply(ctx context.Context, diff central.RuleDiff, owner []metav1.OwnerReference) error {
	r := t.r
	for i := range diff.Create {
		rule := &diff.Create[i]
		rule.OwnerReferences = owner
		if err := r.Client.Create(ctx, rule, client.FieldOwner(FieldManager)); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create DeviceTaintRule %s: %w", rule.Name, err)
		}
	}
	for i := range diff.Update {
		rule := &diff.Update[i]
		var cur resourceapi.DeviceTaintRule
		if err := r.Client.Get(ctx, client.ObjectKeyFromObject(rule), &cur); err != nil {
			return client.IgnoreNotFound(err)
		}
		// Narrowing a rule lets devices go: only under the fence (Rule W).
		if err := t.fenced(ctx, &cur); err != nil {
			return err
		}
		r.retired.retire(&cur)
		upd := cur.DeepCopy()
		upd.Labels, upd.Spec = rule.Labels, rule.Spec
		if err := r.Client.Patch(ctx, upd, optimistic(&cur), client.FieldOwner(FieldManager)); err != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("update DeviceTaintRule %s: %w", rule.Name, err)
		}
	}
	for i := range diff.Delete {
		rule := &diff.Delete[i]
		if err := t.fenced(ctx, rule); err != nil {
			return err
		}
		r.retired.retire(rule)
		if err := r.Client.Delete(ctx, rule, client.Preconditions{UID: &rule.UID, ResourceVersion: &rule.ResourceVersion}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("delete DeviceTaintRule %s: %w", rule.Name, err)
		}
	}
	return nil
}

// fenced waits until the term may write a rule it read (Rule W of
// docs/allocation-protocol.md: a deposed term must never untaint devices
// the new one allocates).
func (t *taintReconciler) fenced(ctx context.Context, rule *resourceapi.DeviceTaintRule) error {
	if t.r.off.noFence {
		return nil
	}
	if err := t.r.fence.Await(ctx, ledger.ParseVersion(rule.ResourceVersion)); err != nil {
		return fmt.Errorf("DeviceTaintRule %s: %w", rule.Name, err)
	}
	return nil
}

// heldRules are the rules of the devices that leave the partition
// (central under an existing rule of the operator, not under part) while
// an allocation or reservation the ledger counts holds them.
func (t *taintReconciler) heldRules(part *central.Partition, existing []resourceapi.DeviceTaintRule) []resourceapi.DeviceTaintRule {
	var owned []resourceapi.DeviceTaintRule
	for i := range existing {
		if central.Owned(&existing[i]) {
			owned = append(owned, existing[i])
		}
	}
	if len(owned) == 0 || t.r.off.noHolds {
		return nil
	}
	held := t.r.ledger.Holds(func(driver, pool, device string) bool {
		return (part == nil || !part.Central(driver, pool, device)) && central.Covered(owned, driver, pool, device)
	})
	devices := make([]central.DeviceID, len(held))
	for i, h := range held {
		devices[i] = central.DeviceID{Driver: h.Driver, Pool: h.Pool, Device: h.Device}
	}
	return central.HoldRules(devices)
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
	in, err := t.r.partitionInputs(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return central.NewPartition(in)
}

// partitionInputs reads what the partition of cfg is built from: the
// slices and nodes of the cache.
func (r *Reconciler) partitionInputs(ctx context.Context, cfg claimpolicy.Config) (central.Inputs, error) {
	in := central.Inputs{Entries: cfg.Central, Published: r.cfg.published()}
	var slices resourceapi.ResourceSliceList
	if err := r.Client.List(ctx, &slices, client.UnsafeDisableDeepCopy); err != nil {
		return in, fmt.Errorf("list ResourceSlices: %w", err)
	}
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return in, fmt.Errorf("list Nodes: %w", err)
	}
	for i := range slices.Items {
		in.Slices = append(in.Slices, &slices.Items[i])
	}
	for i := range nodes.Items {
		in.Nodes = append(in.Nodes, &nodes.Items[i])
	}
	return in, nil
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

// noteRestored reports the pool rules diff puts back after someone else
// deleted or changed them (the admission policies let only the operator
// do either): a pool rule that this process saw and did not delete is
// missing, or a pool rule's spec is not the operator's. The operator never
// changes a pool rule's spec itself: its name says what it selects. The
// restored rule is a new object or a new generation, so its pools are
// allocated by nobody until they join the partition again (join.go); the
// engine already stopped using them when the cache showed the change.
func (t *taintReconciler) noteRestored(stack *v1alpha1.DRAStack, existing []resourceapi.DeviceTaintRule, diff central.RuleDiff) {
	if t.seen == nil {
		t.seen = map[string]bool{}
	}
	var restored []string
	for i := range diff.Create {
		if rule := &diff.Create[i]; handover.PoolRule(rule) && t.seen[rule.Name] {
			restored = append(restored, rule.Name+" (deleted)")
		}
	}
	for i := range diff.Update {
		if rule := &diff.Update[i]; handover.PoolRule(rule) {
			restored = append(restored, rule.Name+" (changed)")
		}
	}
	for i := range existing {
		if handover.PoolRule(&existing[i]) {
			t.seen[existing[i].Name] = true
		}
	}
	for i := range diff.Create {
		if handover.PoolRule(&diff.Create[i]) {
			t.seen[diff.Create[i].Name] = true
		}
	}
	for i := range diff.Delete {
		delete(t.seen, diff.Delete[i].Name)
	}
	if len(restored) == 0 {
		return
	}
	rulesRestored.Add(float64(len(restored)))
	if stack != nil {
		t.r.event(stack, corev1.EventTypeWarning, EventTaintRestored, "Taint",
			"Central DeviceTaintRules restored after someone else deleted or changed them (only the operator may): %s; nobody allocates their devices until they join the partition again",
			strings.Join(restored, ", "))
	}
}
