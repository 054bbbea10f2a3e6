package claims

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/drastack/drastack/internal/central"
	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/fence"
	"github.com/drastack/drastack/internal/handover"
)

// joinAll records every pool rule of the operator in the fake API as
// joined at its generation, as a passed join barrier does, and drops the
// engine session.
func (e *env) joinAll() {
	e.t.Helper()
	var rules resourceapi.DeviceTaintRuleList
	if err := e.c.List(context.Background(), &rules); err != nil {
		e.t.Fatal(err)
	}
	for i := range rules.Items {
		rule := &rules.Items[i]
		if !handover.PoolRule(rule) || handover.Joined(rule) {
			continue
		}
		if rule.Annotations == nil {
			rule.Annotations = map[string]string{}
		}
		rule.Annotations[handover.JoinedAnnotation] = handover.JoinValue(rule)
		if err := e.c.Update(context.Background(), rule); err != nil {
			e.t.Fatal(err)
		}
	}
	e.r.ledger.Invalidate()
}

// The join barrier, branch by branch, on the fake client: kube-scheduler's
// part (binding or refusing the canary, allocating its claims) is played
// by the test. The barrier's decisions are package handover's, tested
// there; end to end on the real control plane in test/e2e
// (claims_join_test.go).

const opsNS = "drastack-system"

// joinEnv is the placement cluster with the canary slice already
// published (the fake client gives objects no UID) and a kube-scheduler
// pod whose claim could use any central pool.
func joinEnv(t *testing.T, funcs interceptor.Funcs) (*env, *joinReconciler) {
	t.Helper()
	slice := handover.CanarySlice()
	slice.UID = "canary-slice-uid"
	ks := gpuClaim("ks")
	ksPod := gatedPod("ks-pod", "1", "ks")
	ksPod.Spec.SchedulingGates = nil
	e := newEnv(t, funcs, placementCluster(slice, immediateClaim("i1"), ks, ksPod)...)
	e.r.FenceNamespace = opsNS
	if _, err := (&taintReconciler{r: e.r}).Reconcile(context.Background(), taintKey); err != nil {
		t.Fatal(err)
	}
	e.events()
	e.patches.reset()
	return e, newJoinReconciler(e.r)
}

func (e *env) reconcileJoin(j *joinReconciler) ctrl.Result {
	e.t.Helper()
	res, err := j.Reconcile(context.Background(), joinKey)
	if err != nil {
		e.t.Fatalf("join loop: %v", err)
	}
	return res
}

// canaryPods lists the canary pods in the operator's namespace by name.
func (e *env) canaryPods() []string {
	e.t.Helper()
	var pods corev1.PodList
	if err := e.c.List(context.Background(), &pods, client.InNamespace(opsNS)); err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, p := range pods.Items {
		if handover.IsCanary(&p) {
			out = append(out, p.Name)
		}
	}
	return out
}

// schedule plays kube-scheduler on a canary pod: bind it (node set) or
// refuse it with message.
func (e *env) schedule(name, node, message string) {
	e.t.Helper()
	var p corev1.Pod
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: opsNS, Name: name}, &p); err != nil {
		e.t.Fatal(err)
	}
	if node != "" {
		p.Spec.NodeName = node
		if err := e.c.Update(context.Background(), &p); err != nil {
			e.t.Fatal(err)
		}
		return
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: message}}
	if err := e.c.Status().Update(context.Background(), &p); err != nil {
		e.t.Fatal(err)
	}
}

// clearRound starts a round and plays kube-scheduler binding its
// clearance pod.
func (e *env) clearRound(j *joinReconciler) {
	e.t.Helper()
	e.reconcileJoin(j)
	e.schedule(handover.CanaryPodName(j.round.id, handover.Clearance), "n1", "")
	e.reconcileJoin(j)
	if !j.round.cleared {
		e.t.Fatal("the round is not cleared after its clearance pod was bound")
	}
}

func (e *env) joinedRules() []string {
	var out []string
	for name, r := range e.rules() {
		if handover.Joined(r) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func TestJoinBarrier(t *testing.T) {
	ctx := context.Background()
	e, j := joinEnv(t, interceptor.Funcs{})
	pending := handover.Pending(func() []resourceapi.DeviceTaintRule {
		var l resourceapi.DeviceTaintRuleList
		_ = e.c.List(ctx, &l)
		return l.Items
	}())
	if len(pending) != 4 {
		t.Fatalf("pending rules %v, want the four central pools' rules", pending)
	}

	// Tainted is not enough: the immediate claim waits for the join.
	if _, err := e.r.Reconcile(ctx, reqOf(tns, "i1")); err != nil {
		t.Fatal(err)
	}
	if c := e.claim("i1"); c.Status.Allocation != nil {
		t.Fatalf("claim i1 allocated from %v before any pool joined the partition", pools(c))
	}

	// A round: the canary rule, then the clearance pod, which
	// kube-scheduler must bind.
	e.reconcileJoin(j)
	if j.round == nil || len(j.round.covered) != 4 {
		t.Fatalf("round %+v, want one covering the four rules", j.round)
	}
	var class resourceapi.DeviceClass
	if err := e.c.Get(ctx, types.NamespacedName{Name: handover.CanaryName}, &class); err != nil || len(class.OwnerReferences) != 1 {
		t.Fatalf("canary class: %v %+v, want it created and owned by the DRAStack", err, class.OwnerReferences)
	}
	round := j.round.id
	canaryRule := handover.CanaryRuleName(round)
	if _, ok := e.rules()[canaryRule]; !ok {
		t.Fatalf("no canary rule %s", canaryRule)
	}
	clearance := handover.CanaryPodName(round, handover.Clearance)
	if got := e.canaryPods(); !slices.Equal(got, []string{clearance}) {
		t.Fatalf("canary pods %v, want the clearance pod %s", got, clearance)
	}
	// A refused clearance pod: kube-scheduler does not see the canary's
	// slice yet, or another taint is on it; the round waits.
	e.schedule(clearance, "", "0/3 nodes are available: 3 cannot allocate all claims.")
	e.reconcileJoin(j)
	if j.round.cleared || j.round.refusal != nil {
		t.Fatal("a refused clearance pod cleared the round")
	}
	e.schedule(clearance, "n1", "")
	e.reconcileJoin(j)
	first := handover.CanaryPodName(round, 0)
	if got := e.canaryPods(); !j.round.cleared || !slices.Equal(got, []string{first}) {
		t.Fatalf("after the clearance pod was bound: cleared %v, canary pods %v; want the first canary %s", j.round.cleared, got, first)
	}
	// kube-scheduler had not seen the rule: the canary is tried again.
	e.schedule(first, "n2", "")
	e.reconcileJoin(j)
	if len(e.canaryPods()) != 0 || j.round.attempt != 1 {
		t.Fatalf("after a bound canary: pods %v, attempt %d; want it deleted and a second attempt due", e.canaryPods(), j.round.attempt)
	}
	j.round.createAt = time.Now()
	e.reconcileJoin(j)
	second := handover.CanaryPodName(j.round.id, 1)
	if got := e.canaryPods(); !slices.Equal(got, []string{second}) {
		t.Fatalf("canary pods %v, want %s", got, second)
	}
	// Refusals that say nothing about the rule change nothing.
	e.schedule(second, "", "0/3 nodes are available: request canary: device class drastack-canary does not exist.")
	e.reconcileJoin(j)
	if j.round.refusal != nil {
		t.Fatal("a refusal for a missing class counted as the barrier")
	}
	e.schedule(second, "", allocFailMessage)
	e.reconcileJoin(j)
	if j.round.refusal == nil {
		t.Fatal("the canary's refusal did not end the barrier")
	}
	if _, ok := e.rules()[canaryRule]; ok || len(e.canaryPods()) != 0 {
		t.Errorf("after the refusal: canary rule left %v, pods %v", ok, e.canaryPods())
	}
	// The kube-scheduler pod may be binding its claim to any of them.
	for name, w := range j.round.waits {
		if len(w.waiters) != 1 || w.waiters[0].Pod.Name != "ks-pod" {
			t.Errorf("wait set of %s: %+v, want the kube-scheduler pod", name, w.waiters)
		}
	}
	if got := e.joinedRules(); len(got) != 0 {
		t.Fatalf("rules %v joined while a pod kube-scheduler may be binding waits", got)
	}
	if !j.isWatched("uid-ks-pod") || !j.isWatched("uid-ks") {
		t.Error("the waiter and its claim are not watched")
	}
	if evs := e.events(); !hasEvent(evs, corev1.EventTypeNormal, EventPoolsJoining, "1 of 1 pods") {
		t.Errorf("events %q, want %s with the count", evs, EventPoolsJoining)
	}

	// kube-scheduler's binding cycle wrote the claim: the ledger shows it.
	ks := e.claim("ks")
	ks.Status.Allocation = allocatedBy(ks, "n3", claimpolicy.SchedulerName).Status.Allocation
	if err := e.c.Status().Update(ctx, ks); err != nil {
		t.Fatal(err)
	}
	e.observeAll()
	e.patches.reset()
	e.reconcileJoin(j)
	if got := e.joinedRules(); len(got) != 4 {
		t.Fatalf("joined rules %v, want all four", got)
	}
	if j.round != nil || j.isWatched("uid-ks-pod") {
		t.Error("the round did not end with the joins")
	}
	// The next round's canaries tolerate this round's taint: the deletion
	// of its rule may not have reached kube-scheduler yet.
	if !slices.Equal(j.tolerated, []string{round}) {
		t.Errorf("tolerated rounds %v, want [%s]", j.tolerated, round)
	}
	checkPatches(t, e.patches, map[string][]string{"DeviceTaintRule": {"metadata.annotations"}})
	if evs := e.events(); !hasEvent(evs, corev1.EventTypeNormal, EventPoolsJoined, "joined the partition") {
		t.Errorf("events %q, want %s", evs, EventPoolsJoined)
	}

	// The pools are the operator's now, except the device kube-scheduler
	// took.
	if _, err := e.r.Reconcile(ctx, reqOf(tns, "i1")); err != nil {
		t.Fatal(err)
	}
	c := e.claim("i1")
	if c.Status.Allocation == nil {
		t.Fatal("claim i1 not allocated after the join")
	}
	if r := c.Status.Allocation.Devices.Results[0]; r.Pool == "n3" && r.Device == "dev-0" {
		t.Error("claim i1 got the device kube-scheduler allocated")
	}

	// Nothing left to join: the loop cleans up and rests.
	if res := e.reconcileJoin(j); res.RequeueAfter != 0 || j.round != nil {
		t.Errorf("idle loop: %+v", res)
	}
}

const allocFailMessage = "0/3 nodes are available: 3 cannot allocate all claims. preemption: not eligible due to preemptionPolicy=Never."

func TestJoinWaitsForTheFence(t *testing.T) {
	e, j := joinEnv(t, interceptor.Funcs{})
	// No pod kube-scheduler may be binding.
	if err := e.c.Delete(context.Background(), e.pod("ks-pod")); err != nil {
		t.Fatal(err)
	}
	e.clearRound(j)
	e.schedule(handover.CanaryPodName(j.round.id, 0), "", allocFailMessage)
	e.r.fence.(*openFence).lost = true
	if _, err := j.Reconcile(context.Background(), joinKey); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("join loop without the fence: %v, want %v", err, fence.ErrLost)
	}
	if got := e.joinedRules(); len(got) != 0 {
		t.Fatalf("rules %v joined without the fence", got)
	}
	e.r.fence.(*openFence).lost = false
	e.reconcileJoin(j)
	if got := e.joinedRules(); len(got) != 4 {
		t.Fatalf("joined %v once the fence is held, want all four", got)
	}
}

func TestJoinCleanup(t *testing.T) {
	e, j := joinEnv(t, interceptor.Funcs{})
	e.clearRound(j)
	if len(e.canaryPods()) != 1 {
		t.Fatalf("canary pods %v, want one attempt", e.canaryPods())
	}
	// The configuration loses its central entries: the round goes.
	st := e.stack()
	st.Spec.Claims.Central = nil
	if err := e.c.Update(context.Background(), st); err != nil {
		t.Fatal(err)
	}
	e.reconcileJoin(j)
	if j.round != nil || len(e.canaryPods()) != 0 {
		t.Fatalf("after central went: round %v, canary pods %v", j.round, e.canaryPods())
	}
	for name, r := range e.rules() {
		if handover.IsCanary(r) {
			t.Errorf("canary rule %s left", name)
		}
	}
	var slice resourceapi.ResourceSlice
	if err := e.c.Get(context.Background(), types.NamespacedName{Name: handover.CanaryName}, &slice); err != nil {
		t.Errorf("the canary slice went with the configuration, not the DRAStack: %v", err)
	}
	// The DRAStack goes: so does the slice.
	if err := e.c.Delete(context.Background(), st); err != nil {
		t.Fatal(err)
	}
	e.reconcileJoin(j)
	if err := e.c.Get(context.Background(), types.NamespacedName{Name: handover.CanaryName}, &slice); !apierrors.IsNotFound(err) {
		t.Errorf("canary slice after the DRAStack went: %v", err)
	}
}

func TestTaintRestored(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, interceptor.Funcs{}, placementCluster()...)
	tr := &taintReconciler{r: e.r}
	if _, err := tr.Reconcile(ctx, taintKey); err != nil {
		t.Fatal(err)
	}
	e.joinAll()
	e.events()
	before := counterValue(t, rulesRestored)
	n1 := central.RuleName(tdrv, "n1")
	if err := e.c.Delete(ctx, e.rules()[n1]); err != nil {
		t.Fatal(err)
	}
	changed := e.rules()[central.RuleName(tdrv, "n2")]
	changed.Spec.Taint.Effect = resourceapi.DeviceTaintEffectNone
	if err := e.c.Update(ctx, changed); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Reconcile(ctx, taintKey); err != nil {
		t.Fatal(err)
	}
	rules := e.rules()
	if r := rules[n1]; r == nil || handover.Joined(r) {
		t.Errorf("rule %s: %v, want it back and not joined", n1, r)
	}
	if r := rules[changed.Name]; r.Spec.Taint.Effect != central.TaintEffect {
		t.Errorf("rule %s: effect %s, want it reset", changed.Name, r.Spec.Taint.Effect)
	}
	if got := counterValue(t, rulesRestored) - before; got != 2 {
		t.Errorf("drastack_central_rules_restored_total grew by %v, want 2", got)
	}
	if evs := e.events(); !hasEvent(evs, corev1.EventTypeWarning, EventTaintRestored, n1+" (deleted)", changed.Name+" (changed)") {
		t.Errorf("events %q, want %s naming both", evs, EventTaintRestored)
	}
	// Converged: nothing more to report.
	if _, err := tr.Reconcile(ctx, taintKey); err != nil {
		t.Fatal(err)
	}
	if evs := e.events(); hasEvent(evs, corev1.EventTypeWarning, EventTaintRestored) {
		t.Errorf("a converged reconcile reported %q", evs)
	}
}

// counterValue reads a counter.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func TestJoinWaitSetsPerRule(t *testing.T) {
	ctx := context.Background()
	e, j := joinEnv(t, interceptor.Funcs{})
	// The kube-scheduler pod's claim wants model b: only n2's and n3's
	// devices could serve it.
	ks := e.claim("ks")
	ks.Spec.Devices.Requests[0].Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
		Expression: `device.attributes["` + tdrv + `"].model == "b"`}}}
	if err := e.c.Delete(ctx, ks); err != nil {
		t.Fatal(err)
	}
	ks.ResourceVersion = ""
	if err := e.c.Create(ctx, ks); err != nil {
		t.Fatal(err)
	}
	e.clearRound(j)
	e.schedule(handover.CanaryPodName(j.round.id, 0), "", allocFailMessage)
	e.reconcileJoin(j)
	want := []string{central.RuleName(tdrv, "mh"), central.RuleName(tdrv, "n1")}
	slices.Sort(want)
	if got := e.joinedRules(); !slices.Equal(got, want) {
		t.Fatalf("joined %v, want the rules of the pools the pod cannot use, %v", got, want)
	}
	if len(j.round.covered) != 2 {
		t.Fatalf("still covered: %v, want n2's and n3's rules", j.round.covered)
	}
	// The pod is deleted: its binding cycle could still write the claim.
	if err := e.c.Delete(ctx, e.pod("ks-pod")); err != nil {
		t.Fatal(err)
	}
	e.reconcileJoin(j)
	if got := e.joinedRules(); len(got) != 2 {
		t.Fatalf("joined %v once the pod was deleted; its claim is still there", got)
	}
	// The claim goes too: the rest joins.
	if err := e.c.Delete(ctx, e.claim("ks")); err != nil {
		t.Fatal(err)
	}
	e.reconcileJoin(j)
	if got := e.joinedRules(); len(got) != 4 {
		t.Fatalf("joined %v, want all four once the pod and its claim are gone", got)
	}
}

func TestJoinDistrustsAnotherTaintOnTheCanary(t *testing.T) {
	e, j := joinEnv(t, interceptor.Funcs{})
	e.clearRound(j)
	// An administrator taints every device, the canary's too, after the
	// clearance pod was bound.
	all := &resourceapi.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: "maintenance"},
		Spec: resourceapi.DeviceTaintRuleSpec{DeviceSelector: &resourceapi.DeviceTaintSelector{},
			Taint: resourceapi.DeviceTaint{Key: "example.com/maintenance", Effect: resourceapi.DeviceTaintEffectNoSchedule}}}
	if err := e.c.Create(context.Background(), all); err != nil {
		t.Fatal(err)
	}
	round := j.round.id
	e.schedule(handover.CanaryPodName(round, 0), "", allocFailMessage)
	if res := e.reconcileJoin(j); res.RequeueAfter < 10*time.Second {
		t.Errorf("result %+v, want a later look", res)
	}
	if j.round != nil || len(e.joinedRules()) != 0 {
		t.Fatalf("round %+v, joined %v: a refusal another rule may explain joined something", j.round, e.joinedRules())
	}
	if evs := e.events(); !hasEvent(evs, corev1.EventTypeWarning, EventCanaryRefused, "maintenance") {
		t.Errorf("events %q, want %s naming the rule", evs, EventCanaryRefused)
	}
	if !slices.Contains(j.tolerated, round) {
		t.Errorf("tolerated %v: the abandoned round's rule went, its taint may linger", j.tolerated)
	}
}

// TestSimulationLostCanaryRule replays the seeds on which the
// 100,000-seed run found a pool that never joined: a process that had
// lost its lease started a round of its own and deleted the canary rule
// of the leader's round (cleanup of every round but its own), so no
// canary of the leader's round was refused again. Going on with such a
// round (keepLostRound) each still fails; with the rule read after a
// bound canary, and a new round when it is gone, none does.
func TestSimulationLostCanaryRule(t *testing.T) {
	replaySwitched(t, []uint64{49218, 52306}, protocolSwitches{keepLostRound: true})
}

// A process that lost its lease deleted the round's canary rule: the
// bound canary ends the round, and the next round's canaries tolerate the
// lost rule's taint (kube-scheduler may still hold it).
func TestJoinLostCanaryRule(t *testing.T) {
	ctx := context.Background()
	e, j := joinEnv(t, interceptor.Funcs{})
	e.clearRound(j)
	lost := j.round.id
	rule := &resourceapi.DeviceTaintRule{}
	rule.Name = handover.CanaryRuleName(lost)
	if err := e.c.Delete(ctx, rule); err != nil {
		t.Fatal(err)
	}
	e.schedule(handover.CanaryPodName(lost, 0), "n1", "")
	e.reconcileJoin(j)
	if j.round != nil {
		t.Fatalf("round %s goes on after its canary rule was deleted", j.round.id)
	}
	if !slices.Contains(j.tolerated, lost) {
		t.Errorf("tolerated %v, want the lost round %s", j.tolerated, lost)
	}
	e.reconcileJoin(j)
	if j.round == nil || j.round.id == lost {
		t.Fatalf("no new round after the lost one")
	}
	var claim resourceapi.ResourceClaim
	if err := e.c.Get(ctx, types.NamespacedName{Namespace: opsNS, Name: handover.CanaryPodName(j.round.id, handover.Clearance)}, &claim); err != nil {
		t.Fatal(err)
	}
	tolerates := false
	for _, tol := range claim.Spec.Devices.Requests[0].Exactly.Tolerations {
		tolerates = tolerates || strings.Contains(tol.Value, lost) || strings.Contains(tol.Key, lost)
	}
	if !tolerates {
		t.Errorf("the new round's clearance claim tolerates %+v, not the lost round %s", claim.Spec.Devices.Requests[0].Exactly.Tolerations, lost)
	}
}
