package claims

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/claimpolicy"
)

// maxWriteAttempts bounds the conflict retries of one write. Each conflict
// means someone else changed the claim in between; more than a few in a
// row means something writes it in a loop, and the queue's backoff takes
// over.
const maxWriteAttempts = 5

// retryNowDelay requeues "at once" while still letting the queue
// de-duplicate a burst of events for the same object.
const retryNowDelay = 10 * time.Millisecond

// writeTimeout bounds the writes of one allocation, which run to the end
// even when the manager stops.
const writeTimeout = 10 * time.Second

// errTooManyConflicts ends a write that kept conflicting.
var errTooManyConflicts = errors.New("the claim kept changing while it was written")

// errRefused is a write the API server refused as invalid (422) or
// forbidden: retrying the same write cannot help, so it is reported as an
// Event and not retried until something changes.
var errRefused = errors.New("the API server refused the write")

// optimistic makes a merge patch that carries the object's
// resourceVersion: it is refused if the object changed since it was read,
// and it sends only the fields this write changes, so fields this client
// does not know (written by a newer API server) are never sent back as
// dropped or changed.
func optimistic(orig client.Object) client.Patch {
	return client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})
}

// write stores an allocation the way kube-scheduler does, in two steps:
//
//  1. the delete-protection finalizer, so that a deletion waits for
//     kube-controller-manager to deallocate; usually the claim webhook
//     (internal/claimwebhook) put it there when the claim was created, and no
//     request is sent;
//  2. status.allocation with its allocationTimestamp, through the status
//     subresource. Without the timestamp, kube-scheduler would set it while
//     reserving the claim, which the API server rejects because an
//     allocation is immutable: the pod would never start.
//
// Both are merge patches that carry the claim's resourceVersion, so each is
// refused if the claim changed since it was read. On a conflict the claim
// is read again from the API server; if it still needs exactly this
// allocation the write goes on, otherwise write returns nil and the
// claim's next event decides. A refused write (422, 403) returns
// errRefused. It returns the claim as written.
func (r *Reconciler) write(ctx context.Context, claim *resourceapi.ResourceClaim, alloc *resourceapi.AllocationResult) (*resourceapi.ResourceClaim, error) {
	key := types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}
	cur := claim
	for range maxWriteAttempts {
		if !claimpolicy.HasFinalizer(cur) {
			upd := cur.DeepCopy()
			upd.Finalizers = append(upd.Finalizers, claimpolicy.Finalizer)
			if err := r.Client.Patch(ctx, upd, optimistic(cur), client.FieldOwner(FieldManager)); err != nil {
				next, retry, err := r.afterWriteError(ctx, key, claim, err)
				if !retry {
					return nil, err
				}
				cur = next
				continue
			}
			cur = upd
		}
		upd := cur.DeepCopy()
		upd.Status.Allocation = alloc
		err := r.Client.Status().Patch(ctx, upd, optimistic(cur), client.FieldOwner(FieldManager))
		if err == nil {
			return upd, nil
		}
		next, retry, err := r.afterWriteError(ctx, key, claim, err)
		if !retry {
			return nil, err
		}
		cur = next
	}
	r.event(claim, corev1.EventTypeWarning, EventTooManyTries, "Allocate", "gave up writing the allocation after %d conflicts; retrying later", maxWriteAttempts)
	return nil, fmt.Errorf("write allocation of claim %s: %w", key, errTooManyConflicts)
}

// afterWriteError handles a failed write: on a conflict it reads the claim
// again and tells whether the same allocation may still be written to it.
// A claim that is gone, or no longer needs this allocation, ends the write
// without error.
func (r *Reconciler) afterWriteError(ctx context.Context, key types.NamespacedName, allocatedFor *resourceapi.ResourceClaim, err error) (*resourceapi.ResourceClaim, bool, error) {
	switch {
	case apierrors.IsNotFound(err):
		return nil, false, nil
	case apierrors.IsInvalid(err) || apierrors.IsForbidden(err):
		return nil, false, fmt.Errorf("write claim %s: %w: %w", key, errRefused, err)
	case !apierrors.IsConflict(err):
		return nil, false, fmt.Errorf("write claim %s: %w", key, err)
	}
	writeConflicts.Inc()
	var fresh resourceapi.ResourceClaim
	if err := r.APIReader.Get(ctx, key, &fresh); err != nil {
		return nil, false, client.IgnoreNotFound(err)
	}
	if fresh.UID != allocatedFor.UID || claimpolicy.Decide(r.cfg.get(), &fresh).Action != claimpolicy.ActionAllocate {
		return &fresh, false, nil
	}
	// The allocation was computed for the claim's spec (immutable) and its
	// CEL constraints annotation; if the annotation changed, start over.
	if !sameConstraints(&fresh, allocatedFor) {
		return &fresh, false, nil
	}
	return &fresh, true, nil
}

func sameConstraints(a, b *resourceapi.ResourceClaim) bool {
	return a.Annotations[allocator.CELConstraintsAnnotation] == b.Annotations[allocator.CELConstraintsAnnotation]
}

// deallocate takes back an allocation the operator wrote, so that the
// claim is placed again: status.allocation is cleared (a merge patch with
// the claim's resourceVersion, refused if anyone, kube-scheduler reserving
// the claim included, changed it since it was read), then the finalizer
// is removed, as kube-scheduler does when it takes back its own. It
// returns false, without error, when the claim changed in between.
func (r *Reconciler) deallocate(ctx context.Context, claim *resourceapi.ResourceClaim) (bool, error) {
	if !claimpolicy.Movable(claim, FieldManager) {
		return false, nil
	}
	upd := claim.DeepCopy()
	upd.Status.Allocation = nil
	if err := r.Client.Status().Patch(ctx, upd, optimistic(claim), client.FieldOwner(FieldManager)); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("deallocate claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	r.snap.invalidate()
	if err := r.removeFinalizer(ctx, upd); err != nil {
		log.FromContext(ctx).Error(err, "Removing the finalizer of a deallocated claim failed; kube-controller-manager removes it when the claim is deleted", "claim", klogKey(claim))
	}
	return true, nil
}

// removeFinalizer drops the delete-protection finalizer of an unallocated
// claim.
func (r *Reconciler) removeFinalizer(ctx context.Context, c *resourceapi.ResourceClaim) error {
	if !claimpolicy.HasFinalizer(c) || c.Status.Allocation != nil {
		return nil
	}
	upd := c.DeepCopy()
	upd.Finalizers = slices.DeleteFunc(upd.Finalizers, func(f string) bool { return f == claimpolicy.Finalizer })
	err := r.Client.Patch(ctx, upd, optimistic(c), client.FieldOwner(FieldManager))
	return client.IgnoreNotFound(err)
}

// klogKey names a claim in logs the way klog.KObj does.
func klogKey(c client.Object) string { return c.GetNamespace() + "/" + c.GetName() }
