package claims

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/native"
	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/fence"
	"github.com/drastack/drastack/internal/ledger"
)

// The test cluster: driver tdrv publishes one node-local pool per node
// (named after the node) and two node-less pools, "mh" (central) and
// "shared" (kube-scheduler's). Class "gpu" selects every device of tdrv.
const (
	tdrv  = "gpu.example.com"
	tns   = "ns"
	class = "gpu"
)

func init() {
	// The controller logs through controller-runtime's logger.
	log.SetLogger(logr.Discard())
}

// testStart is the fake clock's start.
var testStart = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

func testScheme(t testing.TB) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// patchLog records every patch the controller sends, with its data as
// computed from the object the controller passed in.
type patchLog struct {
	mu      sync.Mutex
	patches []sentPatch
}

type sentPatch struct {
	kind        string // Kind of the object
	name        string
	subresource string // "" or "status"
	typ         types.PatchType
	data        map[string]any
	manager     string // the field manager it was sent with
}

func (l *patchLog) add(t testing.TB, c client.Client, obj client.Object, sub string, p client.Patch, manager string) {
	raw, err := p.Data(obj)
	if err != nil {
		t.Errorf("patch data of %T %s: %v", obj, obj.GetName(), err)
		return
	}
	var data map[string]any
	if err := json.Unmarshal(raw, &data); err != nil {
		t.Errorf("patch of %T %s is not a JSON object: %s", obj, obj.GetName(), raw)
		return
	}
	gvk, _ := c.GroupVersionKindFor(obj)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.patches = append(l.patches, sentPatch{kind: gvk.Kind, name: obj.GetName(), subresource: sub, typ: p.Type(), data: data, manager: manager})
}

// reset forgets the patches sent so far (a test's setup).
func (l *patchLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.patches = nil
}

func (l *patchLog) all() []sentPatch {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]sentPatch(nil), l.patches...)
}

// fields lists the leaf paths a JSON patch sets ("metadata.resourceVersion",
// "status.allocation", ...), stopping at the paths in stop, whose values
// are whole fields the patch replaces.
func fields(prefix string, v any, stop map[string]bool) []string {
	m, ok := v.(map[string]any)
	if !ok || stop[prefix] {
		return []string{prefix}
	}
	var out []string
	for k, sub := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		out = append(out, fields(p, sub, stop)...)
	}
	return out
}

// checkPatches fails unless every patch is a merge patch with
// metadata.resourceVersion that sets only fields in allowed (by kind and
// subresource: "ResourceClaim/status").
func checkPatches(t testing.TB, log *patchLog, allowed map[string][]string) {
	t.Helper()
	for _, p := range log.all() {
		what := p.kind
		if p.subresource != "" {
			what += "/" + p.subresource
		}
		if p.manager != FieldManager {
			t.Errorf("patch of %s %s sent as field manager %q, want %q", what, p.name, p.manager, FieldManager)
		}
		if p.typ != types.MergePatchType {
			t.Errorf("patch of %s %s is %s, want a merge patch", what, p.name, p.typ)
		}
		md, _ := p.data["metadata"].(map[string]any)
		if rv, _ := md["resourceVersion"].(string); rv == "" {
			t.Errorf("patch of %s %s carries no metadata.resourceVersion: %v", what, p.name, p.data)
		}
		stop := map[string]bool{}
		for _, f := range allowed[what] {
			stop[f] = true
		}
		for _, f := range fields("", p.data, stop) {
			if f != "metadata.resourceVersion" && !stop[f] && !hasPrefixIn(f, allowed[what]) {
				t.Errorf("patch of %s %s sets %s, which it must not send: %v", what, p.name, f, p.data)
			}
		}
	}
}

func hasPrefixIn(f string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(f, p+".") {
			return true
		}
	}
	return false
}

// allowedPatches are the fields each write of the controller may change.
var allowedPatches = map[string][]string{
	"ResourceClaim":        {"metadata.finalizers"},
	"ResourceClaim/status": {"status.allocation"},
	"Pod":                  {"spec.schedulingGates"},
	"DeviceTaintRule":      {"metadata.labels", "spec"},
	"DRAStack":             {"metadata.finalizers"},
}

// env is a Reconciler on a fake client, with its patches logged and its
// Events recorded.
type env struct {
	t       testing.TB
	c       client.WithWatch
	r       *Reconciler
	rec     *events.FakeRecorder
	patches *patchLog
	now     time.Time
}

// newEnv builds the Reconciler by hand, as SetupWithManager would: the
// placement loop reads pods from the fake client, and the cluster serves
// DeviceTaintRule. funcs wrap the fake client after the patch log.
func newEnv(t testing.TB, funcs interceptor.Funcs, objs ...client.Object) *env {
	t.Helper()
	e := &env{t: t, rec: events.NewFakeRecorder(100), patches: &patchLog{}, now: testStart}
	logging := interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			var o client.PatchOptions
			o.ApplyOptions(opts)
			e.patches.add(t, c, obj, "", p, o.FieldManager)
			if funcs.Patch != nil {
				return funcs.Patch(ctx, c, obj, p, opts...)
			}
			return c.Patch(ctx, obj, p, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			var o client.SubResourcePatchOptions
			o.ApplyOptions(opts)
			e.patches.add(t, c, obj, sub, p, o.FieldManager)
			if funcs.SubResourcePatch != nil {
				return funcs.SubResourcePatch(ctx, c, sub, obj, p, opts...)
			}
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
		Get: funcs.Get, List: funcs.List, Create: funcs.Create, Delete: funcs.Delete, Update: funcs.Update,
	}
	e.c = fake.NewClientBuilder().WithScheme(testScheme(t)).
		WithStatusSubresource(&resourceapi.ResourceClaim{}, &v1alpha1.DRAStack{}, &corev1.Pod{}).
		WithReturnManagedFields().
		WithObjects(objs...).
		WithInterceptorFuncs(logging).
		Build()
	e.r = &Reconciler{
		Client:   e.c,
		Recorder: e.rec,
		Engines:  map[string]allocator.Engine{string(v1alpha1.EngineNative): native.New()},
		Now:      func() time.Time { return e.now },
	}
	e.r.fence = &openFence{}
	e.r.init()
	e.r.podCache = e.c
	e.r.taintRules = true
	e.r.source.taintRules = true
	e.r.ledger.SetReady(true)
	return e
}

// openFence stands in for the allocation fence in tests of single
// branches: the fake client's resourceVersions count per object, so the
// real fence's comparison (package fence, tested there, in the
// simulation and end to end) cannot run on it. It lets every write
// through unless lost is set.
type openFence struct {
	lost     bool
	acquired ledger.Version
	scopes   [][]string
}

func (f *openFence) Acquire(_ context.Context, scope []string) ([]string, ledger.Version, error) {
	f.scopes = append(f.scopes, scope)
	return nil, f.acquired, nil
}
func (f *openFence) Term() string { return "test-term" }
func (f *openFence) Await(context.Context, ledger.Version) error {
	if f.lost {
		return fence.ErrLost
	}
	return nil
}
func (f *openFence) EnsureScope(context.Context, []string) error { return nil }
func (f *openFence) Lost() <-chan struct{}                       { return nil }

// countSourceReads counts the session builds from now on (each reads the
// cached slices once).
func (e *env) countSourceReads() *atomic.Int32 {
	n := &atomic.Int32{}
	e.r.source.reader = &countingLister{Reader: e.c, n: n}
	return n
}

type countingLister struct {
	client.Reader
	n *atomic.Int32
}

func (c *countingLister) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*resourceapi.ResourceSliceList); ok {
		c.n.Add(1)
	}
	return c.Reader.List(ctx, list, opts...)
}

// decide takes a decision turn that allocates nothing: it builds the
// session if it is not current.
func (e *env) decide() {
	e.t.Helper()
	if err := e.r.ledger.Decide(context.Background(), tns, native.New(), func(*ledger.Decision) error { return nil }); err != nil {
		e.t.Fatal(err)
	}
}

// markAllocatedBy records manager as the writer of the stored claim's
// allocation, as the API server's managedFields would.
func (e *env) markAllocatedBy(name, manager string) {
	e.t.Helper()
	c := e.claim(name)
	c.ManagedFields = allocatedBy(c, "", manager).ManagedFields
	if err := e.c.Update(context.Background(), c); err != nil {
		e.t.Fatal(err)
	}
	e.r.ledger.Observe(e.claim(name))
}

// observeAll tells the ledger every claim of the fake API, as the claim
// informer would.
func (e *env) observeAll() {
	e.t.Helper()
	var list resourceapi.ResourceClaimList
	if err := e.c.List(context.Background(), &list); err != nil {
		e.t.Fatal(err)
	}
	for i := range list.Items {
		e.r.ledger.Observe(&list.Items[i])
	}
}

// events drains the recorded Events.
func (e *env) events() []string {
	var out []string
	for {
		select {
		case ev := <-e.rec.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

// claim reads a claim from the fake API server.
func (e *env) claim(name string) *resourceapi.ResourceClaim {
	e.t.Helper()
	var c resourceapi.ResourceClaim
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: tns, Name: name}, &c); err != nil {
		e.t.Fatalf("get claim %s: %v", name, err)
	}
	return &c
}

func (e *env) pod(name string) *corev1.Pod {
	e.t.Helper()
	var p corev1.Pod
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: tns, Name: name}, &p); err != nil {
		e.t.Fatalf("get pod %s: %v", name, err)
	}
	return &p
}

// stackOrNil reads the DRAStack (nil when it is gone).
func (e *env) stackOrNil() *v1alpha1.DRAStack {
	e.t.Helper()
	var st v1alpha1.DRAStack
	err := e.c.Get(context.Background(), types.NamespacedName{Name: v1alpha1.DRAStackName}, &st)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		e.t.Fatalf("get DRAStack: %v", err)
	}
	return &st
}

// stack reads the DRAStack, which must exist.
func (e *env) stack() *v1alpha1.DRAStack {
	e.t.Helper()
	st := e.stackOrNil()
	if st == nil {
		e.t.Fatal("the DRAStack is gone")
	}
	return st
}

// hasEvent says whether one of evs has this type and reason and contains
// every part.
func hasEvent(evs []string, typ, reason string, parts ...string) bool {
	for _, ev := range evs {
		if !strings.HasPrefix(ev, typ+" "+reason+" ") {
			continue
		}
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(ev, p)
		}
		if ok {
			return true
		}
	}
	return false
}

// stack is the DRAStack: central are the pools of tdrv only the operator
// allocates (every node-local pool and "mh"), for class gpu.
func stack(central ...string) *v1alpha1.DRAStack {
	st := &v1alpha1.DRAStack{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DRAStackName, UID: "stack-uid", Generation: 1}}
	if len(central) > 0 {
		st.Spec.Claims.Central = []v1alpha1.CentralDevices{{Driver: tdrv, Pools: central, Classes: []string{class}, AllowImmediate: true}}
	}
	return st
}

func gpuClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: class},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + tdrv + `"`},
		}}},
	}
}

// devices are two devices of a model.
func devices(model string) []resourceapi.Device {
	var out []resourceapi.Device
	for _, n := range []string{"dev-0", "dev-1"} {
		out = append(out, resourceapi.Device{Name: n, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"model": {StringValue: ptr.To(model)},
		}})
	}
	return out
}

func nodeSlice(node, model string) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-slice"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: tdrv, Pool: resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
			NodeName: ptr.To(node), Devices: devices(model),
		},
	}
}

func poolSlice(pool, model string) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: pool + "-slice"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: tdrv, Pool: resourceapi.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: 1},
			AllNodes: ptr.To(true), Devices: devices(model),
		},
	}
}

func node(name, cpu string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110"),
		}},
	}
}

// gpuClaim is a claim for one device of class gpu.
func gpuClaim(name string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: tns, Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(testStart)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
		}}}},
	}
}

func immediateClaim(name string) *resourceapi.ResourceClaim {
	c := gpuClaim(name)
	c.Labels = map[string]string{claimpolicy.AllocationLabel: claimpolicy.AllocationImmediate}
	return c
}

// celClaim wants a device of the model.
func celClaim(name, model string) *resourceapi.ResourceClaim {
	c := gpuClaim(name)
	c.Annotations = map[string]string{allocator.CELConstraintsAnnotation: `[{"expression": "devices.all(d, d.attributes[\"` + tdrv + `\"].model == \"` + model + `\")"}]`}
	return c
}

// gatedPod uses the claims and requests cpu.
func gatedPod(name, cpu string, claims ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: tns, Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(testStart)},
		Spec: corev1.PodSpec{
			SchedulingGates: []corev1.PodSchedulingGate{{Name: claimpolicy.SchedulingGate}},
			Containers: []corev1.Container{{Name: "c", Image: "i", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)},
			}}},
		},
	}
	for _, c := range claims {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: c, ResourceClaimName: ptr.To(c)})
	}
	return p
}

// allocatedBy returns the claim with an allocation of the node-local
// device node/dev-0, written by manager (recorded in managedFields).
func allocatedBy(c *resourceapi.ResourceClaim, node, manager string) *resourceapi.ResourceClaim {
	c = c.DeepCopy()
	c.Finalizers = append(c.Finalizers, claimpolicy.Finalizer)
	c.Status.Allocation = &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: tdrv, Pool: node, Device: "dev-0",
		}}},
		AllocationTimestamp: ptr.To(metav1.NewTime(testStart)),
	}
	c.ManagedFields = []metav1.ManagedFieldsEntry{{
		Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "resource.k8s.io/v1", Subresource: "status",
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:allocation":{}}}`)},
	}}
	return c
}
