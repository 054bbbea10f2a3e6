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

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/claimpolicy"
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

func TestWrite(t *testing.T) {
	const name = "c"
	tests := []struct {
		name      string
		claim     *resourceapi.ResourceClaim
		funcs     func(t *testing.T) interceptor.Funcs
		wantErr   error // errors.Is; nil: no error
		anyErr    bool  // some other error
		written   bool  // the allocation is stored
		finalizer bool  // the finalizer is stored
		rereads   int32 // reads through APIReader
		patches   int   // patches sent
		event     string
	}{
		{
			name: "finalizer then allocation", claim: gpuClaim(name),
			written: true, finalizer: true, patches: 2,
		},
		{
			name: "a claim with the finalizer gets only the allocation",
			claim: func() *resourceapi.ResourceClaim {
				c := gpuClaim(name)
				c.Finalizers = []string{claimpolicy.Finalizer}
				return c
			}(),
			written: true, finalizer: true, patches: 1,
		},
		{
			name: "a claim changed since it was read: re-read, then written", claim: gpuClaim(name),
			funcs: func(t *testing.T) interceptor.Funcs {
				return onPatch("status", func(n int, c client.Client, _ client.Object) error {
					if n == 1 {
						// A label is added between the read and the status write:
						// the resourceVersion precondition refuses the write.
						changeInAPI(t, c, name, func(c *resourceapi.ResourceClaim) { c.Labels = map[string]string{"x": "y"} })
					}
					return nil
				})
			},
			written: true, finalizer: true, rereads: 1, patches: 3,
		},
		{
			name: "a conflict on the finalizer: re-read, then written", claim: gpuClaim(name),
			funcs: func(t *testing.T) interceptor.Funcs {
				return onPatch("", func(n int, _ client.Client, _ client.Object) error {
					if n == 1 {
						return conflictErr(name)
					}
					return nil
				})
			},
			written: true, finalizer: true, rereads: 1, patches: 3,
		},
		{
			name: "gives up after maxWriteAttempts conflicts", claim: gpuClaim(name),
			funcs: func(t *testing.T) interceptor.Funcs {
				return onPatch("status", func(int, client.Client, client.Object) error { return conflictErr(name) })
			},
			wantErr: errTooManyConflicts, finalizer: true, rereads: maxWriteAttempts, patches: 1 + maxWriteAttempts,
			event: EventTooManyTries,
		},
		{
			name: "422 on the allocation is refused, not retried", claim: gpuClaim(name),
			funcs: func(t *testing.T) interceptor.Funcs {
				return onPatch("status", func(int, client.Client, client.Object) error { return invalidErr(name) })
			},
			wantErr: errRefused, finalizer: true, patches: 2,
		},
		{
			name: "403 on the finalizer is refused, not retried", claim: gpuClaim(name),
			funcs: func(t *testing.T) interceptor.Funcs {
				return onPatch("", func(int, client.Client, client.Object) error { return forbiddenErr(name) })
			},
			wantErr: errRefused, patches: 1,
		},
		{
			name: "500 is an error to retry with backoff", claim: gpuClaim(name),
			funcs: func(t *testing.T) interceptor.Funcs {
				return onPatch("status", func(int, client.Client, client.Object) error {
					return apierrors.NewInternalError(errors.New("etcd"))
				})
			},
			anyErr: true, finalizer: true, patches: 2,
		},
		{
			name: "a claim gone ends quietly", claim: gpuClaim(name),
			funcs: func(t *testing.T) interceptor.Funcs {
				return onPatch("", func(int, client.Client, client.Object) error { return apierrors.NewNotFound(claimGR, name) })
			},
			patches: 1,
		},
		{
			name: "allocated by someone else in between: ends quietly", claim: gpuClaim(name),
			funcs: func(t *testing.T) interceptor.Funcs {
				return onPatch("status", func(n int, c client.Client, _ client.Object) error {
					if n > 1 {
						t.Fatal("written again after the claim was allocated")
					}
					changeInAPI(t, c, name, func(c *resourceapi.ResourceClaim) {
						c.Status.Allocation = testAllocation()
						c.Status.Allocation.Devices.Results[0].Device = "dev-1"
					})
					return nil
				})
			},
			finalizer: true, rereads: 1, patches: 2,
		},
		{
			name: "CEL constraints changed in between: ends quietly", claim: celClaim(name, "a"),
			funcs: func(t *testing.T) interceptor.Funcs {
				return onPatch("status", func(n int, c client.Client, _ client.Object) error {
					changeInAPI(t, c, name, func(c *resourceapi.ResourceClaim) {
						c.Annotations[allocator.CELConstraintsAnnotation] = `[{"expression": "true"}]`
					})
					return nil
				})
			},
			finalizer: true, rereads: 1, patches: 2,
		},
		{
			name: "reserved but not allocated in between: ends quietly", claim: gpuClaim(name),
			funcs: func(t *testing.T) interceptor.Funcs {
				return onPatch("status", func(n int, c client.Client, _ client.Object) error {
					changeInAPI(t, c, name, func(c *resourceapi.ResourceClaim) {
						c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "p"}}
					})
					return nil
				})
			},
			finalizer: true, rereads: 1, patches: 2,
		},
		{
			name: "deleted in between: ends quietly", claim: gpuClaim(name),
			funcs: func(t *testing.T) interceptor.Funcs {
				return onPatch("status", func(n int, c client.Client, obj client.Object) error {
					// The finalizer holds the claim: it is being deleted.
					if err := c.Delete(context.Background(), obj.DeepCopyObject().(client.Object)); err != nil {
						t.Fatal(err)
					}
					return conflictErr(name)
				})
			},
			finalizer: true, rereads: 1, patches: 2,
		},
		{
			name: "read again after a conflict and gone: ends quietly", claim: gpuClaim(name),
			funcs: func(t *testing.T) interceptor.Funcs {
				var conflicted atomic.Bool
				return interceptor.Funcs{
					SubResourcePatch: func(ctx context.Context, c client.Client, s string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
						conflicted.Store(true)
						return conflictErr(name)
					},
					Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
						if conflicted.Load() {
							return apierrors.NewNotFound(claimGR, name)
						}
						return c.Get(ctx, key, obj, opts...)
					},
				}
			},
			rereads: 1, patches: 2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var funcs interceptor.Funcs
			if tc.funcs != nil {
				funcs = tc.funcs(t)
			}
			e := newEnv(t, funcs, stack("n1"), tc.claim)
			reader := &countingReader{Reader: e.c}
			e.r.APIReader = reader
			e.r.cfg.set(stack("n1"))
			var claim resourceapi.ResourceClaim
			if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: tns, Name: name}, &claim); err != nil {
				t.Fatal(err)
			}
			before := claim.DeepCopy()
			alloc := testAllocation()
			got, err := e.r.write(context.Background(), &claim, alloc)
			switch {
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("write: err %v, want %v", err, tc.wantErr)
			case tc.anyErr && (err == nil || errors.Is(err, errRefused) || errors.Is(err, errTooManyConflicts)):
				t.Fatalf("write: err %v, want a retriable error", err)
			case tc.wantErr == nil && !tc.anyErr && err != nil:
				t.Fatalf("write: %v", err)
			}
			if (got != nil) != tc.written {
				t.Errorf("write returned %v, want a claim: %v", got, tc.written)
			}
			if tc.written && (got.Status.Allocation == nil || got.Status.Allocation.Devices.Results[0].Device != "dev-0") {
				t.Errorf("returned claim carries %+v, want the allocation", got.Status.Allocation)
			}
			if !equalClaims(before, &claim) {
				t.Errorf("write changed the claim passed in")
			}
			var stored resourceapi.ResourceClaim
			err = e.c.Get(context.Background(), types.NamespacedName{Namespace: tns, Name: name}, &stored)
			if client.IgnoreNotFound(err) != nil {
				t.Fatal(err)
			}
			if ours := stored.Status.Allocation != nil && stored.Status.Allocation.Devices.Results[0].Device == "dev-0"; ours != tc.written {
				t.Errorf("stored allocation %+v, want ours: %v", stored.Status.Allocation, tc.written)
			}
			if err == nil && claimpolicy.HasFinalizer(&stored) != tc.finalizer {
				t.Errorf("stored finalizers %v, want the finalizer: %v", stored.Finalizers, tc.finalizer)
			}
			if got := reader.gets.Load(); got != tc.rereads {
				t.Errorf("%d reads through APIReader, want %d", got, tc.rereads)
			}
			if got := len(e.patches.all()); got != tc.patches {
				t.Errorf("%d patches sent, want %d", got, tc.patches)
			}
			checkPatches(t, e.patches, allowedPatches)
			evs := e.events()
			if tc.event != "" && !hasEvent(evs, corev1.EventTypeWarning, tc.event) {
				t.Errorf("events %q, want a %s", evs, tc.event)
			}
			if tc.event == "" && len(evs) > 0 {
				t.Errorf("unexpected events %q", evs)
			}
		})
	}
}

func equalClaims(a, b *resourceapi.ResourceClaim) bool {
	return a.ResourceVersion == b.ResourceVersion && slices.Equal(a.Finalizers, b.Finalizers) && (a.Status.Allocation == nil) == (b.Status.Allocation == nil)
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
			version := e.r.snap.version
			done, err := e.r.deallocate(context.Background(), claim)
			if (err != nil) != tc.err || done != tc.done {
				t.Fatalf("deallocate = %v, %v; want %v, error %v", done, err, tc.done, tc.err)
			}
			if done && e.r.snap.version == version {
				t.Errorf("a deallocation did not invalidate the engine session")
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
