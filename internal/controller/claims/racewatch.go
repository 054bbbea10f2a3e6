package claims

import (
	"context"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	claimspkg "github.com/drastack/drastack/internal/claims"
)

// raceDebounce gathers the allocations of a burst into one check. It is
// short against the time a lost race may stay unnoticed: until the check,
// a pod might reserve the losing claim and make the double allocation
// permanent.
const raceDebounce = 50 * time.Millisecond

// watchRaces runs until ctx ends: whenever an allocation appears (a write
// of the operator, or kube-scheduler's), it checks every allocation for a
// device or counter given twice, marks the claims that must give way as
// suspects and queues them. The claim loop re-checks each suspect with
// fresh data before it touches it; claims that are no suspects are not
// checked one by one, so a burst of N allocations costs one check per
// burst, not N checks of N claims.
func (r *Reconciler) watchRaces(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	logger := log.FromContext(ctx).WithName("race-watch")
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-r.races:
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(raceDebounce):
			}
			if err := r.checkRaces(ctx, q); err != nil {
				logger.Error(err, "Race check failed; retrying at the next allocation")
			}
		}
	}()
	return nil
}

func (r *Reconciler) checkRaces(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	start := r.now()
	if err := r.sweepHolds(ctx); err != nil {
		return err
	}
	pools, err := r.snap.currentPools(ctx)
	if err != nil {
		return err
	}
	all, err := r.snap.allocated(ctx)
	if err != nil {
		return err
	}
	losers := claimspkg.Losers(pools, all, movable)
	lost := make(map[types.UID]bool, len(losers))
	r.mu.Lock()
	for _, l := range losers {
		lost[l.Claim.UID] = true
		r.suspects[l.Claim.UID] = true
	}
	r.raceCheckStart = start
	r.mu.Unlock()
	for _, l := range losers {
		q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: l.Claim.Namespace, Name: l.Claim.Name}})
	}
	kept := make([]*resourceapi.ResourceClaim, 0, len(all))
	for _, c := range all {
		if !lost[c.UID] {
			kept = append(kept, c)
		}
	}
	unresolved := claimspkg.FindRaces(pools, kept)
	unresolvedRaces.Set(float64(len(unresolved)))
	if len(unresolved) > 0 {
		log.FromContext(ctx).Info("Devices or counters are given twice and nobody may take them back; the pools report Degraded",
			"races", len(unresolved), "first", unresolved[0].String())
	}
	return nil
}

// sweepHolds deletes the holds that hold nothing any more (claims.StaleHolds).
func (r *Reconciler) sweepHolds(ctx context.Context) error {
	var list resourceapi.ResourceClaimList
	if err := r.Client.List(ctx, &list, client.HasLabels{claimspkg.HoldLabel}); err != nil {
		return err
	}
	if len(list.Items) == 0 {
		return nil
	}
	var all resourceapi.ResourceClaimList
	if err := r.Client.List(ctx, &all, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	claims := make([]*resourceapi.ResourceClaim, len(all.Items))
	for i := range all.Items {
		claims[i] = &all.Items[i]
	}
	for _, h := range claimspkg.StaleHolds(claims, r.now()) {
		uid := h.UID
		if err := r.Client.Delete(ctx, h, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		log.FromContext(ctx).V(1).Info("Deleted a hold whose keeper released the device", "hold", client.ObjectKeyFromObject(h))
	}
	return nil
}

// suspect reports whether the race watch found the claim losing a race.
func (r *Reconciler) suspect(uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.suspects[uid]
}

func (r *Reconciler) clearSuspect(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.suspects, uid)
}

// raceChecked reports whether a race check started after the claim's
// allocation had settled into the cache, so that a race visible with it
// would have made it a suspect.
func (r *Reconciler) raceChecked(c *resourceapi.ResourceClaim) bool {
	at, ok := r.allocatedAt(c)
	if !ok {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.raceCheckStart.After(at.Add(settleMin))
}
