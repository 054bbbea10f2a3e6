package claims

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/native"
	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/gang"
	"github.com/drastack/drastack/internal/placement"
)

// typedSlice is a node-local pool of tdrv named after the node, with one
// device per model given (dev-0, dev-1, ...).
func typedSlice(node string, models ...string) *resourceapi.ResourceSlice {
	s := nodeSlice(node, "")
	s.Spec.Devices = nil
	for i, m := range models {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: fmt.Sprintf("dev-%d", i), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"model": {StringValue: ptr.To(m)},
		}})
	}
	return s
}

// countClaim asks for count devices of class gpu, of the model when set.
func countClaim(name string, count int64, model string) *resourceapi.ResourceClaim {
	c := gpuClaim(name)
	c.Spec.Devices.Requests[0].Exactly.Count = count
	if model != "" {
		c.Spec.Devices.Requests[0].Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: `device.attributes["` + tdrv + `"].model == "` + model + `"`,
		}}}
	}
	return c
}

// gangPod is a gated pod of the label gang g that needs min pods.
func gangPod(name, g string, min int, claims ...string) *corev1.Pod {
	p := gatedPod(name, "1", claims...)
	p.Labels = map[string]string{gang.LabelName: g}
	p.Annotations = map[string]string{gang.AnnotationMinCount: fmt.Sprint(min)}
	return p
}

func (e *env) place(pod string) gangResult {
	e.t.Helper()
	res, err := (&placementReconciler{r: e.r}).Reconcile(context.Background(), reqOf(tns, pod))
	if err != nil {
		e.t.Fatalf("Reconcile pod %s: %v", pod, err)
	}
	return gangResult{requeue: res.RequeueAfter}
}

type gangResult struct{ requeue time.Duration }

func devicesOf(c *resourceapi.ResourceClaim) []string {
	if c.Status.Allocation == nil {
		return nil
	}
	var out []string
	for _, r := range c.Status.Allocation.Devices.Results {
		out = append(out, r.Pool+"/"+r.Device)
	}
	return out
}

func gangCondition(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == GangCondition {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// the138765Cluster is kubernetes/kubernetes#138765 in small: node n0 has
// three devices of model x and one of model y; pod a wants any device,
// pod b three of model x. Placed one pod at a time, a takes an x device
// and b cannot be placed.
func the138765Cluster(labelled bool) []client.Object {
	a := gatedPod("a", "1", "a-gpu")
	b := gatedPod("b", "1", "b-gpu")
	if labelled {
		a, b = gangPod("a", "train", 2, "a-gpu"), gangPod("b", "train", 2, "b-gpu")
	}
	return []client.Object{stack("n0"), gpuClass(), node("n0", "4"), typedSlice("n0", "x", "x", "y", "x"),
		countClaim("a-gpu", 1, ""), countClaim("b-gpu", 3, "x"), a, b}
}

// TestGangPlacedTogether: the gang is placed in one search (a gets the y
// device), both claims written, and both gates lifted together; the same
// pods without the gang label are placed one at a time and b stays out.
func TestGangPlacedTogether(t *testing.T) {
	t.Run("one pod at a time", func(t *testing.T) {
		e := newEnv(t, interceptor.Funcs{}, the138765Cluster(false)...)
		e.tainted()
		e.place("a")
		e.place("b")
		if got := devicesOf(e.claim("a-gpu")); len(got) != 1 || got[0] == "n0/dev-2" {
			t.Fatalf("pod a alone got %v; the contrast needs first fit to take an x device", got)
		}
		if got := devicesOf(e.claim("b-gpu")); got != nil {
			t.Errorf("pod b got %v after a took an x device", got)
		}
	})
	e := newEnv(t, interceptor.Funcs{}, the138765Cluster(true)...)
	e.tainted()
	e.place("b")
	if got := devicesOf(e.claim("a-gpu")); len(got) != 1 || got[0] != "n0/dev-2" {
		t.Errorf("claim a-gpu got %v, want the y device n0/dev-2", got)
	}
	if got := devicesOf(e.claim("b-gpu")); len(got) != 3 || strings.Contains(strings.Join(got, ","), "dev-2") {
		t.Errorf("claim b-gpu got %v, want the three x devices", got)
	}
	evs := e.events()
	for _, p := range []string{"a", "b"} {
		if claimpolicy.HasGate(e.pod(p)) {
			t.Errorf("pod %s still gated", p)
		}
		if !hasEvent(evs, corev1.EventTypeNormal, EventGateRemoved, "gang ns/train placed", "node n0") {
			t.Errorf("no GateRemoved Event for the gang: %q", evs)
		}
		if gangCondition(e.pod(p)) != nil {
			t.Errorf("pod %s: a gang placed at the first attempt got a condition written", p)
		}
	}
	// Nothing of the gang is kept once it is placed.
	if n := e.r.gangs.size(); n != 0 {
		t.Errorf("gang state holds %d entries after the placement", n)
	}
	// The other member's reconcile finds nothing to do.
	e.place("a")
	if evs := e.events(); len(evs) > 0 {
		t.Errorf("a second reconcile emitted %q", evs)
	}
}

// TestGangWaitsForItsPods: a gang waits, gated and unallocated, until it
// has its minimum count; after spec.claims.gangTimeout it is reported,
// once, and keeps waiting; the last pod brings the placement.
func TestGangWaitsForItsPods(t *testing.T) {
	objs := the138765Cluster(true)
	objs = objs[:len(objs)-1] // pod b comes later
	e := newEnv(t, interceptor.Funcs{}, objs...)
	e.tainted()
	res := e.place("a")
	if c := e.claim("a-gpu"); c.Status.Allocation != nil {
		t.Fatalf("pod a of an incomplete gang was placed: %v", devicesOf(c))
	}
	if res.requeue != claimpolicy.DefaultGangTimeout {
		t.Errorf("requeue after %s, want the gang timeout %s", res.requeue, claimpolicy.DefaultGangTimeout)
	}
	if evs := e.events(); len(evs) > 0 {
		t.Errorf("a gang waiting within its timeout emitted %q", evs)
	}
	e.now = e.now.Add(claimpolicy.DefaultGangTimeout + time.Second)
	e.place("a")
	e.place("a")
	evs := e.events()
	if len(evs) != 1 || !hasEvent(evs, corev1.EventTypeWarning, EventGangIncomplete, "gang ns/train has 1 of its 2 pods after 5m1s", "keeps waiting") {
		t.Errorf("events %q, want one GangIncomplete", evs)
	}
	if c := gangCondition(e.pod("a")); c == nil || c.Status != corev1.ConditionFalse || c.Reason != EventGangIncomplete {
		t.Errorf("condition %+v, want %s False %s", c, GangCondition, EventGangIncomplete)
	}
	if !claimpolicy.HasGate(e.pod("a")) || e.claim("a-gpu").Status.Allocation != nil {
		t.Error("a reported gang must keep waiting, gated and unallocated")
	}
	if err := e.c.Create(context.Background(), gangPod("b", "train", 2, "b-gpu")); err != nil {
		t.Fatal(err)
	}
	e.place("b")
	for _, p := range []string{"a", "b"} {
		if claimpolicy.HasGate(e.pod(p)) {
			t.Errorf("pod %s still gated", p)
		}
	}
	if c := gangCondition(e.pod("a")); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("pod a: condition %+v, want True once placed over a False one", c)
	}
	if c := gangCondition(e.pod("b")); c != nil {
		t.Errorf("pod b: condition %+v, want none: it was never reported", c)
	}
	if c := gangCondition(e.pod("a")); c != nil && !strings.Contains(c.Message, "node n0") {
		t.Errorf("condition message %q", c.Message)
	}
}

// TestGangThatCannotFit stays gated with one Event per member and the
// condition, is retriggered by released devices, and is placed once they
// are free.
func TestGangThatCannotFit(t *testing.T) {
	// A claim of another pod holds an x device: b cannot get three.
	holder := allocatedBy(countClaim("held", 1, "x"), "n0", FieldManager)
	objs := append(the138765Cluster(true), holder)
	e := newEnv(t, interceptor.Funcs{}, objs...)
	e.observeAll()
	e.tainted()
	res := e.place("a")
	for _, c := range []string{"a-gpu", "b-gpu"} {
		if got := devicesOf(e.claim(c)); got != nil {
			t.Errorf("claim %s allocated %v: a gang is never placed in part", c, got)
		}
	}
	if res.requeue <= 0 {
		t.Errorf("not retried: %+v", res)
	}
	evs := e.events()
	for _, p := range []string{"a", "b"} {
		if !claimpolicy.HasGate(e.pod(p)) {
			t.Errorf("pod %s lost its gate", p)
		}
		c := gangCondition(e.pod(p))
		if c == nil || c.Status != corev1.ConditionFalse || c.Reason != string(claimpolicy.OutcomeUnsatisfiable) || !strings.Contains(c.Message, "gang ns/train") {
			t.Errorf("pod %s: condition %+v", p, c)
		}
	}
	n := 0
	for _, ev := range evs {
		if strings.HasPrefix(ev, corev1.EventTypeWarning+" "+string(claimpolicy.OutcomeUnsatisfiable)) {
			n++
			// The explanation's verdict comes first: b alone fits nowhere.
			if !strings.Contains(ev, "pod ns/b cannot be placed even alone") || !strings.Contains(ev, "gang ns/train") {
				t.Errorf("event %q: want the gang's verdict", ev)
			}
		}
	}
	if n != 2 {
		t.Errorf("%d Unsatisfiable Events, want one per member: %q", n, evs)
	}
	e.place("b")
	if evs := e.events(); len(evs) > 0 {
		t.Errorf("the same outcome again emitted %q", evs)
	}
	if got := e.r.pods.retriable(false); len(got) != 2 {
		t.Errorf("retriable %v, want both members: a release of devices brings them forward", got)
	}
	// The holder goes: the gang fits.
	if err := e.c.Delete(context.Background(), e.claim("held")); err != nil {
		t.Fatal(err)
	}
	e.r.ledger.ObserveDeleted(holder)
	e.place("a")
	for _, p := range []string{"a", "b"} {
		if claimpolicy.HasGate(e.pod(p)) {
			t.Errorf("pod %s still gated after the devices were released", p)
		}
	}
}

// TestGangBrokenUnitTakenBack: one member's write can never commit; the
// members written are taken back and the gang placed again as a whole.
func TestGangBrokenUnitTakenBack(t *testing.T) {
	var mu sync.Mutex
	refused := 0
	funcs := interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
		mu.Lock()
		defer mu.Unlock()
		if cl, ok := obj.(*resourceapi.ResourceClaim); ok && cl.Name == "b-gpu" && cl.Status.Allocation != nil && refused == 0 {
			refused++
			return apierrors.NewInvalid(schema.GroupKind{Group: "resource.k8s.io", Kind: "ResourceClaim"}, cl.Name, field.ErrorList{field.Invalid(field.NewPath("status"), "", "test")})
		}
		return c.SubResource(sub).Patch(ctx, obj, p, opts...)
	}}
	e := newEnv(t, funcs, the138765Cluster(true)...)
	e.tainted()
	e.place("a")
	if refused != 1 {
		t.Fatalf("the refusal was not hit (%d)", refused)
	}
	if e.claim("a-gpu").Status.Allocation == nil || e.claim("b-gpu").Status.Allocation != nil {
		t.Fatalf("after the refusal: a %v, b %v; want a written, b not", devicesOf(e.claim("a-gpu")), devicesOf(e.claim("b-gpu")))
	}
	for _, p := range []string{"a", "b"} {
		if !claimpolicy.HasGate(e.pod(p)) {
			t.Errorf("pod %s ungated while the gang is placed in part", p)
		}
	}
	// The API server records who wrote the allocation; the fake does not.
	e.markAllocatedBy("a-gpu", FieldManager)
	e.place("b")
	if c := e.claim("a-gpu"); c.Status.Allocation != nil {
		t.Errorf("claim a-gpu kept %v: the broken unit must be taken back", devicesOf(c))
	}
	if !hasEvent(e.events(), corev1.EventTypeNormal, EventReplaced, "gang ns/train is placed in part") {
		t.Error("no AllocationReplaced Event naming the gang")
	}
	e.place("b")
	for _, p := range []string{"a", "b"} {
		if claimpolicy.HasGate(e.pod(p)) {
			t.Errorf("pod %s still gated after the gang was placed again", p)
		}
	}
	if got := devicesOf(e.claim("b-gpu")); len(got) != 3 {
		t.Errorf("claim b-gpu %v", got)
	}
}

// TestGangWaitingForAClaimHoldsNothing: a member names a claim that does
// not exist, so the gang cannot start; the member placed before is taken
// back (its device may be the one the missing claim will need), nothing
// else is placed, and every gate stays until the claim exists.
func TestGangWaitingForAClaimHoldsNothing(t *testing.T) {
	objs := the138765Cluster(true)
	for i, o := range objs {
		if c, ok := o.(*resourceapi.ResourceClaim); ok && c.Name == "a-gpu" {
			objs[i] = allocatedBy(c, "n0", FieldManager)
		}
	}
	objs = append(objs, gangPod("c", "train", 2, "c-gpu"))
	e := newEnv(t, interceptor.Funcs{}, objs...)
	e.tainted()
	e.observeAll()
	e.place("b")
	if c := e.claim("a-gpu"); c.Status.Allocation != nil {
		t.Errorf("claim a-gpu keeps %v while the gang waits for pod c's claim", devicesOf(c))
	}
	if !hasEvent(e.events(), corev1.EventTypeNormal, EventReplaced, "waits for pod c: claim c-gpu does not exist") {
		t.Error("no AllocationReplaced Event saying what the gang waits for")
	}
	for range 2 {
		e.place("a")
	}
	for _, c := range []string{"a-gpu", "b-gpu"} {
		if got := devicesOf(e.claim(c)); got != nil {
			t.Errorf("claim %s placed (%v) while the gang waits", c, got)
		}
	}
	for _, p := range []string{"a", "b", "c"} {
		if !claimpolicy.HasGate(e.pod(p)) {
			t.Errorf("pod %s ungated while the gang waits for a claim", p)
		}
	}
}

// TestGangDeclarations: members that disagree, and a bad annotation, are
// reported as invalid and keep their gates; a pod that names a PodGroup
// waits for it; with the Workload API, the PodGroup's minCount decides.
func TestGangDeclarations(t *testing.T) {
	t.Run("members disagree on the minimum count", func(t *testing.T) {
		objs := the138765Cluster(true)
		objs[len(objs)-1].(*corev1.Pod).Annotations[gang.AnnotationMinCount] = "3"
		e := newEnv(t, interceptor.Funcs{}, objs...)
		e.tainted()
		e.place("a")
		if !hasEvent(e.events(), corev1.EventTypeWarning, string(claimpolicy.OutcomeInvalid), "members disagree on the minimum count") {
			t.Error("no Invalid Event")
		}
		if e.claim("a-gpu").Status.Allocation != nil || !claimpolicy.HasGate(e.pod("a")) {
			t.Error("an inconsistent gang was placed")
		}
	})
	t.Run("a bad minimum count", func(t *testing.T) {
		objs := the138765Cluster(true)
		objs[len(objs)-2].(*corev1.Pod).Annotations[gang.AnnotationMinCount] = "two"
		e := newEnv(t, interceptor.Funcs{}, objs...)
		e.tainted()
		e.place("a")
		if !hasEvent(e.events(), corev1.EventTypeWarning, string(claimpolicy.OutcomeInvalid), "metadata.annotations[resource.drastack.io/gang-min-count]") {
			t.Error("no Invalid Event naming the field")
		}
		if e.claim("a-gpu").Status.Allocation != nil {
			t.Error("a pod with a bad gang declaration was placed alone")
		}
	})
	podGroupPods := func(group string) []client.Object {
		objs := the138765Cluster(false)
		for _, o := range objs[len(objs)-2:] {
			o.(*corev1.Pod).Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(group)}
		}
		return objs
	}
	t.Run("a PodGroup that does not exist yet", func(t *testing.T) {
		e := newEnv(t, interceptor.Funcs{}, podGroupPods("train")...)
		e.r.gangs.podGroups = true
		e.tainted()
		e.place("a")
		if e.claim("a-gpu").Status.Allocation != nil {
			t.Error("a pod whose PodGroup does not exist was placed")
		}
	})
	t.Run("the PodGroup's gang", func(t *testing.T) {
		pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: tns, Name: "train"},
			Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 2}}}}
		e := newEnv(t, interceptor.Funcs{}, append(podGroupPods("train"), pg)...)
		e.r.gangs.podGroups = true
		e.tainted()
		e.place("a")
		if got := devicesOf(e.claim("a-gpu")); len(got) != 1 || got[0] != "n0/dev-2" {
			t.Errorf("claim a-gpu got %v, want the y device (the gang's placement)", got)
		}
		if claimpolicy.HasGate(e.pod("a")) || claimpolicy.HasGate(e.pod("b")) {
			t.Error("gates not lifted")
		}
	})
	t.Run("PodGroups not served: the field is ignored", func(t *testing.T) {
		e := newEnv(t, interceptor.Funcs{}, podGroupPods("train")...)
		e.tainted()
		e.place("a")
		if e.claim("a-gpu").Status.Allocation == nil {
			t.Error("without the Workload API the pod is placed alone")
		}
	})
}

// TestGangPinnedToItsNodes: devices of every node (a node-less pool) do
// not pin the members; the gate is lifted together with a node selector
// for the node the placement counted each member on.
func TestGangPinnedToItsNodes(t *testing.T) {
	e := newEnv(t, interceptor.Funcs{}, stack("mh"), gpuClass(), node("n1", "1"), node("n2", "1"), poolSlice("mh", "a"),
		countClaim("a-gpu", 1, ""), countClaim("b-gpu", 1, ""), gangPod("a", "g", 2, "a-gpu"), gangPod("b", "g", 2, "b-gpu"))
	e.tainted()
	e.place("a")
	hosts := map[string]bool{}
	for _, p := range []string{"a", "b"} {
		pod := e.pod(p)
		if claimpolicy.HasGate(pod) {
			t.Fatalf("pod %s still gated", p)
		}
		h := pod.Spec.NodeSelector[placement.HostnameLabel]
		if h == "" {
			t.Errorf("pod %s not pinned: %v", p, pod.Spec.NodeSelector)
		}
		hosts[h] = true
	}
	// One cpu per node: the members fit only on two nodes.
	if len(hosts) != 2 {
		t.Errorf("members pinned to %v, want one each on n1 and n2", hosts)
	}
	if !hasEvent(e.events(), corev1.EventTypeNormal, EventGateRemoved, "pinned there") {
		t.Error("the GateRemoved Event does not say the pod was pinned")
	}
}

// TestGangEngines: the upstream engine places no gangs (NotSupported, one
// Event, no retry); every engine call gets the configured policy.
func TestGangEngines(t *testing.T) {
	t.Run("upstream", func(t *testing.T) {
		objs := the138765Cluster(true)
		objs[0].(*v1alpha1.DRAStack).Spec.Claims.Engine = v1alpha1.EngineUpstream
		e := newEnv(t, interceptor.Funcs{}, objs...)
		e.r.Engines[string(v1alpha1.EngineUpstream)] = plainEngine{native.New()}
		e.tainted()
		res := e.place("a")
		if !hasEvent(e.events(), corev1.EventTypeWarning, string(claimpolicy.OutcomeNotSupported), "does not place gangs") {
			t.Error("no NotSupported Event")
		}
		if res.requeue != 0 || e.claim("a-gpu").Status.Allocation != nil {
			t.Errorf("requeue %s, allocation %v", res.requeue, devicesOf(e.claim("a-gpu")))
		}
	})
	for _, policy := range []v1alpha1.PlacementPolicy{"", v1alpha1.PlacementFirstFit} {
		t.Run("policy "+string(policy), func(t *testing.T) {
			want := allocator.PlacementPolicy(policy)
			if want == "" {
				want = allocator.PlacementPack
			}
			objs := append(the138765Cluster(true), immediateClaim("now"), countClaim("solo-gpu", 1, ""), gatedPod("solo", "1", "solo-gpu"))
			objs[0].(*v1alpha1.DRAStack).Spec.Claims.PlacementPolicy = policy
			spy := &spyEngine{Engine: native.New()}
			e := newEnv(t, interceptor.Funcs{}, objs...)
			e.r.Engines[string(v1alpha1.EngineNative)] = spy
			e.tainted()
			e.place("a")
			e.place("solo")
			if _, err := e.r.Reconcile(context.Background(), reqOf(tns, "now")); err != nil {
				t.Fatal(err)
			}
			spy.mu.Lock()
			defer spy.mu.Unlock()
			if len(spy.calls) < 3 {
				t.Fatalf("engine calls %v, want the gang, the pod and the immediate claim", spy.calls)
			}
			for _, c := range spy.calls {
				if !strings.HasSuffix(c, " "+string(want)) {
					t.Errorf("engine call %q, want policy %s", c, want)
				}
			}
		})
	}
}

// plainEngine hides the native session's AllocateGang, as the upstream
// engine's sessions have none.
type plainEngine struct{ allocator.Engine }

func (p plainEngine) Name() string { return string(v1alpha1.EngineUpstream) }

func (p plainEngine) NewSession(ctx context.Context, in allocator.Inputs) (allocator.Session, error) {
	s, err := p.Engine.NewSession(ctx, in)
	return plainSession{s}, err
}

type plainSession struct{ allocator.Session }

// spyEngine records the options of every engine call ("Allocate Pack").
type spyEngine struct {
	allocator.Engine
	mu    sync.Mutex
	calls []string
}

func (s *spyEngine) NewSession(ctx context.Context, in allocator.Inputs) (allocator.Session, error) {
	sess, err := s.Engine.NewSession(ctx, in)
	if err != nil {
		return nil, err
	}
	return &spySession{Session: sess, gang: sess.(allocator.GangSession), e: s}, nil
}

func (s *spyEngine) note(call string, o allocator.Options) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, call+" "+string(o.Policy))
}

type spySession struct {
	allocator.Session
	gang allocator.GangSession
	e    *spyEngine
}

func (s *spySession) Allocate(ctx context.Context, claims []*resourceapi.ResourceClaim, o allocator.Options) ([]allocator.Result, error) {
	s.e.note("Allocate", o)
	return s.Session.Allocate(ctx, claims, o)
}

func (s *spySession) AllocateGang(ctx context.Context, g allocator.Gang, o allocator.Options) ([]allocator.MemberResult, error) {
	s.e.note("AllocateGang", o)
	return s.gang.AllocateGang(ctx, g, o)
}
