package claims

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/allocator/native"
	"github.com/drastack/drastack/internal/central"
	"github.com/drastack/drastack/internal/handover"
	"github.com/drastack/drastack/internal/ledger"
)

// The join loop records joins on the operator's central rules (patch,
// under the allocation fence), read from the cache (list, watch) and
// listed live (APIReader) when a round settles.
// +kubebuilder:rbac:groups=resource.k8s.io,resources=devicetaintrules,verbs=list;watch;patch

// JoinControllerName runs the join barrier of the partition hand-over.
const JoinControllerName = "central-join"

// Event reasons on the DRAStack about the hand-over.
const (
	// EventPoolsJoined: a rule's pools joined the partition; the operator
	// allocates their devices from now on.
	EventPoolsJoined = "CentralPoolsJoined"
	// EventPoolsJoining: a rule's pools wait for pods kube-scheduler may
	// still be binding with their devices.
	EventPoolsJoining = "CentralPoolsJoining"
	// EventCanaryRefused: the API server refused a canary object (for
	// example the canary claim's admin access, in a namespace without the
	// label resource.kubernetes.io/admin-access=true): nothing joins.
	EventCanaryRefused = "CentralCanaryRefused"
)

// joinKey is the only request of the join loop: one barrier round covers
// every rule waiting to join.
var joinKey = reconcile.Request{NamespacedName: client.ObjectKey{Name: "join"}}

// Pacing of the join loop: liveness only, nothing waits on time for
// correctness. joinPoll looks again while kube-scheduler has not answered
// (its answers are events too); a canary kube-scheduler bound is tried
// again after a backoff.
const (
	joinPoll       = time.Second
	canaryRetryMin = 100 * time.Millisecond
	canaryRetryMax = 5 * time.Second
)

// joinReconciler runs the join barrier (docs/allocation-protocol.md,
// section 4, "Joining"; the decisions are package handover's) in rounds,
// each covering the rules that wait to join: the canary rule, a clearance
// pod kube-scheduler must bind, canary pods until it refuses one, the
// wait sets, and the joins.
type joinReconciler struct {
	r      *Reconciler
	canary canary
	// verdicts and watched are shared with the event handlers.
	verdicts verdictLog
	watched  atomic.Pointer[map[types.UID]bool]

	// The rest belongs to the loop's one worker.
	round *joinRound
	// tolerated are the rounds whose canary rules were deleted since
	// kube-scheduler last proved (refusing a canary) that it had seen every
	// rule event before them: their taints may still be in its view, so
	// the canary claims tolerate them. Rules that an earlier process
	// deleted itself are not known here (docs/allocation-protocol.md).
	tolerated []string
	// reported is the last Event note per rule, so that a waiting rule is
	// reported once per change.
	reported map[string]string
	// written are the joins this loop recorded that the cache may not
	// show yet: they start no new round.
	written map[handover.RuleRef]bool
	// newRoundID names a new round: random, so that a round of another
	// process (or of this one before a restart) never shares its canary
	// objects; the simulation sets a deterministic one.
	newRoundID func() string
}

// joinRound is one barrier round.
type joinRound struct {
	id      string
	started time.Time
	// rule is the UID of the round's canary rule as created.
	rule types.UID
	// covered are the rules, as they were when the canary rule was
	// created after them, that this round may join.
	covered map[string]handover.RuleRef
	// cleared: kube-scheduler bound the round's clearance pod.
	cleared bool
	attempt int
	// createAt: the next attempt is created at this time (zero: created).
	createAt time.Time
	refusal  *handover.Refusal
	waits    map[string]*ruleWaits
}

// ruleWaits is the wait set of one covered rule.
type ruleWaits struct {
	waiters  []handover.Waiter
	resolved []bool
}

func (w *ruleWaits) open() int {
	n := 0
	for _, done := range w.resolved {
		if !done {
			n++
		}
	}
	return n
}

// setupJoin registers the join loop.
func (r *Reconciler) setupJoin(mgr ctrl.Manager, mcache cache.Cache) error {
	registerJoinMetrics()
	j := newJoinReconciler(r)
	enqueue := func(q queue) { q.Add(joinKey) }
	canaryOnly := func(obj client.Object) bool { return handover.IsCanary(obj) }
	err := ctrl.NewControllerManagedBy(mgr).
		Named(JoinControllerName).
		WatchesRawSource(source.TypedKind(mcache, &v1alpha1.DRAStack{}, handler.TypedFuncs[*v1alpha1.DRAStack, reconcile.Request]{
			CreateFunc: func(_ context.Context, _ event.TypedCreateEvent[*v1alpha1.DRAStack], q queue) { enqueue(q) },
			UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*v1alpha1.DRAStack], q queue) {
				if configChanged(e.ObjectOld, e.ObjectNew) || (e.ObjectOld.DeletionTimestamp == nil) != (e.ObjectNew.DeletionTimestamp == nil) {
					enqueue(q)
				}
			},
			DeleteFunc: func(_ context.Context, _ event.TypedDeleteEvent[*v1alpha1.DRAStack], q queue) { enqueue(q) },
		})).
		WatchesRawSource(source.TypedKind(mcache, &resourceapi.DeviceTaintRule{}, versionChanges[*resourceapi.DeviceTaintRule](func(q queue, _ bool) { enqueue(q) }, nil))).
		WatchesRawSource(source.TypedKind(mcache, &resourceapi.ResourceSlice{}, filtered[*resourceapi.ResourceSlice](canaryOnly, enqueue))).
		WatchesRawSource(source.TypedKind(mcache, &resourceapi.DeviceClass{}, filtered[*resourceapi.DeviceClass](canaryOnly, enqueue))).
		WatchesRawSource(source.TypedKind(mcache, &resourceapi.ResourceClaim{}, filtered[*resourceapi.ResourceClaim](func(obj client.Object) bool {
			return j.isWatched(obj.GetUID())
		}, enqueue))).
		WatchesRawSource(source.TypedKind(r.podCache.(cache.Cache), &corev1.Pod{}, j.podHandler(enqueue))).
		Complete(j)
	if err != nil {
		return fmt.Errorf("build the %s controller: %w", JoinControllerName, err)
	}
	return nil
}

// newJoinReconciler returns the join loop of r, with no barrier under way.
func newJoinReconciler(r *Reconciler) *joinReconciler {
	j := &joinReconciler{r: r, canary: canary{r: r, namespace: r.FenceNamespace, image: handover.PauseImage},
		reported: map[string]string{}, written: map[handover.RuleRef]bool{},
		newRoundID: func() string { return strings.ToLower(rand.Text()[:10]) }}
	j.verdicts.at = map[types.UID]ledger.Version{}
	return j
}

// filtered queues the join loop on every event of an object match accepts.
func filtered[T client.Object](match func(client.Object) bool, enqueue func(queue)) handler.TypedEventHandler[T, reconcile.Request] {
	return handler.TypedFuncs[T, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[T], q queue) {
			if match(e.Object) {
				enqueue(q)
			}
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[T], q queue) {
			if match(e.ObjectNew) {
				enqueue(q)
			}
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[T], q queue) {
			if match(e.Object) {
				enqueue(q)
			}
		},
	}
}

// podHandler notes kube-scheduler's new refusals of unbound pods (the
// evidence that a waiter's binding cycle is over) and queues the loop for
// canary pods and waiters.
func (j *joinReconciler) podHandler(enqueue func(queue)) handler.TypedEventHandler[*corev1.Pod, reconcile.Request] {
	return handler.TypedFuncs[*corev1.Pod, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*corev1.Pod], q queue) {
			if j.podRelevant(e.Object) {
				enqueue(q)
			}
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*corev1.Pod], q queue) {
			if j.podUpdated(e.ObjectOld, e.ObjectNew) {
				enqueue(q)
			}
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[*corev1.Pod], q queue) {
			if j.podDeleted(e.Object) {
				enqueue(q)
			}
		},
	}
}

// podRelevant: the loop looks at a canary pod's or a waiter's events.
func (j *joinReconciler) podRelevant(p *corev1.Pod) bool {
	return handover.IsCanary(p) || j.isWatched(p.UID)
}

// podUpdated notes a new refusal in an update of a pod the watch
// delivered, and says whether the loop should look.
func (j *joinReconciler) podUpdated(old, cur *corev1.Pod) bool {
	if v, ok := handover.VerdictChanged(old, cur); ok {
		j.verdicts.note(cur.UID, v)
	} else if cur.Spec.NodeName != "" {
		j.verdicts.forget(cur.UID)
	}
	return j.podRelevant(cur)
}

// podDeleted forgets a deleted pod's refusals, and says whether the loop
// should look.
func (j *joinReconciler) podDeleted(p *corev1.Pod) bool {
	j.verdicts.forget(p.UID)
	return j.podRelevant(p)
}

// verdictLog remembers, per unbound pod, the version of the last new
// refusal kube-scheduler wrote, as the pod watch delivered it.
type verdictLog struct {
	mu sync.Mutex
	at map[types.UID]ledger.Version
}

func (l *verdictLog) note(uid types.UID, v ledger.Version) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if v > l.at[uid] {
		l.at[uid] = v
	}
}

func (l *verdictLog) forget(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.at, uid)
}

func (l *verdictLog) get(uid types.UID) ledger.Version {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.at[uid]
}

func (j *joinReconciler) isWatched(uid types.UID) bool {
	m := j.watched.Load()
	return m != nil && (*m)[uid]
}

func (j *joinReconciler) setWatched(m map[types.UID]bool) {
	if len(m) == 0 {
		m = nil
	}
	j.watched.Store(&m)
}

// Reconcile takes the barrier one step.
func (j *joinReconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	r := j.r
	stack, cfg, err := r.loadStack(ctx)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("read the DRAStack: %w", err)
	}
	if stack == nil || stack.DeletionTimestamp != nil || !cfg.Active || len(cfg.Central) == 0 {
		// Nothing joins: the canary goes (its slice and class too when
		// the DRAStack goes; the garbage collector would take them later).
		j.forget()
		return ctrl.Result{}, j.cleanup(ctx, "", stack == nil || stack.DeletionTimestamp != nil)
	}
	var rules resourceapi.DeviceTaintRuleList
	if err := r.Client.List(ctx, &rules); err != nil {
		return ctrl.Result{}, fmt.Errorf("list DeviceTaintRules: %w", err)
	}
	pending := j.pending(rules.Items)
	countRules(rules.Items)
	if j.round == nil && len(pending) == 0 {
		j.setWatched(nil)
		return ctrl.Result{}, j.cleanup(ctx, "", false)
	}
	slice, err := j.canary.base(ctx, stack)
	if err != nil || slice == nil {
		return ctrl.Result{RequeueAfter: joinPoll}, err
	}
	var res ctrl.Result
	switch {
	case j.round == nil:
		res, err = j.startRound(ctx, stack, pending)
	default:
		cur := map[string]*resourceapi.DeviceTaintRule{}
		for i := range rules.Items {
			cur[rules.Items[i].Name] = &rules.Items[i]
		}
		res, err = j.runRound(ctx, stack, cur)
	}
	if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
		// The same request fails again until someone changes the
		// cluster: say so, and look again now and then.
		j.report(ctx, stack, "", corev1.EventTypeWarning, EventCanaryRefused, "CreateCanary",
			"The API server refused the join barrier's canary, so no pool tainted by a DeviceTaintRule joins the partition and nobody allocates its devices (the canary's claims ask for admin access, which needs the label resource.kubernetes.io/admin-access=true on namespace %s): %v", j.canary.namespace, err)
		return ctrl.Result{RequeueAfter: 30 * time.Second}, nil
	}
	return res, err
}

// cleanup deletes the canary objects of every round but keep (and with
// base the slice and class), and remembers the rounds whose rules went.
func (j *joinReconciler) cleanup(ctx context.Context, keep string, base bool) error {
	rounds, err := j.canary.cleanup(ctx, keep, base)
	for _, round := range rounds {
		j.deletedRule(round)
	}
	return err
}

// deletedRule remembers that the canary rule of round went.
func (j *joinReconciler) deletedRule(round string) {
	if !slices.Contains(j.tolerated, round) {
		j.tolerated = append(j.tolerated, round)
	}
}

// pending are the rules waiting to join, less those whose join this loop
// wrote and the cache does not show yet.
func (j *joinReconciler) pending(rules []resourceapi.DeviceTaintRule) []handover.RuleRef {
	current := map[handover.RuleRef]bool{}
	for i := range rules {
		current[handover.RefOf(&rules[i])] = !handover.Joined(&rules[i])
	}
	for ref := range j.written {
		if waiting, ok := current[ref]; !ok || !waiting {
			// Shown joined, or changed or gone: the cache decides now.
			delete(j.written, ref)
		}
	}
	return slices.DeleteFunc(handover.Pending(rules), func(ref handover.RuleRef) bool { return j.written[ref] })
}

// forget drops the barrier's state (the canary objects are cleaned up).
func (j *joinReconciler) forget() {
	j.round = nil
	j.setWatched(nil)
	clear(j.reported)
}

// startRound begins a round covering the pending rules: the canary rule,
// created after them, then the clearance pod.
func (j *joinReconciler) startRound(ctx context.Context, stack *v1alpha1.DRAStack, pending []handover.RuleRef) (ctrl.Result, error) {
	id := j.newRoundID()
	if err := j.cleanup(ctx, id, false); err != nil {
		return ctrl.Result{}, err
	}
	round := &joinRound{id: id, started: j.r.now(), covered: map[string]handover.RuleRef{}}
	for _, ref := range pending {
		round.covered[ref.Name] = ref
	}
	rule, err := j.canary.createRule(ctx, stack, id)
	if err != nil {
		return ctrl.Result{}, err
	}
	round.rule = rule.UID
	j.round = round
	var names []string
	for _, ref := range pending {
		names = append(names, ref.String())
	}
	log.FromContext(ctx).Info("Join barrier round started", "round", id, "rules", names)
	return ctrl.Result{RequeueAfter: joinPoll}, j.canary.createAttempt(ctx, stack, id, handover.Clearance, j.tolerated)
}

// runRound takes a round one step.
func (j *joinReconciler) runRound(ctx context.Context, stack *v1alpha1.DRAStack, cur map[string]*resourceapi.DeviceTaintRule) (ctrl.Result, error) {
	round := j.round
	// A rule that went, changed or joined since the round began is no
	// longer the round's: a changed one joins in a later round.
	for name, ref := range round.covered {
		if rule := cur[name]; rule == nil || handover.RefOf(rule) != ref || !handover.PoolRule(rule) || handover.Joined(rule) {
			delete(round.covered, name)
			delete(round.waits, name)
		}
	}
	if len(round.covered) == 0 {
		return j.endRound(ctx)
	}
	switch {
	case !round.cleared:
		return j.awaitClearance(ctx, stack, cur)
	case round.refusal == nil:
		return j.awaitRefusal(ctx, stack, cur)
	}
	return j.awaitWaiters(ctx, stack, cur)
}

// endRound removes what is left of the round and lets the next one begin.
func (j *joinReconciler) endRound(ctx context.Context) (ctrl.Result, error) {
	if err := j.cleanup(ctx, "", false); err != nil {
		return ctrl.Result{}, err
	}
	j.round = nil
	j.setWatched(nil)
	return ctrl.Result{Requeue: true}, nil
}

// awaitClearance waits until kube-scheduler bound the round's clearance
// pod, whose claim tolerates the round's taint and nothing else: its view
// holds the canary slice and class, and no other taint on the canary
// device (no earlier round's rule whose deletion it has not seen, no
// administrator's rule). Only then can a refusal of the canary be the
// round's rule's doing.
//
// A canary rule of another round that this process did not delete (a
// process that lost its lease started a round after this one, and stopped
// before it ended it) keeps the clearance pod out for good: once
// kube-scheduler refused the clearance pod while the cache shows such a
// rule, the round ends, and the next one deletes that rule and tolerates
// its taint.
func (j *joinReconciler) awaitClearance(ctx context.Context, stack *v1alpha1.DRAStack, cur map[string]*resourceapi.DeviceTaintRule) (ctrl.Result, error) {
	round := j.round
	pod, err := j.canary.pod(ctx, round.id, handover.Clearance)
	if err != nil {
		return ctrl.Result{}, err
	}
	if pod == nil {
		// Not created yet, or not in the cache yet (creating again is a
		// no-op then).
		return ctrl.Result{RequeueAfter: joinPoll}, j.canary.createAttempt(ctx, stack, round.id, handover.Clearance, j.tolerated)
	}
	if state, _ := handover.Canary(pod); state != handover.CanaryBound {
		for _, name := range slices.Sorted(maps.Keys(cur)) {
			other := handover.RoundOf(cur[name])
			if state == handover.CanaryRefused && other != "" && other != round.id && !slices.Contains(j.tolerated, other) {
				log.FromContext(ctx).Info("Another round's canary rule taints the canary device; starting a new round", "round", round.id, "rule", name)
				return j.endRound(ctx)
			}
		}
		j.report(ctx, stack, round.id, corev1.EventTypeNormal, EventPoolsJoining, "AwaitClearance",
			"Central pools joining the partition: waiting for kube-scheduler to bind clearance pod %s/%s (it shows that kube-scheduler sees the canary and no other taint on it); until then nobody allocates the devices of %s",
			pod.Namespace, pod.Name, listNames(slices.Sorted(maps.Keys(round.covered))))
		return ctrl.Result{RequeueAfter: joinPoll}, nil
	}
	if err := j.canary.deleteAttempt(ctx, round.id, handover.Clearance); err != nil {
		return ctrl.Result{}, err
	}
	round.cleared = true
	log.FromContext(ctx).V(1).Info("kube-scheduler bound the clearance pod", "round", round.id, "took", j.r.now().Sub(round.started).String())
	return ctrl.Result{RequeueAfter: joinPoll}, j.canary.createAttempt(ctx, stack, round.id, 0, j.tolerated)
}

// awaitRefusal follows the round's canary pod until kube-scheduler refuses
// it; one it bound is replaced after a backoff.
func (j *joinReconciler) awaitRefusal(ctx context.Context, stack *v1alpha1.DRAStack, cur map[string]*resourceapi.DeviceTaintRule) (ctrl.Result, error) {
	round := j.round
	if !round.createAt.IsZero() {
		if wait := round.createAt.Sub(j.r.now()); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		if err := j.canary.createAttempt(ctx, stack, round.id, round.attempt, j.tolerated); err != nil {
			return ctrl.Result{}, err
		}
		round.createAt = time.Time{}
	}
	pod, err := j.canary.pod(ctx, round.id, round.attempt)
	if err != nil {
		return ctrl.Result{}, err
	}
	if pod == nil {
		return ctrl.Result{RequeueAfter: joinPoll}, j.canary.createAttempt(ctx, stack, round.id, round.attempt, j.tolerated)
	}
	state, refusal := handover.Canary(pod)
	switch state {
	case handover.CanaryWaiting:
		j.report(ctx, stack, round.id, corev1.EventTypeNormal, EventPoolsJoining, "AwaitRefusal",
			"Central pools joining the partition: waiting for kube-scheduler to refuse canary pod %s/%s, which shows it saw their DeviceTaintRules; until then nobody allocates the devices of %s",
			pod.Namespace, pod.Name, listNames(slices.Sorted(maps.Keys(round.covered))))
		return ctrl.Result{RequeueAfter: joinPoll}, nil
	case handover.CanaryBound:
		// kube-scheduler had not seen the canary rule, or the rule is
		// gone: a process that lost its lease deletes the canary rules of
		// every round but its own, and then no canary is ever refused.
		switch gone, err := j.ruleGone(ctx, round); {
		case j.r.off.keepLostRound:
		case err != nil:
			return ctrl.Result{}, err
		case gone:
			roundsTotal.WithLabelValues("lost").Inc()
			// Its taint may still be in kube-scheduler's view: later
			// canaries tolerate it.
			j.deletedRule(round.id)
			log.FromContext(ctx).Info("The round's canary rule was deleted by another process; starting a new round", "round", round.id, "rule", handover.CanaryRuleName(round.id))
			return j.endRound(ctx)
		}
		// kube-scheduler had not seen the canary rule: try again.
		roundsTotal.WithLabelValues("bound").Inc()
		if err := j.canary.deleteAttempt(ctx, round.id, round.attempt); err != nil {
			return ctrl.Result{}, err
		}
		backoff := min(canaryRetryMin<<min(round.attempt, 10), canaryRetryMax)
		round.attempt++
		round.createAt = j.r.now().Add(backoff)
		log.FromContext(ctx).Info("kube-scheduler bound the canary before it saw the canary rule; trying again", "round", round.id, "attempt", round.attempt, "after", backoff.String())
		return ctrl.Result{RequeueAfter: backoff}, nil
	}
	var live resourceapi.DeviceTaintRuleList
	if err := j.r.APIReader.List(ctx, &live); err != nil {
		return ctrl.Result{}, fmt.Errorf("read the DeviceTaintRules after the canary's refusal: %w", err)
	}
	if others := handover.OthersTaintingCanary(live.Items, round.id); len(others) > 0 {
		// The refusal may be theirs: this round proves nothing. A new
		// one clears the device first.
		j.report(ctx, stack, "", corev1.EventTypeWarning, EventCanaryRefused, "CheckCanary",
			"DeviceTaintRules %s taint the join barrier's canary device %s/%s/%s, so a refusal of the canary proves nothing; no pool tainted by a DeviceTaintRule joins the partition while they do",
			strings.Join(others, ", "), handover.CanaryDriver, handover.CanaryPool, handover.CanaryDevice)
		if _, err := j.endRound(ctx); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{RequeueAfter: 30 * time.Second}, nil
	}
	waits, err := j.waitSets(ctx, round, cur)
	if err != nil {
		// The refusal stays in the cache: the next attempt reads it again.
		return ctrl.Result{}, err
	}
	roundsTotal.WithLabelValues("refused").Inc()
	round.refusal, round.waits = &refusal, waits
	// kube-scheduler saw every rule event before the round's rule: the
	// taints of earlier rounds are out of its view.
	j.tolerated = nil
	if err := j.canary.deleteAttempt(ctx, round.id, round.attempt); err != nil {
		return ctrl.Result{}, err
	}
	rule := &resourceapi.DeviceTaintRule{}
	rule.Name = handover.CanaryRuleName(round.id)
	if err := j.canary.delete(ctx, rule); err != nil {
		return ctrl.Result{}, err
	}
	j.deletedRule(round.id)
	n := 0
	for _, w := range waits {
		n += len(w.waiters)
	}
	log.FromContext(ctx).Info("kube-scheduler refused the canary", "round", round.id, "attempts", round.attempt+1, "refusedAt", refusal.Version, "waiters", n, "took", j.r.now().Sub(round.started).String())
	return j.awaitWaiters(ctx, stack, cur)
}

// ruleGone reads the round's canary rule from the API server (a bound
// canary is rare, the read cheap): gone, or another object of that name,
// means nothing can refuse the round's canaries.
func (j *joinReconciler) ruleGone(ctx context.Context, round *joinRound) (bool, error) {
	var rule resourceapi.DeviceTaintRule
	switch err := j.r.APIReader.Get(ctx, client.ObjectKey{Name: handover.CanaryRuleName(round.id)}, &rule); {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("read the canary DeviceTaintRule %s: %w", handover.CanaryRuleName(round.id), err)
	}
	return rule.UID != round.rule, nil
}

// waitSets reads, after the refusal, the pods (from the pod cache, which
// has delivered the refusal), the claims and slices (consistent reads of
// the API server; the claims also go to the ledger), and decides each
// covered rule's wait set with the native engine.
func (j *joinReconciler) waitSets(ctx context.Context, round *joinRound, cur map[string]*resourceapi.DeviceTaintRule) (map[string]*ruleWaits, error) {
	r := j.r
	var pods corev1.PodList
	if err := r.podCache.List(ctx, &pods); err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	var claims resourceapi.ResourceClaimList
	if err := r.APIReader.List(ctx, &claims); err != nil {
		return nil, fmt.Errorf("read the claims after the canary's refusal: %w", err)
	}
	byKey := make(map[types.NamespacedName]*resourceapi.ResourceClaim, len(claims.Items))
	for i := range claims.Items {
		c := &claims.Items[i]
		r.ledger.Observe(c)
		byKey[types.NamespacedName{Namespace: c.Namespace, Name: c.Name}] = c
	}
	var sliceList resourceapi.ResourceSliceList
	if err := r.APIReader.List(ctx, &sliceList); err != nil {
		return nil, fmt.Errorf("read the ResourceSlices after the canary's refusal: %w", err)
	}
	var classList resourceapi.DeviceClassList
	if err := r.Client.List(ctx, &classList); err != nil {
		return nil, fmt.Errorf("list DeviceClasses: %w", err)
	}
	var nodeList corev1.NodeList
	if err := r.Client.List(ctx, &nodeList); err != nil {
		return nil, fmt.Errorf("list Nodes: %w", err)
	}
	podPtrs := make([]*corev1.Pod, len(pods.Items))
	for i := range pods.Items {
		podPtrs[i] = &pods.Items[i]
	}
	cands := handover.Candidates(podPtrs, func(ns, name string) (*resourceapi.ResourceClaim, bool) {
		c, ok := byKey[types.NamespacedName{Namespace: ns, Name: name}]
		return c, ok
	})
	slicePtrs := make([]*resourceapi.ResourceSlice, len(sliceList.Items))
	for i := range sliceList.Items {
		slicePtrs[i] = &sliceList.Items[i]
	}
	classes := make([]*resourceapi.DeviceClass, len(classList.Items))
	for i := range classList.Items {
		classes[i] = &classList.Items[i]
	}
	nodes := make([]*corev1.Node, len(nodeList.Items))
	for i := range nodeList.Items {
		nodes[i] = &nodeList.Items[i]
	}
	features := engineFeatures(r.cfg.cur.Load())
	serve := func(what string, pools func(central.PoolID) bool, cands []handover.Candidate) ([]handover.Waiter, error) {
		srv, err := handover.NewServer(ctx, native.New(), handover.ServeView(slicePtrs, pools, classes, nodes, features))
		if err != nil {
			return nil, fmt.Errorf("start the engine for the wait set of %s: %w", what, err)
		}
		return handover.WaitSet(cands, func(c *resourceapi.ResourceClaim) bool { return srv.CouldServe(ctx, c) }), nil
	}
	covered := make([]*resourceapi.DeviceTaintRule, 0, len(round.covered))
	for _, name := range slices.Sorted(maps.Keys(round.covered)) {
		covered = append(covered, cur[name])
	}
	// One engine session over every covered pool first: most claims can
	// use none of them (their classes select other devices).
	all, err := serve("the round", func(id central.PoolID) bool {
		return slices.ContainsFunc(covered, func(rule *resourceapi.DeviceTaintRule) bool { return handover.SelectsPool(rule, id) })
	}, cands)
	if err != nil {
		return nil, err
	}
	cands = narrow(cands, all)
	out := map[string]*ruleWaits{}
	for _, rule := range covered {
		waiters := all
		if len(covered) > 1 && len(covered) <= perRuleWaitSets {
			// Each rule's own wait set, so that one rule's pods do not
			// hold another's join.
			if waiters, err = serve("DeviceTaintRule "+rule.Name, func(id central.PoolID) bool { return handover.SelectsPool(rule, id) }, cands); err != nil {
				return nil, err
			}
		}
		out[rule.Name] = &ruleWaits{waiters: waiters, resolved: make([]bool, len(waiters))}
	}
	return out, nil
}

// perRuleWaitSets bounds the rules of a round that get a wait set of
// their own; beyond it (a thousand new nodes' pools at once), every rule
// of the round waits for every pod any of them could serve, which costs
// one engine run per claim instead of one per claim and rule.
const perRuleWaitSets = 32

// narrow keeps of cands the pods and claims of waiters.
func narrow(cands []handover.Candidate, waiters []handover.Waiter) []handover.Candidate {
	keep := map[types.UID]bool{}
	for _, w := range waiters {
		for _, c := range w.Claims {
			keep[c.UID] = true
		}
	}
	var out []handover.Candidate
	for _, c := range cands {
		claims := slices.DeleteFunc(slices.Clone(c.Claims), func(cl *resourceapi.ResourceClaim) bool { return !keep[cl.UID] })
		if len(claims) > 0 {
			out = append(out, handover.Candidate{Pod: c.Pod, Claims: claims})
		}
	}
	return out
}

// awaitWaiters resolves what it can of the wait sets and joins the rules
// whose wait set is resolved.
func (j *joinReconciler) awaitWaiters(ctx context.Context, stack *v1alpha1.DRAStack, cur map[string]*resourceapi.DeviceTaintRule) (ctrl.Result, error) {
	round := j.round
	watched := map[types.UID]bool{}
	var (
		errs            []error
		joined, joining []string
		// The pods the joining rules wait for, counted once each.
		open, waiters = map[types.UID]bool{}, map[types.UID]bool{}
	)
	for _, name := range slices.Sorted(maps.Keys(round.covered)) {
		w := round.waits[name]
		for i, waiter := range w.waiters {
			if w.resolved[i] {
				continue
			}
			res, err := j.resolve(ctx, waiter)
			if err != nil {
				errs = append(errs, err)
			}
			if res != handover.Unresolved {
				w.resolved[i] = true
				continue
			}
			watched[waiter.UID] = true
			for _, c := range waiter.Claims {
				watched[c.UID] = true
			}
		}
		if w.open() > 0 {
			joining = append(joining, name)
			for i, waiter := range w.waiters {
				waiters[waiter.UID] = true
				if !w.resolved[i] {
					open[waiter.UID] = true
				}
			}
			continue
		}
		ok, err := j.join(ctx, stack, cur[name], round)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			joined = append(joined, fmt.Sprintf("%s (%d pods waited for)", name, len(w.waiters)))
			delete(round.covered, name)
			delete(round.waits, name)
		}
	}
	j.setWatched(watched)
	if len(joined) > 0 {
		j.r.event(stack, corev1.EventTypeNormal, EventPoolsJoined, "Join",
			"Central pools joined the partition: kube-scheduler saw their DeviceTaintRules (it refused the canary) and the pods it may have been binding with their devices before are resolved; the operator allocates them from now on: %s", listNames(joined))
	}
	if len(joining) > 0 {
		j.report(ctx, stack, round.id, corev1.EventTypeNormal, EventPoolsJoining, "AwaitPods",
			"Central pools joining the partition: kube-scheduler saw their DeviceTaintRules (it refused the canary), and %d of %d pods it may have been binding with their devices before are neither refused again nor have their claims allocated or deleted; until then nobody allocates the devices of %s",
			len(open), len(waiters), listNames(joining))
	}
	if len(round.covered) == 0 {
		return j.endRound(ctx)
	}
	return ctrl.Result{RequeueAfter: joinPoll}, errors.Join(errs...)
}

// listNames lists names for an Event, the first few only.
func listNames(names []string) string {
	const shown = 5
	if len(names) <= shown {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:shown], ", "), len(names)-shown)
}

// resolve judges one waiter now.
func (j *joinReconciler) resolve(ctx context.Context, w handover.Waiter) (handover.Resolution, error) {
	r := j.r
	now := handover.PodNow{RefusedAt: j.verdicts.get(w.UID)}
	var p corev1.Pod
	switch err := r.podCache.Get(ctx, w.Pod, &p); {
	case err == nil:
		now.Pod = &p
	case !apierrors.IsNotFound(err):
		return handover.Unresolved, fmt.Errorf("read pod %s: %w", w.Pod, err)
	}
	claims := make([]handover.ClaimNow, len(w.Claims))
	for i, ref := range w.Claims {
		c, err := j.claimNow(ctx, w.Pod.Namespace, ref)
		if err != nil {
			return handover.Unresolved, err
		}
		claims[i] = c
	}
	return handover.Resolve(w, *j.round.refusal, now, claims), nil
}

// claimNow says what the ledger knows of a waiter's claim: allocated in a
// state not older than the read after the refusal, or deleted. A claim
// the cache does not show (as that claim) is looked up in the API server.
func (j *joinReconciler) claimNow(ctx context.Context, namespace string, ref handover.ClaimRef) (handover.ClaimNow, error) {
	r := j.r
	allocated := func() bool {
		st := r.ledger.StateOf(ref.UID)
		return st.Allocation != nil && !st.Reserved && st.Version >= ref.Version
	}
	if allocated() {
		return handover.ClaimAllocated, nil
	}
	if r.ledger.StateOf(ref.UID).Deleted {
		return handover.ClaimGone, nil
	}
	key := types.NamespacedName{Namespace: namespace, Name: ref.Name}
	var c resourceapi.ResourceClaim
	if err := r.Client.Get(ctx, key, &c); err == nil && c.UID == ref.UID {
		return handover.ClaimOpen, nil
	}
	switch err := r.APIReader.Get(ctx, key, &c); {
	case apierrors.IsNotFound(err) || (err == nil && c.UID != ref.UID):
		return handover.ClaimGone, nil
	case err != nil:
		return handover.ClaimOpen, fmt.Errorf("read claim %s: %w", key, err)
	}
	r.ledger.Observe(&c)
	if allocated() {
		return handover.ClaimAllocated, nil
	}
	return handover.ClaimOpen, nil
}

// join records the join of a rule whose wait set is resolved: the
// annotation, written with the rule's resourceVersion as precondition and
// under the allocation fence (Rule W), so only the term that holds the
// fence records joins. It reports whether the rule is joined.
func (j *joinReconciler) join(ctx context.Context, stack *v1alpha1.DRAStack, rule *resourceapi.DeviceTaintRule, round *joinRound) (bool, error) {
	r := j.r
	if handover.Joined(rule) {
		return true, nil
	}
	if !r.ledger.Ready() {
		// No term yet: the fence refuses every write until it begins.
		return false, nil
	}
	if err := r.fence.Await(ctx, ledger.ParseVersion(rule.ResourceVersion)); err != nil {
		return false, fmt.Errorf("record the join of DeviceTaintRule %s: %w", rule.Name, err)
	}
	upd := rule.DeepCopy()
	if upd.Annotations == nil {
		upd.Annotations = map[string]string{}
	}
	upd.Annotations[handover.JoinedAnnotation] = handover.JoinValue(rule)
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	switch err := r.Client.Patch(wctx, upd, optimistic(rule), client.FieldOwner(FieldManager)); {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		// Changed or gone since the cache showed it: the next look at
		// the rule decides (a new generation joins in a later round).
		return false, nil
	case err != nil:
		return false, fmt.Errorf("record the join of DeviceTaintRule %s: %w", rule.Name, err)
	}
	r.ledger.Invalidate()
	j.written[handover.RefOf(rule)] = true
	joinsTotal.Inc()
	joinSeconds.Observe(r.now().Sub(round.started).Seconds())
	w := round.waits[rule.Name]
	log.FromContext(ctx).Info("Central pools joined the partition", "rule", rule.Name, "generation", rule.Generation, "round", round.id, "waiters", len(w.waiters), "took", j.r.now().Sub(round.started).String())
	return true, nil
}

// report emits an Event on the DRAStack unless the same note was the last
// one under key (a round, or "" for the canary). Each step of a round has
// an action of its own: the Event recorder merges Events of one object,
// reason and action into a series that keeps the first note. Notes name rules and the
// canary, and count tenants' pods: the DRAStack is cluster-scoped, and
// tenants' pods stay in their namespaces.
func (j *joinReconciler) report(ctx context.Context, stack *v1alpha1.DRAStack, key, eventType, reason, action, note string, args ...any) {
	msg := fmt.Sprintf(note, args...)
	if j.reported[key] == msg {
		return
	}
	j.reported[key] = msg
	j.r.event(stack, eventType, reason, action, "%s", msg)
	log.FromContext(ctx).Info("Central pools: "+reason, "note", msg)
}

// joinChanged: a rule's join annotation changed (the engine's view of its
// pools changes with it).
func joinChanged(a, b *resourceapi.DeviceTaintRule) bool {
	return a.Annotations[handover.JoinedAnnotation] != b.Annotations[handover.JoinedAnnotation]
}

// countRules sets the gauge of the operator's pool rules by join state.
func countRules(rules []resourceapi.DeviceTaintRule) {
	var joined, joining float64
	for i := range rules {
		switch {
		case handover.Joined(&rules[i]):
			joined++
		case handover.PoolRule(&rules[i]):
			joining++
		}
	}
	centralRules.WithLabelValues("joined").Set(joined)
	centralRules.WithLabelValues("joining").Set(joining)
}
