package claims

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/drastack/drastack/internal/allocator"
	claimspkg "github.com/drastack/drastack/internal/claims"
	"github.com/drastack/drastack/internal/pool"
)

// maxWriteAttempts bounds the conflict retries of one write. Each conflict
// means someone else changed the claim in between; more than a few in a
// row means something writes it in a loop, and the queue's backoff takes
// over.
const maxWriteAttempts = 5

// retryNowDelay requeues "at once" while still letting the queue
// de-duplicate a burst of events for the same claim.
const retryNowDelay = 10 * time.Millisecond

// writeTimeout bounds the writes of one allocation, which run to the end
// even when the manager stops.
const writeTimeout = 10 * time.Second

// holdWriteTimeout bounds a deallocation with its holds, which runs to
// the end even when the manager stops.
const holdWriteTimeout = 10 * time.Second

// errTooManyConflicts ends a write that kept conflicting.
var errTooManyConflicts = errors.New("the claim kept changing while it was written")

// write stores an allocation the way kube-scheduler does, in two steps:
//
//  1. the delete-protection finalizer, in a normal update, so that a
//     deletion waits for kube-controller-manager to deallocate;
//  2. status.allocation with its allocationTimestamp, through the status
//     subresource. Without the timestamp, kube-scheduler 1.36 would set it
//     while reserving the claim, which the API server rejects because an
//     allocation is immutable: the pod would never start.
//
// Both updates carry the claim's UID and resourceVersion, so each is
// refused if the claim changed since it was read. On a conflict the claim
// is read again from the API server; if it still needs exactly this
// allocation the write goes on, otherwise write returns nil and the
// claim's next event decides. It returns the claim as written.
func (r *Reconciler) write(ctx context.Context, claim *resourceapi.ResourceClaim, alloc *resourceapi.AllocationResult) (*resourceapi.ResourceClaim, error) {
	key := types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}
	cur := claim
	addedFinalizer := false
	for range maxWriteAttempts {
		if !claimspkg.HasFinalizer(cur) {
			upd := cur.DeepCopy()
			upd.Finalizers = append(upd.Finalizers, claimspkg.Finalizer)
			err := r.Client.Update(ctx, upd, client.FieldOwner(FieldManager))
			if err == nil {
				cur, addedFinalizer = upd, true
			} else {
				next, retry, err := r.afterWriteError(ctx, key, claim, err)
				if !retry {
					r.dropFinalizer(ctx, next, addedFinalizer)
					return nil, err
				}
				cur = next
				continue
			}
		}
		upd := cur.DeepCopy()
		upd.Status.Allocation = alloc
		err := r.Client.Status().Update(ctx, upd, client.FieldOwner(FieldManager))
		if err == nil {
			return upd, nil
		}
		next, retry, err := r.afterWriteError(ctx, key, claim, err)
		if !retry {
			r.dropFinalizer(ctx, next, addedFinalizer)
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
	case !apierrors.IsConflict(err):
		return nil, false, fmt.Errorf("write claim %s: %w", key, err)
	}
	writeConflicts.Inc()
	var fresh resourceapi.ResourceClaim
	if err := r.APIReader.Get(ctx, key, &fresh); err != nil {
		return nil, false, client.IgnoreNotFound(err)
	}
	if fresh.UID != allocatedFor.UID || claimspkg.Decide(r.config(), &fresh).Action != claimspkg.ActionAllocate {
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
	av, aok := a.Annotations[allocator.CELConstraintsAnnotation]
	bv, bok := b.Annotations[allocator.CELConstraintsAnnotation]
	return aok == bok && av == bv
}

// dropFinalizer removes the finalizer this write added when the write did
// not happen and the claim is still unallocated: nothing needs protection.
func (r *Reconciler) dropFinalizer(ctx context.Context, c *resourceapi.ResourceClaim, added bool) {
	if !added || c == nil || c.Status.Allocation != nil || len(c.Status.ReservedFor) > 0 || !claimspkg.HasFinalizer(c) {
		return
	}
	if err := r.removeFinalizer(ctx, c); err != nil {
		log.FromContext(ctx).V(1).Info("Could not remove the finalizer of an unallocated claim; kube-controller-manager removes it on deletion", "claim", client.ObjectKeyFromObject(c), "error", err.Error())
	}
}

func (r *Reconciler) removeFinalizer(ctx context.Context, c *resourceapi.ResourceClaim) error {
	upd := c.DeepCopy()
	upd.Finalizers = slices.DeleteFunc(upd.Finalizers, func(f string) bool { return f == claimspkg.Finalizer })
	if err := r.Client.Update(ctx, upd, client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("remove finalizer of claim %s: %w", client.ObjectKeyFromObject(c), err)
	}
	return nil
}

// settleRace takes back the operator's allocation of a claim when it
// collides with another allocation (a device or counter given twice) and
// the claim is the one that must give way (claims.Losers): it is the
// operator's, unreserved, and the later one. The allocation is cleared in
// the status subresource with resourceVersion precondition, so a
// consumer reserving the claim meanwhile wins; then the finalizer goes,
// and the claim is allocated again by its next reconcile.
//
// A device the claim shares with a claim that keeps it gets a hold (see
// claims.HoldClaim) around the deallocation, so that kube-scheduler does
// not forget that the keeper still has it. The hold is created before and
// allocated right after the deallocation: kube-scheduler must see the
// hold's allocation last.
func (r *Reconciler) settleRace(ctx context.Context, claim *resourceapi.ResourceClaim) error {
	if !claimspkg.Movable(claim, FieldManager) {
		return nil
	}
	cur := claim
	for range maxWriteAttempts {
		loser, pools, all, err := r.loserRace(ctx, cur)
		if err != nil || loser == nil {
			return err
		}
		// From the first hold to the last hold's allocation nothing may
		// stop half way, not even the manager shutting down: a
		// deallocation without its holds makes kube-scheduler forget a
		// device that is still in use.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), holdWriteTimeout)
		keeps, holds := r.createHolds(wctx, claimspkg.KeptDevices(pools, cur, all))
		upd := cur.DeepCopy()
		upd.Status.Allocation = nil
		err = r.Client.Status().Update(wctx, upd, client.FieldOwner(FieldManager))
		if err == nil {
			r.allocateHolds(wctx, keeps, holds)
			cancel()
			lostRaces.Inc()
			r.snap.forgetWritten(upd.UID)
			key := types.NamespacedName{Namespace: upd.Namespace, Name: upd.Name}
			r.markWaiting(key, r.now())
			log.FromContext(ctx).Info("Took back an allocation that lost a race", "claim", key, "race", loser.String(), "holds", len(holds))
			r.event(upd, corev1.EventTypeWarning, EventLostRace, "Deallocate", "took back the allocation because %s; allocating again", loser.String())
			if claimspkg.HasFinalizer(upd) && len(upd.Status.ReservedFor) == 0 {
				if err := r.removeFinalizer(ctx, upd); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
					return err
				}
			}
			return nil
		}
		r.deleteHolds(wctx, holds)
		cancel()
		if apierrors.IsNotFound(err) {
			return nil
		}
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("deallocate claim %s: %w", client.ObjectKeyFromObject(cur), err)
		}
		writeConflicts.Inc()
		var fresh resourceapi.ResourceClaim
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(cur), &fresh); err != nil {
			return client.IgnoreNotFound(err)
		}
		if fresh.UID != cur.UID || !claimspkg.Movable(&fresh, FieldManager) ||
			!equality.Semantic.DeepEqual(fresh.Status.Allocation, cur.Status.Allocation) {
			return nil
		}
		cur = &fresh
	}
	return fmt.Errorf("deallocate claim %s: %w", client.ObjectKeyFromObject(cur), errTooManyConflicts)
}

// createHolds creates the hold claims for kept devices, still without
// allocation. A hold that cannot be created (the keeper's namespace is
// terminating, say) is skipped: the losing claim must give the device
// back regardless, and the race watch reports what follows.
func (r *Reconciler) createHolds(ctx context.Context, keeps []claimspkg.Keep) ([]claimspkg.Keep, []*resourceapi.ResourceClaim) {
	var kept []claimspkg.Keep
	var out []*resourceapi.ResourceClaim
	for _, k := range keeps {
		h := claimspkg.HoldClaim(k)
		if err := r.Client.Create(ctx, h, client.FieldOwner(FieldManager)); err != nil {
			log.FromContext(ctx).Error(err, "Creating a hold failed; kube-scheduler may give the kept device again", "device", k.String())
			continue
		}
		kept = append(kept, k)
		out = append(out, h)
	}
	return kept, out
}

// allocateHolds writes the allocations of the holds. A failure leaves the
// hold unallocated; the race watch deletes it (claims.StaleHolds) and the
// keeper's device may then be given twice again by kube-scheduler, which
// the race watch reports.
func (r *Reconciler) allocateHolds(ctx context.Context, keeps []claimspkg.Keep, holds []*resourceapi.ResourceClaim) {
	for i, h := range holds {
		h.Status.Allocation = claimspkg.HoldAllocation(keeps[i], r.now())
		if err := r.Client.Status().Update(ctx, h, client.FieldOwner(FieldManager)); err != nil {
			log.FromContext(ctx).Error(err, "Writing a hold failed; kube-scheduler may give the kept device again", "hold", client.ObjectKeyFromObject(h), "device", keeps[i].String())
			continue
		}
		holdsWritten.Inc()
	}
}

func (r *Reconciler) deleteHolds(ctx context.Context, holds []*resourceapi.ResourceClaim) {
	for _, h := range holds {
		if err := r.Client.Delete(ctx, h, client.Preconditions{UID: &h.UID}); err != nil && !apierrors.IsNotFound(err) {
			log.FromContext(ctx).Error(err, "Deleting a hold failed; the race watch retries", "hold", client.ObjectKeyFromObject(h))
		}
	}
}

// loserRace returns the race the claim lost (nil when it may keep its
// allocation), with the pools and allocations it was decided on.
func (r *Reconciler) loserRace(ctx context.Context, claim *resourceapi.ResourceClaim) (*claimspkg.Race, []*pool.Pool, []*resourceapi.ResourceClaim, error) {
	pools, err := r.snap.currentPools(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	all, err := r.snap.allocated(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	// The claim as given replaces the cached copy, which may be older.
	for i, c := range all {
		if c.UID == claim.UID {
			all[i] = claim
		}
	}
	if !slices.ContainsFunc(all, func(c *resourceapi.ResourceClaim) bool { return c.UID == claim.UID }) {
		all = append(all, claim)
	}
	for _, l := range claimspkg.Losers(pools, all, movable) {
		if l.Claim.UID == claim.UID {
			race := l.Race
			return &race, pools, all, nil
		}
	}
	return nil, pools, all, nil
}

func movable(c *resourceapi.ResourceClaim) bool { return claimspkg.Movable(c, FieldManager) }
