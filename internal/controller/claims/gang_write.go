package claims

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/explain"
	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/placement"
)

// finishGang writes the pending reservations of the gang's unit, all
// members' at once, and acts on how they ended, as finishUnit does for one
// pod: all committed lifts every member's gate; one that can never commit
// breaks the unit (the next reconcile takes the others back and places the
// gang again); one without a definite answer is sent again later.
func (p *placementReconciler) finishGang(ctx context.Context, cfg claimpolicy.Config, decl gangDecl, members []*gangMember) (ctrl.Result, error) {
	r := p.r
	unit := unitMembers(members)
	type write struct {
		m       *gangMember
		claim   *resourceapi.ResourceClaim
		outcome writeOutcome
		written *resourceapi.ResourceClaim
		err     error
	}
	var writes []*write
	for _, m := range unit {
		for _, c := range m.pc.pending {
			writes = append(writes, &write{m: m, claim: c})
		}
	}
	r.writeAll(len(writes), func(i int) {
		w := writes[i]
		w.outcome, w.written, w.err = r.writeReserved(ctx, w.claim.UID)
	})
	broken, ambiguous := false, false
	for _, w := range writes {
		key := w.m.key()
		switch w.outcome {
		case writeLost:
			return ctrl.Result{}, nil
		case writeConfirmed:
			if w.written != nil {
				allocationsTotal.WithLabelValues(cfg.Engine, string(claimpolicy.OutcomeAllocated)).Inc()
				observeLatency(cfg.Engine, claimpolicy.OutcomeAllocated, r.pods.seenSince(key, r.now()), r.now(), 1)
				r.claims.forget(types.NamespacedName{Namespace: w.claim.Namespace, Name: w.claim.Name})
				r.event(w.written, corev1.EventTypeNormal, EventAllocated, "Allocate", "allocated by the %s engine for pod %s of gang %s%s: %s",
					cfg.Engine, w.m.pod.Name, decl.spec.Key(), onNode(r.gangs.nodeOf(w.m.pod)), deviceList(w.written.Status.Allocation))
			}
		case writeReleased:
			broken = true
			if errors.Is(w.err, errRefused) {
				ck := types.NamespacedName{Namespace: w.claim.Namespace, Name: w.claim.Name}
				if r.claims.record(ck, failure{outcome: claimpolicy.OutcomeInvalid, message: w.err.Error()}) {
					r.event(w.claim, corev1.EventTypeWarning, EventRefused, "Allocate", "%v (not retried until the claim changes)", w.err)
				}
			}
		case writeAmbiguous:
			ambiguous = true
			log.FromContext(ctx).V(1).Info("Allocation write without a definite answer; sending it again", "gang", decl.spec.Key(), "claim", w.claim.Name, "err", w.err)
		}
	}
	switch {
	case ambiguous:
		return ctrl.Result{RequeueAfter: r.backoff.When(unit[0].key())}, nil
	case broken:
		unitsBroken.Inc()
		// The next reconcile sees the gang placed in part and takes it
		// back (gang.ActionUndo).
		return ctrl.Result{RequeueAfter: retryNowDelay}, nil
	}
	for _, m := range unit {
		if len(m.pc.toPlace) > 0 || len(m.pc.waiting) > 0 {
			// A member joined after the decision, or waits for a claim:
			// the next step places the gang again with it, or takes the
			// others back while it waits (gang.Next).
			return ctrl.Result{RequeueAfter: retryNowDelay}, nil
		}
	}
	return p.liftGang(ctx, cfg, decl, members, fmt.Sprintf("gang %s placed", decl.spec.Key()))
}

// liftGang lifts the gates of every unit member once all their operator
// claims are allocated. Each member must still fit a node that suits its
// claims (else the gang is taken back and placed again, as one pod would
// be); a member whose devices do not pin it to the node the placement
// counted it on (devices of several hosts) is pinned there in the same
// write (placement.PinToNode), which a gated pod allows.
func (p *placementReconciler) liftGang(ctx context.Context, cfg claimpolicy.Config, decl gangDecl, members []*gangMember, why string) (ctrl.Result, error) {
	r := p.r
	unit := unitMembers(members)
	view, err := p.gangNodes(ctx, decl, members)
	if err != nil {
		return ctrl.Result{}, err
	}
	type lift struct {
		m    *gangMember
		node string
		pin  bool
	}
	var lifts []lift
	var problem string
	for _, m := range unit {
		fit, reasons := view.candidates(m, nil)
		selectors := p.allocationSelectors(m)
		node := r.gangs.nodeOf(m.pod)
		if node == "" {
			// Placed by another process or before a restart: the node is
			// known only if the allocations leave one.
			var only []*corev1.Node
			for _, n := range fit {
				if matchesAll(n, selectors) {
					only = append(only, n)
				}
			}
			if len(only) == 1 {
				node = only[0].Name
			}
		}
		switch {
		case len(fit) == 0:
			problem = fmt.Sprintf("no node that suits pod %s can use its claims now (%s)", m.pod.Name, placement.Summary(view.total, reasons))
		case node == "":
			problem = fmt.Sprintf("the node of pod %s is not known to this process and its claims do not name one", m.pod.Name)
		case !containsNode(fit, node):
			problem = fmt.Sprintf("pod %s no longer fits node %s: %s", m.pod.Name, node, reasons[node])
		}
		if problem != "" {
			break
		}
		lifts = append(lifts, lift{m: m, node: node, pin: placement.NeedsPin(node, fit, selectors)})
	}
	if problem != "" {
		for _, m := range unit {
			if _, err := p.undo(ctx, m.pod, m.pc.placed, problem); err != nil {
				return ctrl.Result{}, err
			}
		}
		return ctrl.Result{RequeueAfter: retryNowDelay}, nil
	}
	requeue := false
	for _, l := range lifts {
		pod := l.m.pod
		if !claimpolicy.HasGate(pod) {
			r.forgetPod(l.m.key())
			continue
		}
		upd, pinned := pod, false
		if l.pin {
			upd, pinned, err = placement.PinToNode(pod, view.nodes[l.node])
			if err != nil {
				return ctrl.Result{}, err
			}
		}
		upd = upd.DeepCopy()
		upd.Spec.SchedulingGates = claimpolicy.WithoutGate(pod.Spec.SchedulingGates)
		if err := r.Client.Patch(ctx, upd, optimistic(pod), client.FieldOwner(FieldManager)); err != nil {
			switch {
			case apierrors.IsNotFound(err):
				continue
			case apierrors.IsConflict(err):
				// The pod's update event brings the gang back.
				requeue = true
				continue
			}
			return ctrl.Result{}, fmt.Errorf("remove the scheduling gate of pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		note := why + ": claims allocated for node " + l.node
		if pinned {
			note += " (pinned there: its devices span several nodes)"
		}
		r.event(pod, corev1.EventTypeNormal, EventGateRemoved, "Release", "removed scheduling gate %s: %s", claimpolicy.SchedulingGate, note)
		r.forgetPod(l.m.key())
		if err := p.setGangCondition(ctx, upd, corev1.ConditionTrue, "Placed", note); err != nil {
			return ctrl.Result{}, err
		}
	}
	if requeue {
		return ctrl.Result{RequeueAfter: retryNowDelay}, nil
	}
	return ctrl.Result{}, nil
}

// allocationSelectors are the node selectors of a member's allocated and
// reserved operator claims and of its other allocated claims.
func (p *placementReconciler) allocationSelectors(m *gangMember) []*corev1.NodeSelector {
	var out []*corev1.NodeSelector
	for _, c := range m.pc.pinned {
		out = append(out, c.Status.Allocation.NodeSelector)
	}
	for _, c := range m.pc.pending {
		if a := p.r.ledger.StateOf(c.UID).Allocation; a != nil {
			out = append(out, a.NodeSelector)
		}
	}
	return out
}

// matchesAll: the node matches every selector (nil matches all).
func matchesAll(n *corev1.Node, selectors []*corev1.NodeSelector) bool {
	for _, s := range selectors {
		if s == nil {
			continue
		}
		if ok, err := corev1helpers.MatchNodeSelectorTerms(n, s); err != nil || !ok {
			return false
		}
	}
	return true
}

func containsNode(nodes []*corev1.Node, name string) bool {
	for _, n := range nodes {
		if n.Name == name {
			return true
		}
	}
	return false
}

// gangVerdict explains, for an Unsatisfiable Event, why the gang cannot
// be placed (explain.ExplainGang): the member that fits nowhere even
// alone, or that each fits alone but not all together. Like verdict, it
// runs only when the Event is news, on a session of its own, and is empty
// when there is nothing to add.
func (r *Reconciler) gangVerdict(ctx context.Context, outcome claimpolicy.Outcome, g allocator.Gang, filters []map[string]string) string {
	if outcome != claimpolicy.OutcomeUnsatisfiable || len(g.Members) == 0 {
		return ""
	}
	view, err := r.source.Read(ctx)
	if err != nil {
		log.FromContext(ctx).V(1).Info("No verdict for the gang's Event", "err", err)
		return ""
	}
	in := view.Inputs
	in.Allocated = r.ledger.Allocated()
	eg := explain.Gang{Name: g.Name, Constraints: g.Constraints}
	for i, m := range g.Members {
		eg.Members = append(eg.Members, explain.GangMember{Pod: m.Name, Claims: m.Claims, NodeFilter: filters[i]})
	}
	namespace, _, _ := strings.Cut(g.Name, "/")
	rep, err := explain.ExplainGang(ctx, nil, in, eg, explain.Options{Timeout: verdictTimeout, MaxSteps: r.MaxSteps, Namespace: namespace})
	if err != nil || rep.Fits {
		log.FromContext(ctx).V(1).Info("No verdict for the gang's Event", "err", err)
		return ""
	}
	return rep.Verdict
}
