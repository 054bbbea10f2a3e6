package pool

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/controller/statusapply"
	stackpkg "github.com/drastack/drastack/internal/stack"
)

// DefaultStackStatusInterval is the least time between two writes of the
// DRAStack's pool status. A driver rollout changes hundreds of pools within
// a second; the DRAStack needs the result, not every step.
const DefaultStackStatusInterval = time.Second

// retryAfterError is how long the writer waits after a failed write.
const retryAfterError = 5 * time.Second

// stackPoolStatus is the part of DRAStack status this controller owns.
type stackPoolStatus struct {
	Conditions []metav1.Condition  `json:"conditions"`
	Summary    stackPoolSummary    `json:"summary"`
	Pools      v1alpha1.PoolCounts `json:"pools"`
}

type stackPoolSummary struct {
	Pools string `json:"pools"`
}

// stackWriter writes the aggregate of the board into the DRAStack,
// debounced: it wakes when the board is marked dirty, waits until the
// interval since its last write has passed, and writes only when the
// result differs from what the DRAStack says. It runs only on the leader.
type stackWriter struct {
	client   client.Client
	board    *board
	interval time.Duration
	now      func() time.Time
}

// NeedLeaderElection: only the leader validates pools, so only it knows
// the aggregate.
func (w *stackWriter) NeedLeaderElection() bool { return true }

// Start runs until ctx ends.
func (w *stackWriter) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("drastack-pool-status")
	interval := w.interval
	if interval <= 0 {
		interval = DefaultStackStatusInterval
	}
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.board.dirty:
		}
		if wait := interval - time.Since(last); wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
		}
		last = time.Now()
		if err := w.write(ctx); err != nil {
			logger.Error(err, "Writing the pool status of the DRAStack failed; retrying")
			go func() {
				select {
				case <-ctx.Done():
				case <-time.After(retryAfterError):
					w.board.markDirty()
				}
			}()
		}
	}
}

// write applies the current aggregate when it differs from the DRAStack's.
func (w *stackWriter) write(ctx context.Context) error {
	var st v1alpha1.DRAStack
	if err := w.client.Get(ctx, client.ObjectKey{Name: v1alpha1.DRAStackName}, &st); err != nil {
		// Without a DRAStack there is nowhere to report; its creation
		// marks the board dirty again.
		return client.IgnoreNotFound(err)
	}
	counts, cond := aggregate(w.board.summaries(), st.Generation)
	summary := stackpkg.PoolSummary(&counts)
	if upToDate(&st.Status, counts, summary, cond) {
		return nil
	}
	status := stackPoolStatus{
		Conditions: statusapply.KeepTransitionTimes(st.Status.Conditions, []metav1.Condition{cond}, metav1.NewTime(w.now()).Rfc3339Copy()),
		Summary:    stackPoolSummary{Pools: summary},
		Pools:      counts,
	}
	err := statusapply.Apply(ctx, w.client, v1alpha1.GroupVersion.String(), "DRAStack", "", st.Name, FieldManager, status)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// upToDate compares the fields this controller owns, ignoring the
// condition's transition time.
func upToDate(st *v1alpha1.DRAStackStatus, counts v1alpha1.PoolCounts, summary string, cond metav1.Condition) bool {
	if st.Pools == nil || *st.Pools != counts || st.Summary == nil || st.Summary.Pools != summary {
		return false
	}
	cur := meta.FindStatusCondition(st.Conditions, cond.Type)
	return cur != nil && cur.Status == cond.Status && cur.Reason == cond.Reason &&
		cur.Message == cond.Message && cur.ObservedGeneration == cond.ObservedGeneration
}
