package pool

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	poolpkg "github.com/drastack/drastack/internal/pool"
)

// The one branch that needs a client: two pools whose plain names collide
// ("a-b" + "c" and "a" + "b-c") get separate DevicePools, and a pool keeps
// the object it has even when its plain name becomes free again.
func TestDevicePoolNameCollision(t *testing.T) {
	first := poolpkg.ID{Driver: "a-b", Pool: "c"}
	second := poolpkg.ID{Driver: "a", Pool: "b-c"}
	if Name(first) != Name(second) {
		t.Fatal("test needs colliding plain names")
	}
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(newDevicePool(Name(first), first)).Build()
	r := &Reconciler{Client: c}

	tests := []struct {
		name     string
		id       poolpkg.ID
		wantName string
		exists   bool
	}{
		{"the owner of the plain name finds it", first, Name(first), true},
		{"the other pool is given the hashed name", second, HashedName(second), false},
	}
	for _, tt := range tests {
		dp, name, err := r.devicePool(ctx, tt.id)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if name != tt.wantName || (dp != nil) != tt.exists {
			t.Errorf("%s: name %q (exists %v), want %q (exists %v)", tt.name, name, dp != nil, tt.wantName, tt.exists)
		}
	}

	if err := c.Create(ctx, newDevicePool(HashedName(second), second)); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, &v1alpha1.DevicePool{ObjectMeta: metav1.ObjectMeta{Name: Name(first)}}); err != nil {
		t.Fatal(err)
	}
	dp, name, err := r.devicePool(ctx, second)
	if err != nil || dp == nil || name != HashedName(second) {
		t.Errorf("after the plain name became free: %q exists %v, err %v; want the existing hashed object", name, dp != nil, err)
	}
}

func scheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}
