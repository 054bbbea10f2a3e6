package claims

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/drastack/drastack/internal/allocator/native"
	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/ledger"
)

var claimGR = schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}

func conflictErr(name string) error {
	return apierrors.NewConflict(claimGR, name, errors.New("the object has been modified"))
}

func invalidErr(name string) error {
	return apierrors.NewInvalid(schema.GroupKind{Group: "resource.k8s.io", Kind: "ResourceClaim"}, name,
		field.ErrorList{field.Invalid(field.NewPath("status", "allocation"), nil, "refused")})
}

func forbiddenErr(name string) error {
	return apierrors.NewForbidden(claimGR, name, errors.New("admission policy"))
}

// countingReader counts the reads after a conflict.
type countingReader struct {
	client.Reader
	gets atomic.Int32
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.gets.Add(1)
	return c.Reader.Get(ctx, key, obj, opts...)
}

// testAllocation is an allocation of the central node-local device n1/dev-0.
func testAllocation() *resourceapi.AllocationResult {
	return &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: tdrv, Pool: "n1", Device: "dev-0",
		}}},
		AllocationTimestamp: ptr.To(metav1.NewTime(testStart)),
	}
}

// onPatch returns interceptor funcs whose claim patch (sub "" or
// "status") calls fn with the attempt number (from 1); fn returns the
// error to inject, or nil to let the patch through.
func onPatch(sub string, fn func(attempt int, c client.Client, obj client.Object) error) interceptor.Funcs {
	var n atomic.Int32
	call := func(ctx context.Context, c client.Client, obj client.Object) error {
		if _, ok := obj.(*resourceapi.ResourceClaim); !ok {
			return nil
		}
		return fn(int(n.Add(1)), c, obj)
	}
	if sub == "" {
		return interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			if err := call(ctx, c, obj); err != nil {
				return err
			}
			return c.Patch(ctx, obj, p, opts...)
		}}
	}
	return interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, s string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
		if err := call(ctx, c, obj); err != nil {
			return err
		}
		return c.SubResource(s).Patch(ctx, obj, p, opts...)
	}}
}

// changeInAPI changes the stored claim behind the controller's back.
func changeInAPI(t *testing.T, c client.Client, name string, change func(*resourceapi.ResourceClaim)) {
	t.Helper()
	var cur resourceapi.ResourceClaim
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: tns, Name: name}, &cur); err != nil {
		t.Fatal(err)
	}
	before := *cur.Status.DeepCopy()
	change(&cur)
	want := *cur.Status.DeepCopy()
	if err := c.Update(context.Background(), &cur); err != nil {
		t.Fatal(err)
	}
	if !equalStatus(before, want) {
		cur.Status = want
		if err := c.Status().Update(context.Background(), &cur); err != nil {
			t.Fatal(err)
		}
	}
}

func equalStatus(a, b resourceapi.ResourceClaimStatus) bool {
	return (a.Allocation == nil) == (b.Allocation == nil) && len(a.ReservedFor) == len(b.ReservedFor)
}

// reserveFor decides for claim name (as the cache shows it) in a turn of
// the ledger, reserving testAllocation; it returns the claim as read.
func (e *env) reserveFor(name string) *resourceapi.ResourceClaim {
	e.t.Helper()
	c := e.claim(name)
	err := e.r.ledger.Decide(context.Background(), c.Namespace, native.New(), func(d *ledger.Decision) error {
		return d.Reserve(c, testAllocation(), "")
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// The write of a reservation and what its answer makes of it
// (docs/allocation-protocol.md, section 1): only evidence ends it.
func TestWriteReserved(t *testing.T) {
	const name = "c"
	timeout := apierrors.NewTimeoutError("etcd is slow", 1)
	// committedThen commits the patch, then answers with err: the write
	// landed although the client got an error.
	committedThen := func(err error) func(int, client.Client, client.Object) error {
		return func(attempt int, c client.Client, obj client.Object) error {
			if attempt > 1 {
				return nil
			}
			cur := &resourceapi.ResourceClaim{}
			if gerr := c.Get(context.Background(), client.ObjectKeyFromObject(obj), cur); gerr != nil {
				return gerr
			}
			cur.Status.Allocation = testAllocation()
			if uerr := c.Status().Update(context.Background(), cur); uerr != nil {
				return uerr
			}
			return err
		}
	}
	failFirst := func(err error) func(int, client.Client, client.Object) error {
		return func(attempt int, _ client.Client, _ client.Object) error {
			if attempt == 1 {
				return err
			}
			return nil
		}
	}
	for _, tc := range []struct {
		name string
		fail func(attempt int, c client.Client, obj client.Object) error
		// before changes the claim after the decision, before the write.
		before func(t *testing.T, e *env)
		lost   bool
		// want is the first write's outcome; then, for an ambiguous one, the
		// second's.
		want, then   writeOutcome
		wantRefused  bool
		wantStored   bool // the claim ends allocated in the API
		wantReserved bool // the reservation is still pending at the end
	}{
		{name: "written", want: writeConfirmed, wantStored: true},
		{name: "a timeout that did not commit: ambiguous, sent again", fail: failFirst(timeout),
			want: writeAmbiguous, then: writeConfirmed, wantStored: true},
		{name: "a timeout that committed: the resend conflicts, the fresh read confirms", fail: committedThen(timeout),
			want: writeAmbiguous, then: writeConfirmed, wantStored: true},
		{name: "a reset connection that committed", fail: committedThen(errors.New("read: connection reset by peer")),
			want: writeAmbiguous, then: writeConfirmed, wantStored: true},
		{name: "a 403 proves nothing: kept", fail: failFirst(forbiddenErr(name)),
			want: writeAmbiguous, then: writeConfirmed, wantStored: true},
		{name: "a 5xx: kept", fail: failFirst(apierrors.NewInternalError(errors.New("etcd leader changed"))),
			want: writeAmbiguous, then: writeConfirmed, wantStored: true},
		{name: "changed since it was read: the write can never commit", before: func(t *testing.T, e *env) {
			changeInAPI(t, e.c, name, func(c *resourceapi.ResourceClaim) { c.Labels = map[string]string{"changed": "yes"} })
		}, want: writeReleased},
		{name: "gone", fail: failFirst(apierrors.NewNotFound(claimGR, name)), want: writeReleased},
		{name: "refused as invalid", fail: failFirst(invalidErr(name)), want: writeReleased, wantRefused: true},
		{name: "the fence is lost: nothing is written, the reservation stays", lost: true, want: writeLost, wantReserved: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claim := gpuClaim(name)
			claim.Finalizers = []string{claimpolicy.Finalizer}
			var funcs interceptor.Funcs
			if tc.fail != nil {
				funcs = onPatch("status", tc.fail)
			}
			e := newEnv(t, funcs, stack("n1"), gpuClass(), node("n1", "4"), nodeSlice("n1", "a"), claim)
			e.tainted()
			e.r.fence.(*openFence).lost = tc.lost
			read := e.reserveFor(name)
			if tc.before != nil {
				tc.before(t, e)
			}
			got, _, err := e.r.writeReserved(context.Background(), read.UID)
			if got != tc.want {
				t.Fatalf("first write: %s (%v), want %s", got, err, tc.want)
			}
			if tc.wantRefused != errors.Is(err, errRefused) {
				t.Errorf("error %v: refused %v, want %v", err, errors.Is(err, errRefused), tc.wantRefused)
			}
			if got == writeAmbiguous {
				if _, ok := e.r.ledger.Reserved(read.UID); !ok {
					t.Fatal("an ambiguous write released its reservation")
				}
				if got, _, err := e.r.writeReserved(context.Background(), read.UID); got != tc.then {
					t.Fatalf("second write: %s (%v), want %s", got, err, tc.then)
				}
			}
			stored := e.claim(name).Status.Allocation != nil
			if stored != tc.wantStored {
				t.Errorf("stored allocation %v, want %v", stored, tc.wantStored)
			}
			_, reserved := e.r.ledger.Reserved(read.UID)
			if reserved != tc.wantReserved {
				t.Errorf("reservation pending %v, want %v", reserved, tc.wantReserved)
			}
			// The ledger counts the device exactly when the API has it, or
			// the reservation may still commit.
			if counted := e.r.ledger.StateOf(read.UID).Allocation != nil; counted != (tc.wantStored || tc.wantReserved) {
				t.Errorf("ledger counts the allocation %v, want %v", counted, tc.wantStored || tc.wantReserved)
			}
		})
	}
}

// Issue 20, problem 1: the status patch of claim i1 gets a 504 and lands
// afterwards; claim i2 must not get the same device meanwhile, and i1
// ends allocated once its write is sent again.
func TestAmbiguousWriteKeepsItsDevice(t *testing.T) {
	ctx := context.Background()
	var held atomic.Pointer[resourceapi.ResourceClaim]
	funcs := onPatch("status", func(attempt int, _ client.Client, obj client.Object) error {
		if attempt == 1 {
			held.Store(obj.(*resourceapi.ResourceClaim).DeepCopy())
			return apierrors.NewTimeoutError("queued by priority and fairness", 1)
		}
		return nil
	})
	i1, i2 := immediateClaim("i1"), immediateClaim("i2")
	i1.Finalizers, i2.Finalizers = []string{claimpolicy.Finalizer}, []string{claimpolicy.Finalizer}
	one := nodeSlice("n1", "a")
	one.Spec.Devices = one.Spec.Devices[:1]
	e := newEnv(t, funcs, stack("n1"), gpuClass(), node("n1", "4"), one, i1, i2)
	e.tainted()
	e.observeAll()
	if _, err := e.r.Reconcile(ctx, reqOf(tns, "i1")); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.r.ledger.Reserved(i1.UID); !ok {
		t.Fatal("i1's reservation went with the 504")
	}
	if _, err := e.r.Reconcile(ctx, reqOf(tns, "i2")); err != nil {
		t.Fatal(err)
	}
	if e.claim("i2").Status.Allocation != nil {
		t.Fatal("i2 got a device whose write for i1 may still commit")
	}
	// The queued write commits now.
	landed := held.Load()
	cur := e.claim("i1")
	cur.Status.Allocation = landed.Status.Allocation
	if err := e.c.Status().Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.Reconcile(ctx, reqOf(tns, "i1")); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.r.ledger.Reserved(i1.UID); ok {
		t.Error("i1's reservation did not end on the evidence")
	}
	if e.r.ledger.StateOf(i1.UID).Allocation == nil {
		t.Error("the ledger does not count i1's allocation")
	}
}

func TestDeallocate(t *testing.T) {
	const name = "c"
	reserved := func(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
		c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "p"}}
		return c
	}
	deleting := func(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
		c.DeletionTimestamp = ptr.To(metav1.NewTime(testStart))
		return c
	}
	tests := []struct {
		name      string
		claim     *resourceapi.ResourceClaim
		funcs     func(t *testing.T) interceptor.Funcs
		done      bool
		err       bool
		allocated bool // the allocation is still stored
		finalizer bool
		patches   int
	}{
		{name: "the operator's movable claim", claim: allocatedBy(gpuClaim(name), "n1", FieldManager), done: true, patches: 2},
		{name: "kube-scheduler's claim is not touched", claim: allocatedBy(gpuClaim(name), "n1", "kube-scheduler"), allocated: true, finalizer: true},
		{name: "a reserved claim is not touched", claim: reserved(allocatedBy(gpuClaim(name), "n1", FieldManager)), allocated: true, finalizer: true},
		{name: "a claim being deleted is not touched", claim: deleting(allocatedBy(gpuClaim(name), "n1", FieldManager)), allocated: true, finalizer: true},
		{
			name: "reserved by kube-scheduler since it was read: conflict, kept", claim: allocatedBy(gpuClaim(name), "n1", FieldManager),
			funcs: func(t *testing.T) interceptor.Funcs {
				return onPatch("status", func(n int, c client.Client, _ client.Object) error {
					changeInAPI(t, c, name, func(c *resourceapi.ResourceClaim) { reserved(c) })
					return nil
				})
			},
			allocated: true, finalizer: true, patches: 1,
		},
		{
			name: "gone: nothing to do", claim: allocatedBy(gpuClaim(name), "n1", FieldManager),
			funcs: func(t *testing.T) interceptor.Funcs {
				return onPatch("status", func(int, client.Client, client.Object) error { return apierrors.NewNotFound(claimGR, name) })
			},
			allocated: true, finalizer: true, patches: 1,
		},
		{
			name: "403 is an error", claim: allocatedBy(gpuClaim(name), "n1", FieldManager),
			funcs: func(t *testing.T) interceptor.Funcs {
				return onPatch("status", func(int, client.Client, client.Object) error { return forbiddenErr(name) })
			},
			err: true, allocated: true, finalizer: true, patches: 1,
		},
		{
			name: "the finalizer cannot be removed: deallocated all the same", claim: allocatedBy(gpuClaim(name), "n1", FieldManager),
			funcs: func(t *testing.T) interceptor.Funcs {
				return onPatch("", func(int, client.Client, client.Object) error { return forbiddenErr(name) })
			},
			done: true, finalizer: true, patches: 2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var funcs interceptor.Funcs
			if tc.funcs != nil {
				funcs = tc.funcs(t)
			}
			e := newEnv(t, funcs, tc.claim)
			e.r.cfg.set(stack("n1"))
			claim := e.claim(name)
			if tc.claim.Status.Allocation != nil && claimpolicy.AllocatedBy(claim) != claimpolicy.AllocatedBy(tc.claim) {
				t.Fatalf("the fake client lost managedFields: allocated by %q", claimpolicy.AllocatedBy(claim))
			}
			e.observeAll()
			done, err := e.r.deallocate(context.Background(), claim)
			if (err != nil) != tc.err || done != tc.done {
				t.Fatalf("deallocate = %v, %v; want %v, error %v", done, err, tc.done, tc.err)
			}
			if counted := e.r.ledger.StateOf(claim.UID).Allocation != nil; done && counted {
				t.Errorf("the ledger still counts a deallocated claim's devices")
			}
			var stored resourceapi.ResourceClaim
			if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: tns, Name: name}, &stored); err != nil {
				t.Fatal(err)
			}
			if (stored.Status.Allocation != nil) != tc.allocated {
				t.Errorf("stored allocation %+v, want allocated: %v", stored.Status.Allocation, tc.allocated)
			}
			if claimpolicy.HasFinalizer(&stored) != tc.finalizer {
				t.Errorf("stored finalizers %v, want the finalizer: %v", stored.Finalizers, tc.finalizer)
			}
			if got := len(e.patches.all()); got != tc.patches {
				t.Errorf("%d patches sent, want %d", got, tc.patches)
			}
			checkPatches(t, e.patches, allowedPatches)
		})
	}
}

func TestLiftGate(t *testing.T) {
	const name = "p"
	otherGate := corev1.PodSchedulingGate{Name: "example.com/other"}
	withOther := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, otherGate)
		return p
	}
	podGR := schema.GroupResource{Resource: "pods"}
	failPod := func(err error) func(*testing.T) interceptor.Funcs {
		return func(*testing.T) interceptor.Funcs {
			return interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
				return err
			}}
		}
	}
	tests := []struct {
		name    string
		pod     *corev1.Pod
		funcs   func(t *testing.T) interceptor.Funcs
		err     bool
		gates   []corev1.PodSchedulingGate
		patches int
		event   bool
	}{
		{name: "the operator's gate goes, others stay", pod: withOther(gatedPod(name, "1")), gates: []corev1.PodSchedulingGate{otherGate}, patches: 1, event: true},
		{name: "the only gate", pod: gatedPod(name, "1"), patches: 1, event: true},
		{
			name: "not gated: nothing sent",
			pod: func() *corev1.Pod {
				p := gatedPod(name, "1")
				p.Spec.SchedulingGates = []corev1.PodSchedulingGate{otherGate}
				return p
			}(),
			gates: []corev1.PodSchedulingGate{otherGate},
		},
		{
			name: "changed since it was read: left to its update event",
			pod:  gatedPod(name, "1"),
			funcs: func(t *testing.T) interceptor.Funcs {
				return interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
					var cur corev1.Pod
					if err := c.Get(ctx, client.ObjectKeyFromObject(obj), &cur); err != nil {
						t.Fatal(err)
					}
					cur.Labels = map[string]string{"changed": "yes"}
					if err := c.Update(ctx, &cur); err != nil {
						t.Fatal(err)
					}
					return c.Patch(ctx, obj, p, opts...)
				}}
			},
			gates: []corev1.PodSchedulingGate{{Name: claimpolicy.SchedulingGate}}, patches: 1,
		},
		{name: "gone", pod: gatedPod(name, "1"), funcs: failPod(apierrors.NewNotFound(podGR, name)), gates: []corev1.PodSchedulingGate{{Name: claimpolicy.SchedulingGate}}, patches: 1},
		{name: "403 is an error", pod: gatedPod(name, "1"), funcs: failPod(apierrors.NewForbidden(podGR, name, errors.New("no"))), err: true, gates: []corev1.PodSchedulingGate{{Name: claimpolicy.SchedulingGate}}, patches: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var funcs interceptor.Funcs
			if tc.funcs != nil {
				funcs = tc.funcs(t)
			}
			e := newEnv(t, funcs, tc.pod)
			p := &placementReconciler{r: e.r}
			err := p.liftGate(context.Background(), e.pod(name), "test")
			if (err != nil) != tc.err {
				t.Fatalf("liftGate: %v, want error %v", err, tc.err)
			}
			if got := e.pod(name).Spec.SchedulingGates; !slices.Equal(got, tc.gates) {
				t.Errorf("gates %v, want %v", got, tc.gates)
			}
			if got := len(e.patches.all()); got != tc.patches {
				t.Errorf("%d patches sent, want %d", got, tc.patches)
			}
			checkPatches(t, e.patches, allowedPatches)
			if evs := e.events(); hasEvent(evs, corev1.EventTypeNormal, EventGateRemoved) != tc.event {
				t.Errorf("events %q, want %s: %v", evs, EventGateRemoved, tc.event)
			}
		})
	}
}
