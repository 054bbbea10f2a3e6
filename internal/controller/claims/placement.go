package claims

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/central"
	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/ledger"
	"github.com/drastack/drastack/internal/placement"
)

// Event reasons on pods.
const (
	// EventGateRemoved: the operator placed the pod's claims and removed
	// its scheduling gate.
	EventGateRemoved = "AllocationGateRemoved"
	// EventUnplaceable: no node fits the pod and its claims now.
	EventUnplaceable = "Unsatisfiable"
)

// placementReconciler places the operator claims of unscheduled pods, all
// of a pod's operator claims as one unit (docs/allocation-protocol.md,
// section 3): one engine call on one node where the pod fits
// (placement.Candidates) and where its kube-scheduler claims fit too, one
// reservation per claim, then the writes; the gate is lifted only when
// every claim of the pod is allocated. A unit whose writes did not all
// commit is taken back and placed again. It also takes back the placement
// of a pod kube-scheduler reports unschedulable where its claims are
// (claimpolicy.Replace). Pods are read from the cache r.podCache.
type placementReconciler struct {
	r *Reconciler
}

// podClaims are a pod's claims, sorted by what the operator does with
// them, as the ledger knows them.
type podClaims struct {
	// toPlace: the operator's, unallocated: allocated by this placement.
	toPlace []*resourceapi.ResourceClaim
	// placed: the operator's, allocated.
	placed []*resourceapi.ResourceClaim
	// pending: reservations of this pod's unit whose writes have no
	// definite answer yet.
	pending []*resourceapi.ResourceClaim
	// scheduler: kube-scheduler's, unallocated: tried in the same engine
	// call so the node chosen suits them too, never written.
	scheduler []*resourceapi.ResourceClaim
	// pinned: every allocated claim; the node must suit each.
	pinned []*resourceapi.ResourceClaim
	// waiting says what the placement waits for (claims not created yet,
	// being deleted, reserved but unallocated).
	waiting []string
	// writing: one of them waits for a write of another unit.
	writing bool
}

// unitOf names the placement unit of a pod: its namespace, name and UID,
// so that a pod deleted and created again under the same name is another
// unit, and the units of a name are found by unitPrefix.
func unitOf(pod *corev1.Pod) string { return unitPrefix(pod.Namespace, pod.Name) + string(pod.UID) }

// unitPrefix starts the names of every unit of a pod name.
func unitPrefix(namespace, name string) string { return "pod/" + namespace + "/" + name + "/" }

// Reconcile converges one pod.
func (p *placementReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r := p.r
	cfg, err := r.loadConfig(ctx)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("read the DRAStack: %w", err)
	}
	var pod corev1.Pod
	if err := r.podCache.Get(ctx, req.NamespacedName, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			r.forgetPod(req.NamespacedName)
			return p.abandonUnits(ctx, req.NamespacedName, "")
		}
		return ctrl.Result{}, fmt.Errorf("read pod %s: %w", req, err)
	}
	if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil {
		r.forgetPod(req.NamespacedName)
		return p.abandonUnits(ctx, req.NamespacedName, "")
	}
	if res, err := p.abandonUnits(ctx, req.NamespacedName, unitOf(&pod)); err != nil || res.RequeueAfter > 0 {
		return res, err
	}
	gated := claimpolicy.HasGate(&pod)
	if !cfg.Active {
		r.forgetPod(req.NamespacedName)
		if gated {
			return ctrl.Result{}, p.liftGate(ctx, &pod, "the operator allocates no claims (there is no DRAStack)")
		}
		return ctrl.Result{}, nil
	}
	if gang, res, err := p.gangReconcile(ctx, cfg, &pod); gang {
		// A member of a gang: its claims are placed with the gang's.
		return res, err
	}
	pc, err := p.claimsOf(ctx, cfg, &pod)
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(pc.pending) > 0 {
		return p.finishUnit(ctx, cfg, &pod, pc, "")
	}
	if len(pc.waiting) > 0 {
		log.FromContext(ctx).V(2).Info("Pod waits for its claims", "pod", req.NamespacedName, "waiting", pc.waiting)
		if pc.writing {
			// Another write's answer ends the wait, and the ledger may
			// take it in after the claim's event brought the pod here:
			// look again rather than wait for an event that has passed.
			return ctrl.Result{RequeueAfter: r.backoff.When(req.NamespacedName)}, nil
		}
		return ctrl.Result{}, nil
	}
	if len(pc.toPlace) == 0 && len(pc.placed) == 0 {
		r.forgetPod(req.NamespacedName)
		if gated {
			return ctrl.Result{}, p.liftGate(ctx, &pod, "none of its claims is allocated by the operator")
		}
		return ctrl.Result{}, nil
	}
	if len(pc.toPlace) > 0 && len(pc.placed) > 0 {
		// Some of the pod's operator claims are allocated, others not, and
		// no write of them is under way: a unit that did not complete (a
		// write that never committed, a crash, another term). Its
		// allocations are taken back, and the pod placed again as a whole.
		if undone, err := p.undo(ctx, &pod, pc.placed, "the pod's other claims are not allocated"); err != nil || undone {
			return ctrl.Result{RequeueAfter: retryNowDelay}, err
		}
	}
	if !gated && len(pc.toPlace) == 0 {
		// kube-scheduler has the pod; take the placement back only if it
		// cannot run there.
		return p.recover(ctx, cfg, &pod, pc)
	}
	return p.place(ctx, cfg, &pod, pc)
}

func (r *Reconciler) forgetPod(key types.NamespacedName) {
	r.pods.forget(key)
	r.backoff.Forget(key)
	r.gangs.forget(key)
}

// claimsOf reads the pod's claims from the cache, each at the newest state
// the ledger knows, and sorts them.
func (p *placementReconciler) claimsOf(ctx context.Context, cfg claimpolicy.Config, pod *corev1.Pod) (podClaims, error) {
	return p.claimsOfUnit(ctx, cfg, pod, unitOf(pod))
}

// claimsOfUnit is claimsOf for a pod whose placement belongs to unit (the
// pod's own, or its gang's): reservations of that unit are pending.
func (p *placementReconciler) claimsOfUnit(ctx context.Context, cfg claimpolicy.Config, pod *corev1.Pod, unit string) (podClaims, error) {
	r := p.r
	var pc podClaims
	for _, ref := range claimpolicy.PodClaims(pod) {
		switch {
		case ref.NotNeeded:
			continue
		case ref.ClaimName == "":
			pc.waiting = append(pc.waiting, fmt.Sprintf("claim %s: not created from template %s yet", ref.Name, ref.Template))
			continue
		}
		var cached resourceapi.ResourceClaim
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: ref.ClaimName}, &cached); err != nil {
			if apierrors.IsNotFound(err) {
				pc.waiting = append(pc.waiting, fmt.Sprintf("claim %s does not exist", ref.ClaimName))
				continue
			}
			return pc, fmt.Errorf("read claim %s/%s: %w", pod.Namespace, ref.ClaimName, err)
		}
		c := r.ledger.Newest(&cached)
		ours := claimpolicy.SelectClaim(cfg, c) != claimpolicy.WhyNone
		if res, ok := r.ledger.Reserved(c.UID); ok {
			if res.Unit == unit {
				pc.pending = append(pc.pending, c)
			} else {
				pc.waiting = append(pc.waiting, fmt.Sprintf("the allocation of claim %s is being written", c.Name))
				pc.writing = true
			}
			continue
		}
		switch {
		case c.Status.Allocation != nil:
			pc.pinned = append(pc.pinned, c)
			if ours {
				pc.placed = append(pc.placed, c)
			}
		case c.DeletionTimestamp != nil:
			pc.waiting = append(pc.waiting, fmt.Sprintf("claim %s is being deleted", c.Name))
		case len(c.Status.ReservedFor) > 0:
			pc.waiting = append(pc.waiting, fmt.Sprintf("claim %s is reserved but not allocated", c.Name))
		case ours && claimpolicy.IsImmediate(cfg, c):
			// The claim loop allocates it as soon as it exists.
			pc.waiting = append(pc.waiting, fmt.Sprintf("immediate claim %s is not allocated yet", c.Name))
		case ours:
			pc.toPlace = append(pc.toPlace, c)
		default:
			pc.scheduler = append(pc.scheduler, c)
		}
	}
	return pc, nil
}

// place chooses a node for the pod and its unallocated operator claims,
// reserves them as one unit, writes them and, once every write committed,
// lifts the gate.
func (p *placementReconciler) place(ctx context.Context, cfg claimpolicy.Config, pod *corev1.Pod, pc podClaims) (ctrl.Result, error) {
	r := p.r
	key := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
	engine, ok := r.engine(cfg.Engine)
	if !ok {
		return ctrl.Result{}, fmt.Errorf("no allocation engine %q", cfg.Engine)
	}
	r.pods.markWaiting(key, pod.CreationTimestamp.Time, r.now())
	r.expireOld()
	candidates, nodeReasons, total, err := p.candidates(ctx, pod, pc.pinned)
	if err != nil {
		return ctrl.Result{}, err
	}
	avoid := r.nodes.avoided(key)
	if !claimpolicy.HasGate(pod) {
		// Placed before and back without its gate: kube-scheduler did not
		// bind it there.
		avoid = r.nodes.turnedDown(key)
	}
	candidates = lastTried(candidates, avoid)
	if len(pc.toPlace) == 0 {
		// Everything is allocated: the pod may go if a node suits it and
		// its claims.
		if len(candidates) == 0 {
			if len(pc.placed) > 0 {
				// Its own placement no longer fits the pod (the node
				// filled up or was cordoned since): place it again.
				if undone, err := p.undo(ctx, pod, pc.placed, "no node that suits the pod can use them"); err != nil || undone {
					return ctrl.Result{RequeueAfter: retryNowDelay}, err
				}
			}
			return p.failed(ctx, pod, engine.Name(), claimpolicy.OutcomeUnsatisfiable, errors.New(placement.Summary(total, nodeReasons)), nil)
		}
		r.forgetPod(key)
		return ctrl.Result{}, p.liftGate(ctx, pod, "claims allocated: "+claimNames(pc.placed))
	}
	if len(candidates) > 0 {
		// The delete-protection finalizer on claims created while the
		// claim webhook was unreachable, before the decision: it changes
		// their version.
		for i, c := range pc.toPlace {
			c, err := r.ensureFinalizer(ctx, c)
			if err != nil || c == nil {
				return ctrl.Result{RequeueAfter: retryNowDelay}, err
			}
			pc.toPlace[i] = c
		}
	}

	var (
		node    string
		outcome = claimpolicy.OutcomeUnsatisfiable
		last    error
		misses  []string
	)
	claims := make([]*resourceapi.ResourceClaim, 0, len(pc.toPlace)+len(pc.scheduler))
	for _, c := range pc.toPlace {
		scoped, denied := r.scoped(cfg, c)
		if len(denied) > 0 {
			return p.failed(ctx, pod, engine.Name(), claimpolicy.OutcomeUnsatisfiable, deniedError(c, denied), nil)
		}
		claims = append(claims, scoped)
	}
	for _, c := range pc.scheduler {
		claims = append(claims, central.ForScheduler(c))
	}
	now := r.now()
	unit := unitOf(pod)
	var took time.Duration
	err = r.ledger.Decide(ctx, pod.Namespace, engine, func(d *ledger.Decision) error {
		actx, cancel := context.WithTimeout(ctx, cfg.AllocationTimeout)
		defer cancel()
		var chosen []allocator.Result
		start := time.Now()
		defer func() { took = time.Since(start) }()
		for _, n := range candidates {
			results, err := d.Session().Allocate(actx, claims, allocator.Options{Node: n.Name, MaxSteps: r.MaxSteps, Policy: cfg.PlacementPolicy})
			o, err := classify(actx, err, cfg)
			if o == claimpolicy.OutcomeAllocated {
				chosen, node, outcome = results[:len(pc.toPlace)], n.Name, o
				break
			}
			outcome, last = o, err
			if o != claimpolicy.OutcomeUnsatisfiable {
				// Invalid claims are invalid on every node; a search that
				// ran out of time or steps has no time left.
				break
			}
			misses = append(misses, n.Name+": "+err.Error())
		}
		if outcome != claimpolicy.OutcomeAllocated {
			return nil
		}
		for i, c := range pc.toPlace {
			if err := d.Reserve(c, stamped(chosen[i].Allocation, now), unit); err != nil {
				// The turn fails: the ledger drops the unit's other
				// reservations, none of which was written.
				return err
			}
		}
		return nil
	})
	if res, done, err := afterTurn(err); done {
		return res, err
	}
	placementsTotal.WithLabelValues(engine.Name(), string(outcome)).Inc()
	if len(candidates) > 0 {
		// The engine ran (on no node, it did not).
		observeEngine(engine.Name(), outcome, took)
	}
	if outcome != claimpolicy.OutcomeAllocated {
		// Each claim the placement was for; an allocation's latency ends
		// when its write commits (finishUnit).
		observeLatency(engine.Name(), outcome, r.pods.seenSince(key, r.now()), r.now(), len(pc.toPlace))
		if outcome == claimpolicy.OutcomeUnsatisfiable {
			last = errors.New(unplaceableMessage(total, nodeReasons, misses) + noCentralHint(cfg))
		}
		return p.failed(ctx, pod, engine.Name(), outcome, last, func() string {
			return r.verdict(ctx, outcome, claims, nodeReasons, total)
		})
	}
	log.FromContext(ctx).V(1).Info("Placed pod", "pod", key, "node", node, "claims", len(pc.toPlace))
	r.nodes.placed(key, node)
	pc.pending, pc.toPlace = pc.toPlace, nil
	return p.finishUnit(ctx, cfg, pod, pc, node)
}

// finishUnit writes the pending reservations of the pod's unit, in
// parallel, and acts on how they ended: all committed lifts the gate; one
// that can never commit breaks the unit (the next reconcile takes the
// others back and places the pod again); one without a definite answer is
// sent again later. node is where the unit was placed ("" when this
// process resumes a unit it placed before).
func (p *placementReconciler) finishUnit(ctx context.Context, cfg claimpolicy.Config, pod *corev1.Pod, pc podClaims, node string) (ctrl.Result, error) {
	r := p.r
	key := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
	type answer struct {
		outcome writeOutcome
		written *resourceapi.ResourceClaim
		err     error
	}
	answers := make([]answer, len(pc.pending))
	r.writeAll(len(pc.pending), func(i int) {
		o, w, err := r.writeReserved(ctx, pc.pending[i].UID)
		answers[i] = answer{o, w, err}
	})
	engine := cfg.Engine
	confirmed, broken, ambiguous := 0, false, false
	for i, a := range answers {
		switch a.outcome {
		case writeLost:
			return ctrl.Result{}, nil
		case writeConfirmed:
			confirmed++
			if a.written != nil {
				allocationsTotal.WithLabelValues(engine, string(claimpolicy.OutcomeAllocated)).Inc()
				observeLatency(engine, claimpolicy.OutcomeAllocated, r.pods.seenSince(key, r.now()), r.now(), 1)
				r.claims.forget(types.NamespacedName{Namespace: pod.Namespace, Name: pc.pending[i].Name})
				r.event(a.written, corev1.EventTypeNormal, EventAllocated, "Allocate", "allocated by the %s engine for pod %s%s: %s",
					engine, pod.Name, onNode(node), deviceList(a.written.Status.Allocation))
			}
		case writeReleased:
			broken = true
			if errors.Is(a.err, errRefused) {
				cl := pc.pending[i]
				if r.claims.record(types.NamespacedName{Namespace: cl.Namespace, Name: cl.Name}, failure{outcome: claimpolicy.OutcomeInvalid, message: a.err.Error()}) {
					r.event(cl, corev1.EventTypeWarning, EventRefused, "Allocate", "%v (not retried until the claim changes)", a.err)
				}
			}
		case writeAmbiguous:
			ambiguous = true
			log.FromContext(ctx).V(1).Info("Allocation write without a definite answer; sending it again", "pod", key, "claim", pc.pending[i].Name, "err", a.err)
		}
	}
	switch {
	case ambiguous:
		return ctrl.Result{RequeueAfter: r.backoff.When(key)}, nil
	case broken:
		unitsBroken.Inc()
		// The next reconcile sees the unit half allocated and takes it
		// back (Reconcile).
		return ctrl.Result{RequeueAfter: retryNowDelay}, nil
	}
	if confirmed == len(pc.pending) && len(pc.toPlace) == 0 && claimpolicy.HasGate(pod) {
		r.forgetPod(key)
		placed := "claims allocated"
		if node != "" {
			placed += " for node " + node
		}
		return ctrl.Result{}, p.liftGate(ctx, pod, placed+": "+claimNames(append(pc.placed, pc.pending...)))
	}
	return ctrl.Result{RequeueAfter: retryNowDelay}, nil
}

// abandonUnits ends the pending reservations of the units of a pod name
// other than keep (a pod that is gone, bound, or made again under the same
// name): nothing will write them for it any more (abandon).
func (p *placementReconciler) abandonUnits(ctx context.Context, key types.NamespacedName, keep string) (ctrl.Result, error) {
	r := p.r
	pending := false
	for _, res := range r.ledger.UnitsWithPrefix(unitPrefix(key.Namespace, key.Name)) {
		if res.Unit == keep {
			continue
		}
		if done, err := r.abandon(ctx, res); err != nil || !done {
			pending = true
		}
	}
	if pending {
		return ctrl.Result{RequeueAfter: r.backoff.When(key)}, nil
	}
	return ctrl.Result{}, nil
}

// undo takes back the operator's allocations among claims that belong to
// this pod alone (not immediate, not reserved, not used by another pod
// that is running or waiting), so that the pod is placed again as a whole.
// It reports whether it took anything back.
func (p *placementReconciler) undo(ctx context.Context, pod *corev1.Pod, placed []*resourceapi.ResourceClaim, why string) (bool, error) {
	r := p.r
	if r.off.noUndo {
		return false, nil
	}
	cfg := r.cfg.get()
	shared, err := p.sharedClaims(ctx, pod)
	if err != nil {
		return false, err
	}
	undone := false
	for _, c := range placed {
		if claimpolicy.IsImmediate(cfg, c) || shared[c.Name] || !claimpolicy.Movable(c, FieldManager) {
			continue
		}
		done, err := r.deallocate(ctx, c)
		if err != nil {
			return undone, err
		}
		if done {
			undone = true
			replacedTotal.Inc()
			r.event(c, corev1.EventTypeNormal, EventReplaced, "Deallocate", "allocation taken back to place pod %s again as a whole: %s", pod.Name, why)
		}
	}
	return undone, nil
}

// sharedClaims names the claims of pod that another pod of its namespace
// also uses.
func (p *placementReconciler) sharedClaims(ctx context.Context, pod *corev1.Pod) (map[string]bool, error) {
	var pods corev1.PodList
	if err := p.r.podCache.List(ctx, &pods, client.InNamespace(pod.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list pods of namespace %s: %w", pod.Namespace, err)
	}
	mine := map[string]bool{}
	for _, ref := range claimpolicy.PodClaims(pod) {
		if ref.ClaimName != "" {
			mine[ref.ClaimName] = true
		}
	}
	shared := map[string]bool{}
	for i := range pods.Items {
		o := &pods.Items[i]
		if o.UID == pod.UID || o.DeletionTimestamp != nil || o.Status.Phase == corev1.PodSucceeded || o.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, ref := range claimpolicy.PodClaims(o) {
			if mine[ref.ClaimName] {
				shared[ref.ClaimName] = true
			}
		}
	}
	return shared, nil
}

// candidates returns the nodes the pod fits (placement.Candidates) that
// also suit every allocated claim of the pod, the reasons of the others,
// and how many nodes there are.
func (p *placementReconciler) candidates(ctx context.Context, pod *corev1.Pod, pinned []*resourceapi.ResourceClaim) ([]*corev1.Node, map[string]string, int, error) {
	var nodes corev1.NodeList
	if err := p.r.Client.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, 0, fmt.Errorf("list nodes: %w", err)
	}
	var pods corev1.PodList
	if err := p.r.podCache.List(ctx, &pods, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, 0, fmt.Errorf("list pods: %w", err)
	}
	byNode := map[string][]*corev1.Pod{}
	for i := range pods.Items {
		if n := pods.Items[i].Spec.NodeName; n != "" {
			byNode[n] = append(byNode[n], &pods.Items[i])
		}
	}
	all := make([]*corev1.Node, len(nodes.Items))
	for i := range nodes.Items {
		all[i] = &nodes.Items[i]
	}
	fit, reasons := placement.Candidates(pod, all, byNode)
	out := fit[:0:0]
	for _, n := range fit {
		if c := unsuited(n, pinned); c != "" {
			reasons[n.Name] = "allocated claim " + c + " is not available on the node"
			continue
		}
		out = append(out, n)
	}
	return out, reasons, len(all), nil
}

// lastTried moves the nodes in avoid to the end, keeping the order
// otherwise: they are still tried when nothing else fits.
func lastTried(nodes []*corev1.Node, avoid map[string]bool) []*corev1.Node {
	if len(avoid) == 0 {
		return nodes
	}
	out := make([]*corev1.Node, 0, len(nodes))
	var later []*corev1.Node
	for _, n := range nodes {
		if avoid[n.Name] {
			later = append(later, n)
		} else {
			out = append(out, n)
		}
	}
	return append(out, later...)
}

// unsuited names the first allocated claim whose node selector the node
// does not match ("" when all match).
func unsuited(n *corev1.Node, pinned []*resourceapi.ResourceClaim) string {
	for _, c := range pinned {
		sel := c.Status.Allocation.NodeSelector
		if sel == nil {
			continue
		}
		if ok, err := corev1helpers.MatchNodeSelectorTerms(n, sel); err != nil || !ok {
			return c.Name
		}
	}
	return ""
}

// unplaceableMessage says why no node took the pod: the node filters, and
// the engine's reason on each node it tried (the first few).
func unplaceableMessage(total int, reasons map[string]string, misses []string) string {
	msg := placement.Summary(total, reasons)
	if len(reasons) == 0 {
		msg = fmt.Sprintf("the pod fits on all %d nodes", total)
	}
	const show = 3
	if len(misses) > 0 {
		parts := misses
		if len(parts) > show {
			parts = append(parts[:show:show], fmt.Sprintf("and %d more nodes", len(misses)-show))
		}
		msg += "; the claims do not fit on " + strings.Join(parts, "; ")
	}
	return msg
}

// failed reports a placement that did not happen: an Event on the pod when
// the outcome is news (with the verdict why returns, if why is not nil),
// the outcome on each of its claims for the DRAStack counts, and the retry
// the outcome calls for.
func (p *placementReconciler) failed(ctx context.Context, pod *corev1.Pod, engine string, outcome claimpolicy.Outcome, err error, why func() string) (ctrl.Result, error) {
	r := p.r
	key := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
	msg := err.Error()
	if r.pods.record(key, failure{outcome: outcome, message: msg}) {
		note := msg
		if why != nil && r.Recorder != nil {
			note = withVerdict(msg, why())
		}
		r.event(pod, corev1.EventTypeWarning, string(outcome), "Allocate", "%s engine: %s%s", engine, note, retryHint(outcome))
	}
	for _, ref := range claimpolicy.PodClaims(pod) {
		if ref.ClaimName != "" {
			r.claims.record(types.NamespacedName{Namespace: pod.Namespace, Name: ref.ClaimName}, failure{outcome: outcome, message: msg})
		}
	}
	return r.retryOf(ctx, key, outcome, err)
}

// recover takes back the operator's allocations of a pod kube-scheduler
// reported unschedulable after they were allocated, once
// spec.claims.placementTimeout has passed (claimpolicy.Replace), so that
// the next reconcile places them again. Only claims nobody reserved are
// touched, with a resourceVersion precondition.
func (p *placementReconciler) recover(ctx context.Context, cfg claimpolicy.Config, pod *corev1.Pod, pc podClaims) (ctrl.Result, error) {
	r := p.r
	var after time.Duration
	for _, c := range pc.placed {
		rep := claimpolicy.Replace(cfg, c, pod, FieldManager, r.now())
		if r.off.timerFromCondition {
			rep = replaceFromCondition(cfg, c, pod, r.now())
		}
		if !rep.Now {
			if rep.After > 0 && (after == 0 || rep.After < after) {
				after = rep.After
			}
			continue
		}
		done, err := r.deallocate(ctx, c)
		if err != nil {
			return ctrl.Result{}, err
		}
		if done {
			replacedTotal.Inc()
			r.event(c, corev1.EventTypeNormal, EventReplaced, "Deallocate", "allocation taken back to be placed again: %s", rep.Reason)
			r.event(pod, corev1.EventTypeNormal, EventReplaced, "Deallocate", "claim %s is placed again: %s", c.Name, rep.Reason)
		}
		// The claim's update brings the pod back for its new placement.
		return ctrl.Result{}, nil
	}
	r.forgetPod(types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name})
	return ctrl.Result{RequeueAfter: after}, nil
}

// replaceFromCondition is the recovery rule before issue 20, for the
// simulation only (protocolSwitches.timerFromCondition): the wait counts
// from the PodScheduled condition's lastTransitionTime, which for a pod
// that waited behind its gate is its creation, and any Unschedulable
// verdict counts, even one about an earlier placement.
func replaceFromCondition(cfg claimpolicy.Config, c *resourceapi.ResourceClaim, pod *corev1.Pod, now time.Time) claimpolicy.Replacement {
	if claimpolicy.SelectClaim(cfg, c) == claimpolicy.WhyNone || claimpolicy.IsImmediate(cfg, c) || !claimpolicy.Movable(c, FieldManager) ||
		pod == nil || claimpolicy.HasGate(pod) || pod.DeletionTimestamp != nil {
		return claimpolicy.Replacement{}
	}
	if _, ok := claimpolicy.Unschedulable(pod); !ok {
		return claimpolicy.Replacement{}
	}
	var since time.Time
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodScheduled {
			since = cond.LastTransitionTime.Time
		}
	}
	if waited := now.Sub(since); waited < cfg.PlacementTimeout {
		return claimpolicy.Replacement{After: cfg.PlacementTimeout - waited}
	}
	return claimpolicy.Replacement{Now: true, Reason: "unschedulable since " + since.UTC().Format(time.RFC3339)}
}

// liftGate removes the operator's scheduling gate, with a resourceVersion
// precondition and only the gates in the patch.
func (p *placementReconciler) liftGate(ctx context.Context, pod *corev1.Pod, note string) error {
	if !claimpolicy.HasGate(pod) {
		return nil
	}
	upd := pod.DeepCopy()
	upd.Spec.SchedulingGates = claimpolicy.WithoutGate(pod.Spec.SchedulingGates)
	if err := p.r.Client.Patch(ctx, upd, optimistic(pod), client.FieldOwner(FieldManager)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		if apierrors.IsConflict(err) {
			// The pod's update event brings it back.
			return nil
		}
		return fmt.Errorf("remove the scheduling gate of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	p.r.event(pod, corev1.EventTypeNormal, EventGateRemoved, "Release", "removed scheduling gate %s: %s", claimpolicy.SchedulingGate, note)
	return nil
}

func claimNames(cs []*resourceapi.ResourceClaim) string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}
