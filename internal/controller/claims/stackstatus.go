package claims

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/central"
	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/controller/statusapply"
)

// stackClaimStatus is the part of the DRAStack status this controller owns.
type stackClaimStatus struct {
	Conditions []metav1.Condition   `json:"conditions"`
	Claims     v1alpha1.ClaimCounts `json:"claims"`
}

// statusWriter recomputes the claim counts and ClaimsReady every interval
// from the cache, updates the gauges, and writes the DRAStack when
// something changed. Polling rather than reacting keeps a burst of
// thousands of claims from becoming thousands of status writes, and lets
// ClaimsReady notice a backlog that no event announces.
type statusWriter struct {
	r        *Reconciler
	interval time.Duration
	// central keeps the partition's size gauge.
	central centralGauge
}

// NeedLeaderElection: only the leader allocates, so only it knows the
// outcomes.
func (w *statusWriter) NeedLeaderElection() bool { return true }

// Start runs until ctx ends.
func (w *statusWriter) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("drastack-claim-status")
	interval := w.interval
	if interval <= 0 {
		interval = DefaultStatusInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := w.write(ctx); err != nil {
			logger.Error(err, "Writing the claim status of the DRAStack failed; retrying")
		}
	}
}

func (w *statusWriter) write(ctx context.Context) error {
	r := w.r
	var st v1alpha1.DRAStack
	if err := r.Client.Get(ctx, client.ObjectKey{Name: v1alpha1.DRAStackName}, &st); err != nil {
		return client.IgnoreNotFound(err)
	}
	cfg := claimpolicy.ConfigFrom(&st)
	if !cfg.Active {
		w.central.set(nil)
		return nil
	}
	var claims resourceapi.ResourceClaimList
	if err := r.Client.List(ctx, &claims, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	if err := w.setCentral(ctx, cfg, claims.Items); err != nil {
		return err
	}
	entries := make([]claimpolicy.Entry, 0, len(claims.Items))
	var outcomes []claimpolicy.Outcome
	for i := range claims.Items {
		c := &claims.Items[i]
		if claimpolicy.SelectClaim(cfg, c) == claimpolicy.WhyNone {
			continue
		}
		if by := claimpolicy.AllocatedBy(c); by != "" && by != FieldManager {
			continue // allocated by another allocator: not the operator's work
		}
		key := types.NamespacedName{Namespace: c.Namespace, Name: c.Name}
		e := claimpolicy.Entry{Key: key.String(), Allocated: c.Status.Allocation != nil}
		if !e.Allocated {
			if f, ok := r.claims.failureOf(key); ok {
				e.Outcome = f.outcome
			}
			e.Since = r.claims.waitingSince(key, c.CreationTimestamp.Time)
			outcomes = append(outcomes, e.Outcome)
		}
		entries = append(entries, e)
	}
	// One read of the ledger: its reservations, oldest first.
	res := r.ledger.Reservations()
	ambiguous := 0
	for _, p := range res {
		if p.Ambiguous {
			ambiguous++
		}
	}
	reservations.WithLabelValues("pending").Set(float64(len(res)))
	reservations.WithLabelValues("ambiguous").Set(float64(ambiguous))
	if len(res) > 0 {
		oldestReservation.Set(r.now().Sub(res[0].Since).Seconds())
	} else {
		oldestReservation.Set(0)
	}
	setPending(pendingCounts(outcomes))
	if r.podCache != nil {
		var pods corev1.PodList
		if err := r.podCache.List(ctx, &pods, client.UnsafeDisableDeepCopy); err == nil {
			n := 0
			for i := range pods.Items {
				if claimpolicy.HasGate(&pods.Items[i]) {
					n++
				}
			}
			gatedPods.Set(float64(n))
		}
	}

	counts, cond := claimpolicy.Summarize(entries, r.now(), st.Generation)
	if upToDate(&st.Status, counts, cond) {
		return nil
	}
	status := stackClaimStatus{
		Conditions: statusapply.KeepTransitionTimes(st.Status.Conditions, []metav1.Condition{cond}, metav1.NewTime(r.now()).Rfc3339Copy()),
		Claims:     counts,
	}
	err := statusapply.Apply(ctx, r.Client, v1alpha1.GroupVersion.String(), "DRAStack", "", st.Name, FieldManager, status)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// setCentral updates the partition's size: the central devices per
// driver, and those an allocated claim holds (whoever allocated it). A
// spec the partition cannot be built from leaves the gauge as it was: the
// DRAStack controller reports that spec, and the taint loop keeps the
// rules as they are too.
func (w *statusWriter) setCentral(ctx context.Context, cfg claimpolicy.Config, claims []resourceapi.ResourceClaim) error {
	if len(cfg.Central) == 0 {
		w.central.set(nil)
		return nil
	}
	in, err := w.r.partitionInputs(ctx, cfg)
	if err != nil {
		return err
	}
	part, err := central.NewPartition(in)
	if err != nil {
		// Reported by the DRAStack controller (SpecValid), not here every
		// interval.
		return nil
	}
	allocations := make([]*resourceapi.AllocationResult, 0, len(claims))
	for i := range claims {
		allocations = append(allocations, claims[i].Status.Allocation)
	}
	w.central.set(central.Size(part, in.Slices, central.AllocatedDevices(allocations)))
	return nil
}

// upToDate compares the fields this controller owns, ignoring the
// condition's transition time.
func upToDate(st *v1alpha1.DRAStackStatus, counts v1alpha1.ClaimCounts, cond metav1.Condition) bool {
	if st.Claims == nil || *st.Claims != counts {
		return false
	}
	cur := meta.FindStatusCondition(st.Conditions, cond.Type)
	return cur != nil && cur.Status == cond.Status && cur.Reason == cond.Reason &&
		cur.Message == cond.Message && cur.ObservedGeneration == cond.ObservedGeneration
}
