package claims

import (
	"context"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/drastack/drastack/internal/allocator/explain"
	"github.com/drastack/drastack/internal/claimpolicy"
)

// verdictTimeout bounds the explanation behind an Unsatisfiable Event. It
// runs only when the Event is news, outside the engine lock, on a session
// of its own.
const verdictTimeout = 2 * time.Second

// verdict explains, for an Unsatisfiable Event, why claims (as the engine
// got them: through central.ForOperator or ForScheduler) cannot be
// allocated: the one-line verdict of kubectl dra explain, naming the
// request, the step and what is short or who holds the devices. nodeFilter
// and total are a pod's node filters (nil for an immediate claim). The
// explanation is the native engine's, whichever engine allocates (as
// kubectl dra explain explains kube-scheduler's claims; the differential
// test keeps the engines in agreement). It is empty when there is nothing
// to add: another outcome, or an explanation that failed or found that
// the claims fit after all (the state changed meanwhile, or the engines
// disagree: then the engine's own message stands alone).
func (r *Reconciler) verdict(ctx context.Context, outcome claimpolicy.Outcome, claims []*resourceapi.ResourceClaim, nodeFilter map[string]string, total int) string {
	if outcome != claimpolicy.OutcomeUnsatisfiable {
		return ""
	}
	view, err := r.source.Read(ctx)
	if err != nil {
		log.FromContext(ctx).V(1).Info("No verdict for the Event", "err", err)
		return ""
	}
	in := view.Inputs
	in.Allocated = r.ledger.Allocated()
	var namespace string
	if len(claims) > 0 {
		// The Event goes to a tenant: it names claims of its namespace
		// only.
		namespace = claims[0].Namespace
	}
	rep, err := explain.Explain(ctx, nil, in, claims, explain.Options{
		Timeout: verdictTimeout, MaxSteps: r.MaxSteps, NodeFilter: nodeFilter, NodesTotal: total, Namespace: namespace,
	})
	if err != nil || rep.Fits || rep.Invalid {
		log.FromContext(ctx).V(1).Info("No verdict for the Event", "err", err)
		return ""
	}
	return rep.Verdict
}

// withVerdict is the message of an Unsatisfiable Event: the verdict first,
// since it names the obstacle and the Event note is cut at maxNote, then
// the engine's own message.
func withVerdict(msg, verdict string) string {
	if verdict == "" || verdict == msg {
		return msg
	}
	return verdict + " (" + msg + ")"
}
