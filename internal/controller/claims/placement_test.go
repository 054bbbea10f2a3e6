package claims

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/native"
	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/ledger"
)

func reqOf(ns, name string) ctrl.Request {
	return ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
}

// pools lists the pools of a claim's allocation.
func pools(c *resourceapi.ResourceClaim) []string {
	if c.Status.Allocation == nil {
		return nil
	}
	var out []string
	for _, r := range c.Status.Allocation.Devices.Results {
		out = append(out, r.Pool)
	}
	return out
}

// tainted runs the taint loop once, so that the central pools carry the
// operator's taint, and records their rules as joined, as the join
// barrier would (the engine allocates from no other pool).
func (e *env) tainted() {
	e.t.Helper()
	if _, err := (&taintReconciler{r: e.r}).Reconcile(context.Background(), taintKey); err != nil {
		e.t.Fatal(err)
	}
	e.joinAll()
	// The taint loop's writes (rules, the DRAStack's finalizer) are the
	// setup; the test looks at what comes after.
	e.events()
	e.patches.reset()
}

// unschedulableSince: kube-scheduler wrote the pod Unschedulable at since.
func unschedulableSince(p *corev1.Pod, since time.Time) *corev1.Pod {
	p.Status.Conditions = []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		LastTransitionTime: metav1.NewTime(since),
	}}
	at := metav1.NewTime(since)
	p.ManagedFields = append(p.ManagedFields, metav1.ManagedFieldsEntry{
		Manager: claimpolicy.SchedulerName, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status",
		APIVersion: "v1", Time: &at, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:conditions":{}}}`)},
	})
	return p
}

func TestAllocateImmediate(t *testing.T) {
	ctx := context.Background()
	// Central: pool mh only. The pool "shared" is kube-scheduler's, and
	// sorts after mh, so a second claim could only take it.
	e := newEnv(t, interceptor.Funcs{}, stack("mh"), gpuClass(), node("n1", "4"),
		poolSlice("mh", "a"), poolSlice("shared", "a"), nodeSlice("n1", "a"),
		immediateClaim("i1"), immediateClaim("i2"), immediateClaim("i3"))
	e.tainted()
	for _, name := range []string{"i1", "i2"} {
		if _, err := e.r.Reconcile(ctx, reqOf(tns, name)); err != nil {
			t.Fatalf("Reconcile %s: %v", name, err)
		}
		c := e.claim(name)
		if got := pools(c); len(got) != 1 || got[0] != "mh" {
			t.Errorf("claim %s allocated from %v, want the central pool mh", name, got)
		}
		if !claimpolicy.HasFinalizer(c) || c.Status.Allocation.AllocationTimestamp == nil {
			t.Errorf("claim %s: finalizers %v, timestamp %v; want both", name, c.Finalizers, c.Status.Allocation.AllocationTimestamp)
		}
	}
	if a, b := e.claim("i1").Status.Allocation.Devices.Results[0].Device, e.claim("i2").Status.Allocation.Devices.Results[0].Device; a == b {
		t.Errorf("claims i1 and i2 both got device %s", a)
	}
	// The central pool is full: the third claim waits, although the
	// shared pool and n1 have free devices.
	res, err := e.r.Reconcile(ctx, reqOf(tns, "i3"))
	if err != nil {
		t.Fatalf("Reconcile i3: %v", err)
	}
	if c := e.claim("i3"); c.Status.Allocation != nil {
		t.Errorf("claim i3 allocated from %v, want it to wait for a central device", pools(c))
	}
	if res.RequeueAfter <= 0 {
		t.Errorf("claim i3 not retried: %+v", res)
	}
	evs := e.events()
	if !hasEvent(evs, corev1.EventTypeNormal, EventAllocated, "mh/") || !hasEvent(evs, corev1.EventTypeWarning, string(claimpolicy.OutcomeUnsatisfiable)) {
		t.Errorf("events %q, want Allocated and Unsatisfiable", evs)
	}
	// The outcome is news once: the same failure again emits no Event.
	if _, err := e.r.Reconcile(ctx, reqOf(tns, "i3")); err != nil {
		t.Fatal(err)
	}
	if evs := e.events(); len(evs) > 0 {
		t.Errorf("a repeated failure emitted %q", evs)
	}
	checkPatches(t, e.patches, allowedPatches)
}

// placementCluster: n1 has room for the pod but devices of model a; n2
// has model b but one cpu; n3 has both. Every node-local pool and mh are
// central.
func placementCluster(extra ...client.Object) []client.Object {
	return append([]client.Object{
		stack("n1", "n2", "n3", "mh"), gpuClass(),
		node("n1", "4"), node("n2", "1"), node("n3", "4"),
		nodeSlice("n1", "a"), nodeSlice("n2", "b"), nodeSlice("n3", "b"), poolSlice("mh", "a"),
	}, extra...)
}

func TestPlacement(t *testing.T) {
	ctx := context.Background()
	// n1 has room for the pod but devices of model a; n2 has model b but
	// one cpu; n3 has both. Every node-local pool and mh are central.
	cluster := placementCluster

	t.Run("a gated pod's CEL claim goes where the pod fits, then the gate is lifted", func(t *testing.T) {
		e := newEnv(t, interceptor.Funcs{}, cluster(celClaim("c", "b"), gatedPod("p", "2", "c"))...)
		e.tainted()
		p := &placementReconciler{r: e.r}
		if _, err := p.Reconcile(ctx, reqOf(tns, "p")); err != nil {
			t.Fatal(err)
		}
		c := e.claim("c")
		if got := pools(c); len(got) != 1 || got[0] != "n3" {
			t.Errorf("claim allocated from %v, want n3 (where the pod fits and the devices are model b)", got)
		}
		if claimpolicy.HasGate(e.pod("p")) {
			t.Errorf("gate not lifted")
		}
		evs := e.events()
		if !hasEvent(evs, corev1.EventTypeNormal, EventAllocated, "node n3") || !hasEvent(evs, corev1.EventTypeNormal, EventGateRemoved, "n3") {
			t.Errorf("events %q, want Allocated and %s", evs, EventGateRemoved)
		}
		checkPatches(t, e.patches, allowedPatches)
	})

	t.Run("a pod that fits nowhere keeps its gate", func(t *testing.T) {
		e := newEnv(t, interceptor.Funcs{}, cluster(celClaim("c", "b"), gatedPod("p", "100", "c"))...)
		e.tainted()
		p := &placementReconciler{r: e.r}
		res, err := p.Reconcile(ctx, reqOf(tns, "p"))
		if err != nil {
			t.Fatal(err)
		}
		if c := e.claim("c"); c.Status.Allocation != nil {
			t.Errorf("claim allocated from %v for a pod that fits nowhere", pools(c))
		}
		if !claimpolicy.HasGate(e.pod("p")) {
			t.Errorf("gate lifted for a pod that fits nowhere")
		}
		if res.RequeueAfter <= 0 {
			t.Errorf("not retried: %+v", res)
		}
		if evs := e.events(); !hasEvent(evs, corev1.EventTypeWarning, EventUnplaceable, "0/3 nodes are available", "Insufficient cpu") {
			t.Errorf("events %q, want %s naming the nodes", evs, EventUnplaceable)
		}
		if len(e.patches.all()) != 0 {
			t.Errorf("patches sent: %+v", e.patches.all())
		}
	})

	t.Run("claims no node can serve with the pod keep the gate", func(t *testing.T) {
		// Model c exists nowhere.
		e := newEnv(t, interceptor.Funcs{}, cluster(celClaim("c", "c"), gatedPod("p", "1", "c"))...)
		e.tainted()
		p := &placementReconciler{r: e.r}
		if _, err := p.Reconcile(ctx, reqOf(tns, "p")); err != nil {
			t.Fatal(err)
		}
		if !claimpolicy.HasGate(e.pod("p")) || e.claim("c").Status.Allocation != nil {
			t.Errorf("gate lifted or claim allocated")
		}
		if evs := e.events(); !hasEvent(evs, corev1.EventTypeWarning, EventUnplaceable, "do not fit on") {
			t.Errorf("events %q, want %s with the engine's reasons", evs, EventUnplaceable)
		}
	})

	t.Run("an ungated pod unschedulable past placementTimeout is placed again", func(t *testing.T) {
		// The claim is the operator's on n3; the pod cannot run there
		// (say n3 was cordoned after the allocation) and is not gated.
		pod := unschedulableSince(gatedPod("p", "2", "c"), testStart)
		pod.Spec.SchedulingGates = nil
		e := newEnv(t, interceptor.Funcs{}, cluster(allocatedBy(celClaim("c", "b"), "n3", FieldManager), pod)...)
		e.tainted()
		p := &placementReconciler{r: e.r}

		e.now = testStart.Add(claimpolicy.DefaultPlacementTimeout / 2)
		res, err := p.Reconcile(ctx, reqOf(tns, "p"))
		if err != nil {
			t.Fatal(err)
		}
		if e.claim("c").Status.Allocation == nil {
			t.Fatalf("deallocated before placementTimeout")
		}
		if want := claimpolicy.DefaultPlacementTimeout / 2; res.RequeueAfter != want {
			t.Errorf("RequeueAfter %v, want %v (when the timeout ends)", res.RequeueAfter, want)
		}

		e.now = testStart.Add(claimpolicy.DefaultPlacementTimeout + time.Second)
		if _, err := p.Reconcile(ctx, reqOf(tns, "p")); err != nil {
			t.Fatal(err)
		}
		c := e.claim("c")
		if c.Status.Allocation != nil || claimpolicy.HasFinalizer(c) {
			t.Fatalf("claim not deallocated: allocation %v, finalizers %v", pools(c), c.Finalizers)
		}
		evs := e.events()
		if !hasEvent(evs, corev1.EventTypeNormal, EventReplaced, "placementTimeout") || !hasEvent(evs, corev1.EventTypeNormal, EventReplaced, "claim c is placed again") {
			t.Errorf("events %q, want %s on the claim and the pod", evs, EventReplaced)
		}
		checkPatches(t, e.patches, allowedPatches)

		// The claim's update brings the pod back: it is placed again,
		// where it fits (n3 still), without a gate to lift.
		if _, err := p.Reconcile(ctx, reqOf(tns, "p")); err != nil {
			t.Fatal(err)
		}
		if got := pools(e.claim("c")); len(got) != 1 || got[0] != "n3" {
			t.Errorf("placed again on %v, want n3", got)
		}
	})

	t.Run("an immediate claim is never moved", func(t *testing.T) {
		pod := unschedulableSince(gatedPod("p", "2", "c"), testStart)
		pod.Spec.SchedulingGates = nil
		claim := allocatedBy(immediateClaim("c"), "n1", FieldManager)
		e := newEnv(t, interceptor.Funcs{}, cluster(claim, pod)...)
		e.tainted()
		e.now = testStart.Add(time.Hour)
		p := &placementReconciler{r: e.r}
		if _, err := p.Reconcile(ctx, reqOf(tns, "p")); err != nil {
			t.Fatal(err)
		}
		if e.claim("c").Status.Allocation == nil {
			t.Errorf("an immediate claim was deallocated")
		}
		if len(e.patches.all()) != 0 {
			t.Errorf("patches sent: %+v", e.patches.all())
		}
	})

	t.Run("a claim kube-scheduler allocated is never moved", func(t *testing.T) {
		pod := unschedulableSince(gatedPod("p", "2", "c"), testStart)
		pod.Spec.SchedulingGates = nil
		e := newEnv(t, interceptor.Funcs{}, cluster(allocatedBy(celClaim("c", "b"), "n3", "kube-scheduler"), pod)...)
		e.tainted()
		e.now = testStart.Add(time.Hour)
		p := &placementReconciler{r: e.r}
		if _, err := p.Reconcile(ctx, reqOf(tns, "p")); err != nil {
			t.Fatal(err)
		}
		if e.claim("c").Status.Allocation == nil {
			t.Errorf("kube-scheduler's allocation was taken back")
		}
	})
}

// failingRecord wraps an engine whose sessions refuse to record one claim.
type failingRecord struct {
	allocator.Engine
	claim string
}

func (f failingRecord) NewSession(ctx context.Context, in allocator.Inputs) (allocator.Session, error) {
	s, err := f.Engine.NewSession(ctx, in)
	return failingSession{Session: s, claim: f.claim}, err
}

type failingSession struct {
	allocator.Session
	claim string
}

func (f failingSession) Record(c *resourceapi.ResourceClaim) error {
	if c.Name == f.claim {
		return errors.New("engine state out of step")
	}
	return f.Session.Record(c)
}

// A placement of two claims whose second reservation fails writes nothing
// and keeps no reservation: a kept one would block its devices although
// nothing writes it.
func TestPlacementReleasesAFailedReservation(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, interceptor.Funcs{}, stack("n1"), gpuClass(), node("n1", "4"), nodeSlice("n1", "a"),
		celClaim("c1", "a"), celClaim("c2", "a"), gatedPod("p", "1", "c1", "c2"))
	e.tainted()
	e.r.Engines[string(v1alpha1.EngineNative)] = failingRecord{Engine: native.New(), claim: "c2"}
	p := &placementReconciler{r: e.r}
	if _, err := p.Reconcile(ctx, reqOf(tns, "p")); err == nil {
		t.Fatal("Reconcile succeeded although a reservation failed")
	}
	if written, _ := e.r.ledger.Pending(); written != 0 {
		t.Errorf("%d reservations kept after the placement failed", written)
	}
	if e.claim("c1").Status.Allocation != nil || e.claim("c2").Status.Allocation != nil || !claimpolicy.HasGate(e.pod("p")) {
		t.Errorf("a failed placement wrote something")
	}
}

// Issue 20, problem 8: a pod's claims are placed all or nothing. When one
// write of the unit can never commit, or a process died between the
// writes, the written ones are taken back and the pod is placed again as
// a whole.
func TestPlacementAllOrNothing(t *testing.T) {
	ctx := context.Background()
	t.Run("one write refused: the other is taken back, then both placed", func(t *testing.T) {
		funcs := onPatch("status", func(attempt int, _ client.Client, obj client.Object) error {
			if c := obj.(*resourceapi.ResourceClaim); c.Name == "c2" && c.Status.Allocation != nil && attempt <= 2 {
				return invalidErr("c2")
			}
			return nil
		})
		e := newEnv(t, funcs, placementCluster(celClaim("c1", "b"), celClaim("c2", "b"), gatedPod("p", "1", "c1", "c2"))...)
		e.tainted()
		p := &placementReconciler{r: e.r}
		if _, err := p.Reconcile(ctx, reqOf(tns, "p")); err != nil {
			t.Fatal(err)
		}
		if c1, c2 := e.claim("c1"), e.claim("c2"); c1.Status.Allocation == nil || c2.Status.Allocation != nil {
			t.Fatalf("after the refusal: c1 %v, c2 %v; want c1 written, c2 not", pools(c1), pools(c2))
		}
		// The fake client keeps no managedFields for status patches; the
		// API server records the operator as c1's allocation's writer.
		e.markAllocatedBy("c1", FieldManager)
		if _, err := p.Reconcile(ctx, reqOf(tns, "p")); err != nil {
			t.Fatal(err)
		}
		if c1 := e.claim("c1"); c1.Status.Allocation != nil || !claimpolicy.HasGate(e.pod("p")) {
			t.Fatalf("half placement kept: c1 %v, gated %v", pools(c1), claimpolicy.HasGate(e.pod("p")))
		}
		for range 3 {
			if _, err := p.Reconcile(ctx, reqOf(tns, "p")); err != nil {
				t.Fatal(err)
			}
		}
		c1, c2 := e.claim("c1"), e.claim("c2")
		if c1.Status.Allocation == nil || c2.Status.Allocation == nil || claimpolicy.HasGate(e.pod("p")) {
			t.Fatalf("c1 %v, c2 %v, gated %v; want both placed and the gate lifted", pools(c1), pools(c2), claimpolicy.HasGate(e.pod("p")))
		}
		if !slices.Equal(pools(c1), pools(c2)) {
			t.Errorf("placed on %v and %v, want one node", pools(c1), pools(c2))
		}
		if evs := e.events(); !hasEvent(evs, corev1.EventTypeNormal, EventReplaced, "as a whole") {
			t.Errorf("events %q, want c1's allocation taken back", evs)
		}
	})
	t.Run("found half placed after a crash: taken back and placed again", func(t *testing.T) {
		e := newEnv(t, interceptor.Funcs{}, placementCluster(allocatedBy(celClaim("c1", "b"), "n3", FieldManager), celClaim("c2", "b"), gatedPod("p", "1", "c1", "c2"))...)
		e.tainted()
		e.observeAll()
		p := &placementReconciler{r: e.r}
		if _, err := p.Reconcile(ctx, reqOf(tns, "p")); err != nil {
			t.Fatal(err)
		}
		if c1 := e.claim("c1"); c1.Status.Allocation != nil {
			t.Fatalf("c1 keeps a half placement: %v", pools(c1))
		}
		if !claimpolicy.HasGate(e.pod("p")) {
			t.Fatal("gate lifted with the claims half placed")
		}
		for range 3 {
			if _, err := p.Reconcile(ctx, reqOf(tns, "p")); err != nil {
				t.Fatal(err)
			}
		}
		if c1, c2 := e.claim("c1"), e.claim("c2"); c1.Status.Allocation == nil || c2.Status.Allocation == nil || claimpolicy.HasGate(e.pod("p")) {
			t.Fatalf("c1 %v, c2 %v; want the pod placed again as a whole", pools(c1), pools(c2))
		}
	})
	t.Run("a claim another pod also uses is not taken back", func(t *testing.T) {
		other := gatedPod("q", "1", "c1")
		other.Spec.SchedulingGates = nil
		other.Spec.NodeName = "n3"
		e := newEnv(t, interceptor.Funcs{}, placementCluster(allocatedBy(celClaim("c1", "b"), "n3", FieldManager), celClaim("c2", "b"), gatedPod("p", "1", "c1", "c2"), other)...)
		e.tainted()
		e.observeAll()
		p := &placementReconciler{r: e.r}
		if _, err := p.Reconcile(ctx, reqOf(tns, "p")); err != nil {
			t.Fatal(err)
		}
		if pools(e.claim("c1")) == nil {
			t.Fatal("a claim the running pod q uses was taken back")
		}
	})
}

// A pod whose claim another write is writing (an immediate claim, say)
// looks again soon: the ledger may learn of the write's answer after the
// claim's event brought the pod here, and no event follows.
func TestPlacementWaitsForAnotherWrite(t *testing.T) {
	ctx := context.Background()
	imm := immediateClaim("imm")
	imm.Finalizers = []string{claimpolicy.Finalizer}
	e := newEnv(t, interceptor.Funcs{}, placementCluster(imm, gatedPod("p", "1", "imm"))...)
	e.tainted()
	read := e.claim("imm")
	if err := e.r.ledger.Decide(ctx, tns, native.New(), func(d *ledger.Decision) error {
		return d.Reserve(read, testAllocation(), "")
	}); err != nil {
		t.Fatal(err)
	}
	p := &placementReconciler{r: e.r}
	res, err := p.Reconcile(ctx, reqOf(tns, "p"))
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter <= 0 {
		t.Fatalf("result %+v: a pod waiting for another write must be looked at again", res)
	}
	if !claimpolicy.HasGate(e.pod("p")) {
		t.Error("gate lifted while the claim's allocation was being written")
	}
}
