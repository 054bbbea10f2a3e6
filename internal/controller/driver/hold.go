package driver

import (
	"context"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/controller/statusapply"
	"github.com/drastack/drastack/internal/note"
	"github.com/drastack/drastack/internal/stack"
)

// ReasonSpecInvalid is the reason of Progressing while the spec is
// invalid: nothing is installed, changed or removed.
const ReasonSpecInvalid = "SpecInvalid"

// holdRecheck is when a held spec is checked again without an event: what
// made it invalid may be in the cluster (a namespace someone else created
// and then deleted), which this controller does not watch.
const holdRecheck = 5 * time.Second

// hold is the reconcile of a spec the whole-spec check refuses: nothing
// is applied, pruned or removed, so the drivers of the last valid spec
// keep running as they are (the objects it applied stay; one deleted
// meanwhile comes back once the spec is valid again). Its status says so:
// Progressing is False with reason SpecInvalid at this generation, the
// drivers' entries and the other conditions stay as they were judged.
func (r *Reconciler) hold(ctx context.Context, st *v1alpha1.DRAStack, v stack.Verdict, now time.Time) (ctrl.Result, error) {
	msgs := v.Messages()
	log.FromContext(ctx).Info("The spec is invalid; nothing is applied, pruned or removed until it is valid", "generation", st.Generation, "errors", msgs)
	progressing := metav1.Condition{
		Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionFalse, Reason: ReasonSpecInvalid, ObservedGeneration: st.Generation,
		Message: "the spec is invalid (see SpecValid: " + strings.Join(msgs, "; ") + "): no driver is installed, changed or removed until it is valid; the drivers of the last valid spec keep running",
	}
	progressing.Message = shortenCondition(progressing.Message)
	conds := []metav1.Condition{progressing}
	for _, t := range []string{v1alpha1.ConditionDriversReady, v1alpha1.ConditionDegraded} {
		if c := meta.FindStatusCondition(st.Status.Conditions, t); c != nil {
			conds = append(conds, *c)
		}
	}
	status := v1alpha1.DRAStackStatus{
		Conditions: statusapply.KeepTransitionTimes(st.Status.Conditions, conds, metav1.NewTime(now)),
		Drivers:    st.Status.Drivers,
	}
	if st.Status.Summary != nil && st.Status.Summary.Drivers != "" {
		status.Summary = &v1alpha1.StackSummary{Drivers: st.Status.Summary.Drivers}
	}
	if err := statusapply.Apply(ctx, r.Client, v1alpha1.GroupVersion.String(), "DRAStack", "", st.Name, FieldManager, status); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: holdRecheck}, nil
}

// maxConditionMessage bounds the held Progressing message (the spec's
// errors are in SpecValid in full).
const maxConditionMessage = 4000

func shortenCondition(s string) string {
	return note.Shorten(s, maxConditionMessage)
}
