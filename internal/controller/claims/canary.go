package claims

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/driver"
	"github.com/drastack/drastack/internal/handover"
)

// The canary of the join barrier (package handover): its slice and class,
// created once and owned by the DRAStack, and per round a rule, and per
// attempt a claim and a pod in the operator's namespace, all removed when
// the round ends and gone with the DRAStack.
//
// Cluster-scoped canary objects: the slice, its class and the rounds'
// rules (the names are fixed or per round, so resourceNames cannot narrow
// create). They are read from the cache only (list, watch).
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceslices;deviceclasses;devicetaintrules,verbs=list;watch;create;delete
// The claims and pods of the attempts live in the operator's own
// namespace only (a Role there; config/rbac).
// +kubebuilder:rbac:groups="",namespace=system,resources=pods,verbs=create;delete
// +kubebuilder:rbac:groups=resource.k8s.io,namespace=system,resources=resourceclaims,verbs=create;delete

// canary creates and removes the canary objects of one Reconciler.
type canary struct {
	r *Reconciler
	// namespace holds the attempts' claims and pods: the operator's own.
	namespace string
	image     string
}

// ownedBy makes the DRAStack the owner of a canary object, so that the
// garbage collector removes what the operator leaves behind. No
// blockOwnerDeletion: nothing waits for the canary.
func ownedBy(stack *v1alpha1.DRAStack) []metav1.OwnerReference {
	ref := metav1.NewControllerRef(stack, v1alpha1.GroupVersion.WithKind("DRAStack"))
	ref.BlockOwnerDeletion = nil
	return []metav1.OwnerReference{*ref}
}

// base returns the canary slice, creating the slice and its class when
// they are missing (nil while a slice created earlier is not in the cache
// yet). The slice is never updated: kube-scheduler would see a change of
// it out of order with the rules.
func (c *canary) base(ctx context.Context, stack *v1alpha1.DRAStack) (*resourceapi.ResourceSlice, error) {
	r := c.r
	var class resourceapi.DeviceClass
	switch err := r.Client.Get(ctx, client.ObjectKey{Name: handover.CanaryName}, &class); {
	case apierrors.IsNotFound(err):
		want := handover.CanaryClass()
		want.OwnerReferences = ownedBy(stack)
		if err := r.Client.Create(ctx, want, client.FieldOwner(FieldManager)); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create the canary DeviceClass %s: %w", want.Name, err)
		}
	case err != nil:
		return nil, fmt.Errorf("read the canary DeviceClass: %w", err)
	}
	var slice resourceapi.ResourceSlice
	switch err := r.Client.Get(ctx, client.ObjectKey{Name: handover.CanaryName}, &slice); {
	case apierrors.IsNotFound(err):
		want := handover.CanarySlice()
		want.OwnerReferences = ownedBy(stack)
		err := r.Client.Create(ctx, want, client.FieldOwner(FieldManager))
		switch {
		case apierrors.IsAlreadyExists(err):
			// Created before; the cache has not shown it yet.
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("create the canary ResourceSlice %s: %w", want.Name, err)
		}
		return want, nil
	case err != nil:
		return nil, fmt.Errorf("read the canary ResourceSlice: %w", err)
	}
	return &slice, nil
}

// createRule creates the rule of a round and returns it as created (its
// resourceVersion orders it after every rule the round covers).
func (c *canary) createRule(ctx context.Context, stack *v1alpha1.DRAStack, round string) (*resourceapi.DeviceTaintRule, error) {
	rule := handover.CanaryRule(round)
	rule.OwnerReferences = ownedBy(stack)
	if err := c.r.Client.Create(ctx, rule, client.FieldOwner(FieldManager)); err != nil {
		return nil, fmt.Errorf("create the canary DeviceTaintRule %s: %w", rule.Name, err)
	}
	return rule, nil
}

// createAttempt creates the claim, then the pod, of one attempt; the
// claim tolerates the earlier rounds' taints in tolerated.
func (c *canary) createAttempt(ctx context.Context, stack *v1alpha1.DRAStack, round string, attempt int, tolerated []string) error {
	claim := handover.CanaryClaim(c.namespace, round, attempt, tolerated)
	claim.OwnerReferences = ownedBy(stack)
	if err := c.r.Client.Create(ctx, claim, client.FieldOwner(FieldManager)); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the canary claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	pod := handover.CanaryPod(c.namespace, round, attempt, c.image)
	pod.OwnerReferences = ownedBy(stack)
	if err := c.r.Client.Create(ctx, pod, client.FieldOwner(FieldManager)); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the canary pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// pod reads the pod of an attempt from the pod cache (nil: not there yet,
// or gone).
func (c *canary) pod(ctx context.Context, round string, attempt int) (*corev1.Pod, error) {
	var p corev1.Pod
	err := c.r.podCache.Get(ctx, types.NamespacedName{Namespace: c.namespace, Name: handover.CanaryPodName(round, attempt)}, &p)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the canary pod: %w", err)
	}
	return &p, nil
}

// cleanup deletes the canary rules, claims and pods of every round but
// keep ("" deletes them all); with base, the slice and class too. It
// returns the rounds whose rules it deleted.
func (c *canary) cleanup(ctx context.Context, keep string, base bool) (rounds []string, err error) {
	r := c.r
	sel := client.MatchingLabels{driver.LabelComponent: handover.ComponentCanary, driver.LabelManagedBy: driver.ManagedByValue}
	var doomed []client.Object
	var rules resourceapi.DeviceTaintRuleList
	if err := r.Client.List(ctx, &rules, sel); err != nil {
		return nil, fmt.Errorf("list canary DeviceTaintRules: %w", err)
	}
	for i := range rules.Items {
		doomed = append(doomed, &rules.Items[i])
	}
	var claims resourceapi.ResourceClaimList
	if err := r.Client.List(ctx, &claims, sel, client.InNamespace(c.namespace)); err != nil {
		return nil, fmt.Errorf("list canary claims: %w", err)
	}
	for i := range claims.Items {
		doomed = append(doomed, &claims.Items[i])
	}
	var pods corev1.PodList
	if err := r.podCache.List(ctx, &pods, sel, client.InNamespace(c.namespace)); err != nil {
		return nil, fmt.Errorf("list canary pods: %w", err)
	}
	for i := range pods.Items {
		doomed = append(doomed, &pods.Items[i])
	}
	for _, obj := range doomed {
		round := handover.RoundOf(obj)
		if round == "" || round == keep {
			continue
		}
		if err := c.delete(ctx, obj); err != nil {
			return rounds, err
		}
		if _, ok := obj.(*resourceapi.DeviceTaintRule); ok {
			rounds = append(rounds, round)
		}
	}
	if !base {
		return rounds, nil
	}
	for _, obj := range []client.Object{
		&resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: handover.CanaryName}},
		&resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: handover.CanaryName}},
	} {
		if err := r.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); client.IgnoreNotFound(err) != nil {
			return rounds, err
		} else if err == nil && handover.IsCanary(obj) {
			if err := c.delete(ctx, obj); err != nil {
				return rounds, err
			}
		}
	}
	return rounds, nil
}

// deleteAttempt deletes the pod and the claim of one attempt.
func (c *canary) deleteAttempt(ctx context.Context, round string, attempt int) error {
	name := handover.CanaryPodName(round, attempt)
	for _, obj := range []client.Object{
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: name}},
		&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: name}},
	} {
		if err := c.delete(ctx, obj); err != nil {
			return err
		}
	}
	return nil
}

// delete removes one canary object at once (a pod without grace: it never
// did anything).
func (c *canary) delete(ctx context.Context, obj client.Object) error {
	opts := []client.DeleteOption{client.PropagationPolicy(metav1.DeletePropagationBackground)}
	if _, ok := obj.(*corev1.Pod); ok {
		opts = append(opts, client.GracePeriodSeconds(0))
	}
	if uid := obj.GetUID(); uid != "" {
		opts = append(opts, client.Preconditions{UID: &uid})
	}
	if err := c.r.Client.Delete(ctx, obj, opts...); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete canary %T %s: %w", obj, obj.GetName(), err)
	}
	return nil
}
