package claims

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/fence"
	"github.com/drastack/drastack/internal/ledger"
)

// writeTimeout bounds one request. A request the client gave up on may
// still commit; the ledger treats its answer as ambiguous and the write is
// sent again, so nothing depends on this value but how soon that happens.
const writeTimeout = 10 * time.Second

// retryNowDelay requeues "at once" while still letting the queue
// de-duplicate a burst of events for the same object.
const retryNowDelay = 10 * time.Millisecond

// afterTurn is what a reconcile returns after a ledger turn that did not
// decide (done): not ready (the term's sweep is under way; the claim is
// queued again when it ends, term.go), stale or taken (decide again from
// newer state at once), or failed. A turn that decided (err nil) is not
// done: the caller goes on with its outcome.
func afterTurn(err error) (res ctrl.Result, done bool, _ error) {
	switch {
	case err == nil:
		return ctrl.Result{}, false, nil
	case errors.Is(err, ledger.ErrNotReady):
		return ctrl.Result{}, true, nil
	case errors.Is(err, ledger.ErrStale) || errors.Is(err, ledger.ErrTaken):
		return ctrl.Result{RequeueAfter: retryNowDelay}, true, nil
	}
	return ctrl.Result{}, true, err
}

// writeAll runs write(0) to write(n-1), the writes of one unit, in
// parallel (one after the other with serialWrites) and returns when all
// have ended.
func (r *Reconciler) writeAll(n int, write func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		if r.serialWrites {
			write(i)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			write(i)
		}()
	}
	wg.Wait()
}

// errRefused is a write the API server refused as invalid (422): the same
// write can never commit, so it is reported as an Event and not retried
// until something changes.
var errRefused = errors.New("the API server refused the write")

// optimistic makes a merge patch that carries the object's
// resourceVersion: it commits only if the object is still at that version,
// and it sends only the fields this write changes, so fields this client
// does not know (written by a newer API server) are never sent back as
// dropped or changed.
func optimistic(orig client.Object) client.Patch {
	return client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})
}

// writeOutcome is how the write of a reservation ended.
type writeOutcome int

const (
	// writeConfirmed: the claim carries the reservation's allocation.
	writeConfirmed writeOutcome = iota
	// writeReleased: the write can never commit (the claim changed, is
	// gone, or the write was refused); the devices are free again.
	writeReleased
	// writeAmbiguous: no definite answer; the reservation stays and the
	// write is sent again, with the same precondition, later.
	writeAmbiguous
	// writeLost: this process lost the fence and may write nothing.
	writeLost
)

func (o writeOutcome) String() string {
	return [...]string{"confirmed", "released", "ambiguous", "fence lost"}[o]
}

// writeReserved writes the reservation of a claim (status.allocation with
// its allocationTimestamp, through the status subresource, conditioned on
// the version the decision read) and feeds the answer to the ledger,
// which ends the reservation on evidence only. Without the timestamp,
// kube-scheduler would set it while reserving the claim, which the API
// server rejects because an allocation is immutable: the pod would never
// start. The delete-protection finalizer is on the claim already (the
// claim webhook, or ensureFinalizer before the decision).
//
// It returns the claim as written (for Events) when confirmed, and the
// error behind a released or ambiguous outcome.
func (r *Reconciler) writeReserved(ctx context.Context, uid types.UID) (writeOutcome, *resourceapi.ResourceClaim, error) {
	res, ok := r.ledger.Reserved(uid)
	if !ok {
		return r.resolved(uid), nil, nil
	}
	done := r.ledger.Track(uid)
	defer done()
	read := res.Claim
	if !r.off.noFence {
		if err := r.fence.EnsureScope(ctx, claimpolicy.Scope(r.cfg.get())); err != nil && !errors.Is(err, fence.ErrLost) {
			return writeAmbiguous, nil, err
		}
		if err := r.fence.Await(ctx, ledger.ParseVersion(read.ResourceVersion)); err != nil {
			if errors.Is(err, fence.ErrLost) {
				return writeLost, nil, err
			}
			return writeAmbiguous, nil, err
		}
	}
	orig := read.DeepCopy()
	orig.Status.Allocation = nil
	upd := read.DeepCopy()
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	err := r.Client.Status().Patch(wctx, upd, optimistic(orig), client.FieldOwner(FieldManager))
	if err == nil {
		r.ledger.Observe(upd)
		return r.resolved(uid), upd, nil
	}
	return r.afterWriteError(ctx, read, err)
}

// abandon ends a reservation nothing will write any more (its pod is gone):
// a write of it may be in flight, so it cannot simply be dropped. Writing
// FenceAnnotation with the reservation's precondition moves the claim past
// that version: then no write of it can commit, and the answer (or a read
// after a conflict) is the evidence that ends it. A reservation that did
// commit becomes an allocation like any other; its pod's next placement,
// or the claim's deletion, takes it from there. It reports whether the
// reservation ended.
func (r *Reconciler) abandon(ctx context.Context, res ledger.Reservation) (bool, error) {
	read := res.Claim
	if err := r.fence.Await(ctx, ledger.ParseVersion(read.ResourceVersion)); err != nil && !r.off.noFence {
		return false, err
	}
	orig := read.DeepCopy()
	orig.Status.Allocation = nil
	upd := orig.DeepCopy()
	if upd.Annotations == nil {
		upd.Annotations = map[string]string{}
	}
	// A value of its own, so that the write always changes the claim: an
	// unchanged object keeps its version, which proves nothing.
	upd.Annotations[FenceAnnotation] = r.fence.Term() + "/" + read.ResourceVersion
	done := r.ledger.Track(read.UID)
	defer done()
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	err := r.Client.Patch(wctx, upd, optimistic(orig), client.FieldOwner(FieldManager))
	switch {
	case err == nil:
		r.ledger.Observe(upd)
	case apierrors.IsNotFound(err):
		r.ledger.ObserveDeleted(read)
	case apierrors.IsConflict(err):
		if ferr := r.readFresh(ctx, read); ferr != nil {
			return false, ferr
		}
	default:
		return false, nil
	}
	_, pending := r.ledger.Reserved(read.UID)
	return !pending, nil
}

// expireOld is the age limit of the reservations the protocol replaced
// (protocolSwitches.expireAfter): only the simulation turns it on.
func (r *Reconciler) expireOld() {
	if r.off.expireAfter <= 0 {
		return
	}
	for _, res := range r.ledger.Reservations() {
		if r.now().Sub(res.Since) > r.off.expireAfter {
			r.ledger.Refused(res.Claim.UID)
		}
	}
}

// resolved tells what the ledger's evidence made of a reservation that is
// no longer pending.
func (r *Reconciler) resolved(uid types.UID) writeOutcome {
	st := r.ledger.StateOf(uid)
	switch {
	case st.Reserved:
		return writeAmbiguous
	case st.Allocation != nil:
		return writeConfirmed
	}
	return writeReleased
}

// afterWriteError turns a failed write of claim (as read) into evidence
// for the ledger: a conflict reads the claim from the API server (a newer
// state), a missing claim is a deletion, a refusal as invalid ends the
// reservation; anything else leaves it pending.
func (r *Reconciler) afterWriteError(ctx context.Context, read *resourceapi.ResourceClaim, err error) (writeOutcome, *resourceapi.ResourceClaim, error) {
	key := types.NamespacedName{Namespace: read.Namespace, Name: read.Name}
	switch {
	case apierrors.IsNotFound(err):
		r.ledger.ObserveDeleted(read)
		return r.resolved(read.UID), nil, nil
	case apierrors.IsInvalid(err):
		r.ledger.Refused(read.UID)
		return writeReleased, nil, fmt.Errorf("write the allocation of claim %s: %w: %w", key, errRefused, err)
	case apierrors.IsConflict(err):
		writeConflicts.Inc()
		if ferr := r.readFresh(ctx, read); ferr != nil {
			r.ledger.Ambiguous(read.UID)
			return writeAmbiguous, nil, ferr
		}
		return r.resolved(read.UID), nil, nil
	}
	writesAmbiguous.Inc()
	if r.off.ambiguousFrees {
		r.ledger.Refused(read.UID)
		return writeReleased, nil, err
	}
	r.ledger.Ambiguous(read.UID)
	return writeAmbiguous, nil, fmt.Errorf("write the allocation of claim %s (sent again until the answer is definite): %w", key, err)
}

// readFresh reads a claim from the API server into the ledger.
func (r *Reconciler) readFresh(ctx context.Context, c *resourceapi.ResourceClaim) error {
	var fresh resourceapi.ResourceClaim
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, &fresh)
	switch {
	case apierrors.IsNotFound(err) || (err == nil && fresh.UID != c.UID):
		r.ledger.ObserveDeleted(c)
		return nil
	case err != nil:
		return fmt.Errorf("read claim %s/%s after a conflict: %w", c.Namespace, c.Name, err)
	}
	r.ledger.Observe(&fresh)
	return nil
}

// ensureFinalizer puts the delete-protection finalizer on an operator
// claim that lacks it (one created while the claim webhook was
// unreachable), before any decision: it changes the claim's version, which
// a reservation must be conditioned on. It returns the claim to decide
// for (the written one), or nil when the claim changed or went meanwhile
// (its next event decides).
func (r *Reconciler) ensureFinalizer(ctx context.Context, c *resourceapi.ResourceClaim) (*resourceapi.ResourceClaim, error) {
	if claimpolicy.HasFinalizer(c) {
		return c, nil
	}
	upd := c.DeepCopy()
	upd.Finalizers = append(upd.Finalizers, claimpolicy.Finalizer)
	err := r.Client.Patch(ctx, upd, optimistic(c), client.FieldOwner(FieldManager))
	switch {
	case err == nil:
		r.ledger.Observe(upd)
		return upd, nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil, nil
	}
	return nil, fmt.Errorf("add the finalizer %s to claim %s/%s: %w", claimpolicy.Finalizer, c.Namespace, c.Name, err)
}

// deallocate takes back an allocation the operator wrote (a broken
// placement, or one kube-scheduler could not use): status.allocation is
// cleared with the claim's resourceVersion as precondition, under the
// fence (Rule W), then the finalizer is removed, as kube-scheduler does
// with its own. It reports whether the allocation went; a claim that
// changed in between is left to its next event.
func (r *Reconciler) deallocate(ctx context.Context, claim *resourceapi.ResourceClaim) (bool, error) {
	if !claimpolicy.Movable(claim, FieldManager) {
		return false, nil
	}
	done := r.ledger.Track(claim.UID)
	defer done()
	if !r.off.noFence {
		if err := r.fence.Await(ctx, ledger.ParseVersion(claim.ResourceVersion)); err != nil {
			return false, err
		}
	}
	upd := claim.DeepCopy()
	upd.Status.Allocation = nil
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	if err := r.Client.Status().Patch(wctx, upd, optimistic(claim), client.FieldOwner(FieldManager)); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			r.ledger.ObserveDeleted(claim)
			return false, nil
		case apierrors.IsConflict(err):
			return false, r.readFresh(ctx, claim)
		}
		return false, fmt.Errorf("deallocate claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	r.ledger.Observe(upd)
	if err := r.removeFinalizer(ctx, upd); err != nil {
		// kube-controller-manager removes it when the claim is deleted.
		return true, nil
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
	if err == nil {
		r.ledger.Observe(upd)
	}
	return client.IgnoreNotFound(err)
}

// klogKey names a claim in logs the way klog.KObj does.
func klogKey(c client.Object) string { return c.GetNamespace() + "/" + c.GetName() }
