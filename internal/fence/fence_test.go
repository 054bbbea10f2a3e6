package fence

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/drastack/drastack/internal/ledger"
)

func newFence(c client.Client, id string, lost *atomic.Int32) *Fence {
	return New(Options{Client: c, Namespace: "ns", Identity: id, Sleep: func(time.Duration) {},
		OnLost: func() {
			if lost != nil {
				lost.Add(1)
			}
		}})
}

// A term writes only what it read before its last confirmation; a new
// term takes the fence, and the old one's confirmations fail from then on.
func TestTermsAreFenced(t *testing.T) {
	// A Lease from an earlier install, at some version (the fake client's
	// versions count per object; a real API server's are etcd revisions).
	old := &coordinationv1.Lease{}
	old.Namespace, old.Name = "ns", DefaultName
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(old).Build()
	var lostA atomic.Int32
	a := newFence(c, "a", &lostA)
	prev, accA, err := a.Acquire(context.Background(), []string{"x", "gpu", "x"})
	if err != nil || prev != nil {
		t.Fatalf("first acquire: prev %v, err %v", prev, err)
	}
	if accA < 2 {
		t.Fatalf("acquired at version %d; the test needs an older version to read", accA)
	}
	if a.Allows(accA) {
		t.Error("an object read at the acquisition's own version may not be written before a confirmation")
	}
	if !a.Allows(accA - 1) {
		t.Error("an object read before the acquisition may be written (after the sweep)")
	}
	// An object read after the acquisition needs a confirmation.
	if err := a.Await(context.Background(), accA+5); err != nil {
		t.Fatalf("await: %v", err)
	}
	if !a.Allows(accA + 5) {
		t.Error("after a confirmation newer than the read, the write is allowed")
	}

	b := newFence(c, "b", nil)
	prev, accB, err := b.Acquire(context.Background(), []string{"tpu"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(prev, []string{"gpu", "x"}) {
		t.Errorf("previous scope %v, want [gpu x]", prev)
	}
	if accB <= accA {
		t.Errorf("new term at version %d, not after %d", accB, accA)
	}
	// The old term still believes it holds the fence until it tries.
	err = a.Await(context.Background(), accB+1)
	if !errors.Is(err, ErrLost) {
		t.Fatalf("old term's await after the takeover: %v, want ErrLost", err)
	}
	if a.Holding() || a.Allows(accA-1) {
		t.Error("a term that lost the fence may write nothing")
	}
	if err := waitFor(func() bool { return lostA.Load() == 1 }); err != nil {
		t.Errorf("OnLost called %d times, want 1", lostA.Load())
	}
	// The new term confirms fine.
	if err := b.Await(context.Background(), accB+1); err != nil {
		t.Errorf("new term: %v", err)
	}
	var lease coordinationv1.Lease
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: DefaultName}, &lease); err != nil {
		t.Fatal(err)
	}
	if got := *lease.Spec.LeaseTransitions; got != 2 {
		t.Errorf("leaseTransitions %d, want 2 (an earlier install, then two terms)", got)
	}
}

// Confirmations without a definite answer are sent again; waiters wait
// meanwhile, and many waiters share confirmations.
func TestConfirmRetriesAndShares(t *testing.T) {
	var patches, failures atomic.Int32
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			patches.Add(1)
			if failures.Add(1) <= 2 {
				return apierrors.NewTimeoutError("slow etcd", 1)
			}
			return c.Patch(ctx, obj, p, opts...)
		},
	}).Build()
	f := newFence(c, "a", nil)
	_, acq, err := f.Acquire(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- f.Await(context.Background(), acq+ledger.Version(i%2))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := patches.Load(); n > 5 {
		t.Errorf("%d confirmations for 20 waiters, want a few", n)
	}
}

func TestLostLease(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).Build()
	f := newFence(c, "a", nil)
	_, acq, err := f.Acquire(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	lease := &coordinationv1.Lease{}
	lease.Namespace, lease.Name = "ns", DefaultName
	if err := c.Delete(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
	if err := f.Await(context.Background(), acq+1); !errors.Is(err, ErrLost) {
		t.Fatalf("await with the Lease gone: %v, want ErrLost", err)
	}
	if err := f.Await(context.Background(), 0); err == nil {
		t.Error("a version that is not a number must never be writable")
	}
}

// Acquire is an optimistic update: a conflict reads again.
func TestAcquireRetriesConflicts(t *testing.T) {
	var n atomic.Int32
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).Build()
	lease := &coordinationv1.Lease{}
	lease.Namespace, lease.Name = "ns", DefaultName
	if err := c.Create(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
	cc := interceptor.NewClient(c, interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if n.Add(1) == 1 {
				return apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, DefaultName, errors.New("changed"))
			}
			return c.Update(ctx, obj, opts...)
		},
	})
	f := newFence(cc, "a", nil)
	if _, _, err := f.Acquire(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if n.Load() != 2 || !f.Holding() {
		t.Errorf("updates %d, holding %v; want 2 and true", n.Load(), f.Holding())
	}
}

func waitFor(cond func() bool) error {
	for range 500 {
		if cond() {
			return nil
		}
		time.Sleep(2 * time.Millisecond)
	}
	return errors.New("timed out")
}
