package pool

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// A DevicePool this process created is not created again while its cache
// lags behind (that create could only fail as AlreadyExists and back the
// pool off); once createdWait has passed without the cache showing it, it
// is created again.
func TestCreatedDevicePoolAwaitsTheCache(t *testing.T) {
	ctx := context.Background()
	creates := 0
	c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme(t)).Build(), interceptor.Funcs{
		// The cache never shows a DevicePool.
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*v1alpha1.DevicePool); ok {
				return apierrors.NewNotFound(v1alpha1.GroupVersion.WithResource("devicepools").GroupResource(), key.Name)
			}
			return c.Get(ctx, key, obj, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			creates++
			return nil
		},
		SubResourceApply: func(context.Context, client.Client, string, runtime.ApplyConfiguration, ...client.SubResourceApplyOption) error {
			return nil
		},
	})
	now := t0
	r := &Reconciler{Client: c, Now: func() time.Time { return now }}
	r.init()
	r.model.upsertSlice(nil, gpuSlice("s1", "p1", "n1", 1, 1, "d0"))

	if _, err := r.Reconcile(ctx, pid("p1")); err != nil || creates != 1 {
		t.Fatalf("first reconcile: %d creates, err %v; want 1", creates, err)
	}
	now = now.Add(time.Second)
	res, err := r.Reconcile(ctx, pid("p1"))
	if err != nil || creates != 1 {
		t.Fatalf("reconcile while the cache lags: %d creates, err %v; want still 1", creates, err)
	}
	if want := createdWait - time.Second; res.RequeueAfter != want {
		t.Errorf("looks again after %s, want %s", res.RequeueAfter, want)
	}
	now = now.Add(createdWait)
	if _, err := r.Reconcile(ctx, pid("p1")); err != nil || creates != 2 {
		t.Errorf("after createdWait: %d creates, err %v; want a second", creates, err)
	}
}
