package claims

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/central"
	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/gang"
	"github.com/drastack/drastack/internal/ledger"
	"github.com/drastack/drastack/internal/placement"
)

// Gangs (issue 27). The pods of a gang (internal/gang: a PodGroup of the
// Workload API with the gang policy, or the resource.drastack.io/gang
// label) are placed together: the operator claims of every member that is
// not placed yet are decided in one ledger turn by one engine search
// across pods and nodes (allocator.GangSession), reserved as one placement
// unit (the gang's), written, and the gates of all members lifted only
// once every write committed. A unit that breaks is taken back as a whole;
// a gang that cannot be placed stays gated, with an Event on each member
// when the outcome changes and the condition GangCondition on it; a gang
// with fewer pods than its minimum count waits, and is reported after
// spec.claims.gangTimeout. gang.Next decides each step; this file only
// reads, calls and writes.

// The gang of a pod named by a PodGroup of the Workload API. Held where
// the API server serves PodGroups (GenericWorkload): in the e2e runs only
// TestClaimsGangWorkloadAPI's own cluster does, which the permission audit
// of the shared cluster does not see.
// +kubebuilder:rbac:groups=scheduling.k8s.io,resources=podgroups,verbs=get;list;watch
// The gang condition on member pods.
// +kubebuilder:rbac:groups="",resources=pods/status,verbs=patch

// Event reasons and the pod condition of gangs.
const (
	// EventGangIncomplete: a gang has had fewer pods than its minimum
	// count for longer than spec.claims.gangTimeout.
	EventGangIncomplete = "GangIncomplete"
	// GangCondition is the condition the operator sets on the gated
	// members of a gang it cannot place (False, with the outcome as the
	// reason and why as the message) and turns True when it places them.
	GangCondition corev1.PodConditionType = "resource.drastack.io/GangPlaced"
)

// outcomeIncomplete is the book's outcome of a gang that waits for pods:
// no change of the cluster's devices retries it (claimpolicy.RetriggeredBy).
const outcomeIncomplete claimpolicy.Outcome = EventGangIncomplete

// gangUnit names the placement unit of a gang.
func gangUnit(s gang.Spec) string {
	return "gang/" + string(s.Source) + "/" + s.Namespace + "/" + s.Name
}

// gangMember is one pod of a gang with its claims.
type gangMember struct {
	pod *corev1.Pod
	pc  podClaims
	m   gang.Member
}

func (m *gangMember) key() types.NamespacedName {
	return types.NamespacedName{Namespace: m.pod.Namespace, Name: m.pod.Name}
}

// gangReconcile handles a pod that belongs to a gang; it reports false
// for a pod the single-pod path handles: one in no gang, or one whose
// claims are all allocated and whose gate is lifted (kube-scheduler's
// now; the single-pod path places it again if it cannot run there).
func (p *placementReconciler) gangReconcile(ctx context.Context, cfg claimpolicy.Config, pod *corev1.Pod) (bool, ctrl.Result, error) {
	r := p.r
	decl, in, err := p.gangOf(ctx, pod)
	if err != nil && !isDeclarationError(err) {
		return true, ctrl.Result{}, err
	}
	if !in && err == nil {
		return false, ctrl.Result{}, nil
	}
	unit := unitOf(pod)
	if err == nil && decl.spec.Name != "" {
		unit = gangUnit(decl.spec)
	}
	self, err2 := p.gangMemberOf(ctx, cfg, pod, unit)
	if err2 != nil {
		return true, ctrl.Result{}, err2
	}
	if !self.m.InUnit() {
		return false, ctrl.Result{}, nil
	}
	key := self.key()
	switch {
	case err != nil:
		// The pod's gang cannot be read as declared: it is not placed
		// alone either.
		return true, ctrl.Result{}, p.gangReport(ctx, []*gangMember{self}, "", claimpolicy.OutcomeInvalid, string(claimpolicy.OutcomeInvalid), err.Error(), nil)
	case decl.spec.Name == "":
		log.FromContext(ctx).V(1).Info("Pod waits for its PodGroup", "pod", key, "podGroup", decl.waitFor)
		return true, ctrl.Result{}, nil
	}

	unlock := r.gangs.lock(gangUnit(decl.spec))
	defer unlock()
	members, err := p.gangMembers(ctx, cfg, decl)
	if err != nil {
		return true, ctrl.Result{}, err
	}
	if err := consistent(decl, members); err != nil {
		return true, ctrl.Result{}, p.gangReport(ctx, unitMembers(members), "", claimpolicy.OutcomeInvalid, string(claimpolicy.OutcomeInvalid), err.Error(), nil)
	}
	states := make([]gang.Member, len(members))
	firstSeen := r.now()
	for i, m := range members {
		states[i] = m.m
		if t := m.pod.CreationTimestamp.Time; !t.IsZero() && t.Before(firstSeen) {
			firstSeen = t
		}
	}
	step := gang.Next(decl.spec, states, pod.Name, firstSeen, r.now(), cfg.GangTimeout)
	logger := log.FromContext(ctx).WithValues("gang", decl.spec.Key(), "pod", key)
	switch step.Action {
	case gang.ActionNone:
		return false, ctrl.Result{}, nil
	case gang.ActionWaitCount:
		if step.Report {
			err := p.gangReport(ctx, unitMembers(members), "", outcomeIncomplete, EventGangIncomplete,
				step.Why+"; it keeps waiting (no member is placed before the gang has its minimum count)", nil)
			return true, ctrl.Result{}, err
		}
		logger.V(1).Info("Gang waits for its pods", "why", step.Why)
		return true, ctrl.Result{RequeueAfter: step.After}, nil
	case gang.ActionWaitClaims:
		logger.V(2).Info("Gang waits for its claims", "why", step.Why)
		return true, ctrl.Result{}, nil
	case gang.ActionFinish:
		res, err := p.finishGang(ctx, cfg, decl, members)
		return true, res, err
	case gang.ActionUndo:
		undone := false
		for _, m := range unitMembers(members) {
			if len(m.pc.placed) == 0 {
				continue
			}
			done, err := p.undo(ctx, m.pod, m.pc.placed, step.Why)
			if err != nil {
				return true, ctrl.Result{}, err
			}
			undone = undone || done
		}
		if undone || r.off.noUndo {
			return true, ctrl.Result{RequeueAfter: retryNowDelay}, nil
		}
		if step.Then != gang.ActionPlace {
			// Nothing could be taken back (claims other pods share): the
			// gang waits for its pods or its claims.
			logger.V(1).Info("Gang waits and keeps what cannot be taken back", "why", step.Why)
			return true, ctrl.Result{}, nil
		}
		// Nothing could be taken back (claims other pods share,
		// allocations not the operator's): as for a single pod, the rest
		// of the gang is placed around them.
		logger.V(1).Info("Gang placed in part keeps what cannot be taken back", "why", step.Why)
	case gang.ActionLift:
		res, err := p.liftGang(ctx, cfg, decl, members, step.Why)
		return true, res, err
	}
	res, err := p.placeGang(ctx, cfg, decl, members, key)
	return true, res, err
}

// gangMemberOf reads one pod's claims as a member of unit.
func (p *placementReconciler) gangMemberOf(ctx context.Context, cfg claimpolicy.Config, pod *corev1.Pod, unit string) (*gangMember, error) {
	pc, err := p.claimsOfUnit(ctx, cfg, pod, unit)
	if err != nil {
		return nil, err
	}
	m := &gangMember{pod: pod, pc: pc, m: gang.Member{
		Name: pod.Name, Bound: pod.Spec.NodeName != "", Gated: claimpolicy.HasGate(pod),
		ToPlace: len(pc.toPlace), Placed: len(pc.placed), Pending: len(pc.pending),
	}}
	for _, c := range pc.placed {
		if !claimpolicy.IsImmediate(cfg, c) && claimpolicy.Movable(c, FieldManager) {
			m.m.Movable++
		}
	}
	if len(pc.waiting) > 0 {
		m.m.Waiting = pc.waiting[0]
	}
	return m, nil
}

// unitMembers are the members whose placement is the gang's unit.
func unitMembers(members []*gangMember) []*gangMember {
	var out []*gangMember
	for _, m := range members {
		if m.m.InUnit() {
			out = append(out, m)
		}
	}
	return out
}

// placeGang places every unit member in one search, in one decision turn,
// and reserves the results as the gang's unit; then it writes them.
func (p *placementReconciler) placeGang(ctx context.Context, cfg claimpolicy.Config, decl gangDecl, members []*gangMember, self types.NamespacedName) (ctrl.Result, error) {
	r := p.r
	engine, ok := r.engine(cfg.Engine)
	if !ok {
		return ctrl.Result{}, fmt.Errorf("no allocation engine %q", cfg.Engine)
	}
	unit := unitMembers(members)
	for _, m := range unit {
		r.pods.markWaiting(m.key(), m.pod.CreationTimestamp.Time, r.now())
	}
	r.expireOld()
	fail := func(outcome claimpolicy.Outcome, err error, why func() string) (ctrl.Result, error) {
		gangPlacements.WithLabelValues(engine.Name(), string(outcome)).Inc()
		if rerr := p.gangReport(ctx, unit, engine.Name(), outcome, string(outcome), err.Error(), why); rerr != nil {
			return ctrl.Result{}, rerr
		}
		return r.retryOf(ctx, self, outcome, err)
	}

	view, err := p.gangNodes(ctx, decl, members)
	if err != nil {
		return ctrl.Result{}, err
	}
	if view.domainErr != nil {
		return fail(claimpolicy.OutcomeUnsatisfiable, fmt.Errorf("%w: %w", allocator.ErrUnsatisfiable, view.domainErr), nil)
	}
	g := allocator.Gang{Name: decl.spec.Key(), Constraints: decl.spec.Constraints}
	filters := make([]map[string]string, len(unit))
	for i, m := range unit {
		fit, reasons := view.candidates(m, r.nodes.avoided(m.key()))
		filters[i] = reasons
		if len(fit) == 0 {
			return fail(claimpolicy.OutcomeUnsatisfiable, fmt.Errorf("%w: gang %s: pod %s fits no node: %s%s", allocator.ErrUnsatisfiable,
				decl.spec.Key(), m.pod.Name, placement.Summary(view.total, reasons), noCentralHint(cfg)), nil)
		}
		for j, c := range m.pc.toPlace {
			c, err := r.ensureFinalizer(ctx, c)
			if err != nil || c == nil {
				return ctrl.Result{RequeueAfter: retryNowDelay}, err
			}
			m.pc.toPlace[j] = c
		}
		gm := allocator.GangMember{Name: m.pod.Namespace + "/" + m.pod.Name}
		for _, c := range m.pc.toPlace {
			scoped, denied := r.scoped(cfg, c)
			if len(denied) > 0 {
				return fail(claimpolicy.OutcomeUnsatisfiable, deniedError(c, denied), nil)
			}
			gm.Claims = append(gm.Claims, scoped)
		}
		for _, c := range m.pc.scheduler {
			gm.Claims = append(gm.Claims, central.ForScheduler(c))
		}
		for _, n := range fit {
			gm.Nodes = append(gm.Nodes, n.Name)
		}
		g.Members = append(g.Members, gm)
	}

	var (
		outcome = claimpolicy.OutcomeUnsatisfiable
		last    error
		chosen  []allocator.MemberResult
		took    time.Duration
	)
	now := r.now()
	unitName := gangUnit(decl.spec)
	err = r.ledger.Decide(ctx, decl.spec.Namespace, engine, func(d *ledger.Decision) error {
		gs, ok := d.Session().(allocator.GangSession)
		if !ok {
			outcome, last = claimpolicy.OutcomeNotSupported, fmt.Errorf("%w: the %s engine does not place gangs (spec.claims.engine: native does)", allocator.ErrNotSupported, engine.Name())
			return nil
		}
		actx, cancel := context.WithTimeout(ctx, cfg.AllocationTimeout)
		defer cancel()
		start := time.Now()
		defer func() { took = time.Since(start) }()
		search := g
		search.Members = slices.Clone(g.Members)
		// Each member's claims fit its node alone; members placed on one
		// node must also fit it together (cpu, memory, pods). A member
		// that does not is searched again without that node.
		for range len(unit) + 1 {
			res, err := gs.AllocateGang(actx, search, allocator.Options{MaxSteps: r.MaxSteps, Policy: cfg.PlacementPolicy})
			outcome, last = classify(actx, err, cfg)
			if outcome != claimpolicy.OutcomeAllocated {
				return nil
			}
			i, why := view.together(unit, res)
			if i < 0 {
				chosen = res
				break
			}
			nodes := slices.DeleteFunc(slices.Clone(search.Members[i].Nodes), func(n string) bool { return n == res[i].Node })
			search.Members[i].Nodes = nodes
			filters[i][res[i].Node] = why
			outcome, last = claimpolicy.OutcomeUnsatisfiable, fmt.Errorf("%w: gang %s: pod %s does not fit node %s beside the other members placed there: %s",
				allocator.ErrUnsatisfiable, decl.spec.Key(), unit[i].pod.Name, res[i].Node, why)
			if len(nodes) == 0 {
				return nil
			}
		}
		if chosen == nil {
			return nil
		}
		for i, m := range unit {
			for j, c := range m.pc.toPlace {
				if err := d.Reserve(c, stamped(chosen[i].Results[j].Allocation, now), unitName); err != nil {
					// The turn fails: the ledger drops the unit's other
					// reservations, none of which was written.
					return err
				}
			}
		}
		return nil
	})
	if res, done, err := afterTurn(err); done {
		return res, err
	}
	if chosen == nil {
		if outcome == claimpolicy.OutcomeAllocated {
			outcome = claimpolicy.OutcomeUnsatisfiable
		}
		if took > 0 { // the engine ran
			observeEngine(engine.Name(), outcome, took)
		}
		if outcome == claimpolicy.OutcomeUnsatisfiable && last != nil {
			last = fmt.Errorf("%w%s", last, noCentralHint(cfg))
		}
		return fail(outcome, last, func() string { return r.gangVerdict(ctx, outcome, g, filters) })
	}
	gangPlacements.WithLabelValues(engine.Name(), string(claimpolicy.OutcomeAllocated)).Inc()
	observeEngine(engine.Name(), claimpolicy.OutcomeAllocated, took)
	for i, m := range unit {
		r.nodes.placed(m.key(), chosen[i].Node)
		r.gangs.placed(m.pod, chosen[i].Node)
		placementsTotal.WithLabelValues(engine.Name(), string(claimpolicy.OutcomeAllocated)).Inc()
		m.pc.pending, m.pc.toPlace = m.pc.toPlace, nil
		m.m.Pending, m.m.ToPlace = len(m.pc.pending), 0
	}
	log.FromContext(ctx).V(1).Info("Placed gang", "gang", decl.spec.Key(), "pods", len(unit))
	return p.finishGang(ctx, cfg, decl, members)
}

// gangReport reports an outcome of a gang on each of the members given:
// an Event and the condition GangCondition when the outcome is news for
// the member, and the outcome on its claims for the DRAStack counts. The
// engine is named in the Event when set (outcomes of a search). why,
// when set, adds the explanation's verdict to the Events (computed once).
func (p *placementReconciler) gangReport(ctx context.Context, members []*gangMember, engine string, outcome claimpolicy.Outcome, reason, msg string, why func() string) error {
	r := p.r
	verdict, explained := "", false
	for _, m := range members {
		key := m.key()
		if r.pods.record(key, failure{outcome: outcome, message: msg}) {
			note := msg
			if why != nil && r.Recorder != nil {
				if !explained {
					verdict, explained = why(), true
				}
				note = withVerdict(msg, verdict)
			}
			hint := retryHint(outcome)
			if outcome == outcomeIncomplete {
				hint = ""
			}
			if engine != "" {
				note = engine + " engine: " + note
			}
			r.event(m.pod, corev1.EventTypeWarning, reason, "Allocate", "%s%s", note, hint)
			if err := p.setGangCondition(ctx, m.pod, corev1.ConditionFalse, reason, note); err != nil {
				return err
			}
		}
		for _, ref := range claimpolicy.PodClaims(m.pod) {
			if ref.ClaimName != "" {
				r.claims.record(types.NamespacedName{Namespace: m.pod.Namespace, Name: ref.ClaimName}, failure{outcome: outcome, message: msg})
			}
		}
	}
	return nil
}

// setGangCondition writes GangCondition on a pod (a strategic merge patch
// of status.conditions, keyed by type, so other conditions are left
// alone). True is written only over a False one: a gang placed at the
// first attempt costs no write.
func (p *placementReconciler) setGangCondition(ctx context.Context, pod *corev1.Pod, status corev1.ConditionStatus, reason, msg string) error {
	i := slices.IndexFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == GangCondition })
	if status == corev1.ConditionTrue && i < 0 {
		return nil
	}
	if i >= 0 && pod.Status.Conditions[i].Status == status && pod.Status.Conditions[i].Reason == reason && pod.Status.Conditions[i].Message == shorten(msg) {
		return nil
	}
	upd := pod.DeepCopy()
	cond := corev1.PodCondition{Type: GangCondition, Status: status, Reason: reason, Message: shorten(msg), LastTransitionTime: metaNow(p.r.now())}
	if i >= 0 {
		if upd.Status.Conditions[i].Status == status {
			cond.LastTransitionTime = upd.Status.Conditions[i].LastTransitionTime
		}
		upd.Status.Conditions[i] = cond
	} else {
		upd.Status.Conditions = append(upd.Status.Conditions, cond)
	}
	err := p.r.Client.Status().Patch(ctx, upd, client.StrategicMergeFrom(pod), client.FieldOwner(FieldManager))
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("set condition %s of pod %s/%s: %w", GangCondition, pod.Namespace, pod.Name, err)
	}
	if err == nil {
		pod.Status.Conditions = upd.Status.Conditions
	}
	return nil
}

// consistent checks that the members agree on the gang (gang.Consistent).
func consistent(decl gangDecl, members []*gangMember) error {
	specs := make([]gang.Spec, 0, len(members))
	for _, m := range members {
		s, _, err := gang.Of(m.pod, decl.pg)
		if err != nil {
			return err
		}
		specs = append(specs, s)
	}
	return gang.Consistent(specs)
}
