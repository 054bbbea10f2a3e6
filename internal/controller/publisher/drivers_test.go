package publisher

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// fakeAPI is a fake clientset that, like the API server, names objects
// created with only a generateName (the library names slices that way).
func fakeAPI() *fake.Clientset {
	kube := fake.NewClientset()
	var n atomic.Int64
	kube.PrependReactor("create", "resourceslices", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if s, ok := action.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceSlice); ok && s.Name == "" {
			s.Name = fmt.Sprintf("%s%05d", s.GenerateName, n.Add(1))
		}
		return false, nil, nil
	})
	return kube
}

// slicesByPool lists the slices in the fake API server by pool name.
func slicesByPool(ctx context.Context, t *testing.T, kube *fake.Clientset) map[string][]resourceapi.ResourceSlice {
	t.Helper()
	list, err := kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]resourceapi.ResourceSlice{}
	for _, s := range list.Items {
		out[s.Spec.Pool.Name] = append(out[s.Spec.Pool.Name], s)
	}
	return out
}

// waitSlices polls the fake API server until ok holds.
func waitSlices(ctx context.Context, t *testing.T, kube *fake.Clientset, what string, ok func(map[string][]resourceapi.ResourceSlice) bool) map[string][]resourceapi.ResourceSlice {
	t.Helper()
	var last map[string][]resourceapi.ResourceSlice
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		last = slicesByPool(ctx, t, kube)
		return ok(last), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v; slices per pool: %v", what, err, len(last))
	}
	return last
}

// TestDriversLifecycle drives the library through the publisher's driver
// set against a fake API server: first publication with the DRAStack as
// owner, a pool removed when it is no longer desired, and a driver that
// leaves the spec removing its slices before its controller stops.
func TestDriversLifecycle(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kube := fakeAPI()
	d := &drivers{kube: kube, base: ctx}
	defer d.stop()
	owner := ownerOf(v1alpha1.GroupVersion.String(), "DRAStack", v1alpha1.DRAStackName, "uid-1")

	desired := Compute([]v1alpha1.MultiHostSpec{entry()}, append(domainNodes("a"), domainNodes("b")...))
	retiring, err := d.apply(owner, desired.Drivers)
	if err != nil || len(retiring) != 0 {
		t.Fatalf("apply = %v, %v; want no error and nothing retiring", retiring, err)
	}
	got := waitSlices(ctx, t, kube, "two pools of two slices", func(m map[string][]resourceapi.ResourceSlice) bool {
		return len(m) == 2 && len(m["tpu-a"]) == 2 && len(m["tpu-b"]) == 2
	})
	for _, s := range got["tpu-a"] {
		if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != "uid-1" || s.OwnerReferences[0].Kind != "DRAStack" {
			t.Errorf("slice %s owner %v, want the DRAStack", s.Name, s.OwnerReferences)
		}
		if s.Spec.NodeName != nil || s.Spec.Pool.ResourceSliceCount != 2 {
			t.Errorf("slice %s: nodeName %v, slice count %d; want node-less, 2", s.Name, s.Spec.NodeName, s.Spec.Pool.ResourceSliceCount)
		}
	}

	// Domain b loses a host: Withhold removes its pool, a keeps its own.
	desired = Compute([]v1alpha1.MultiHostSpec{entry()}, append(domainNodes("a"), without(domainNodes("b"), "b-0-0")...))
	if _, err := d.apply(owner, desired.Drivers); err != nil {
		t.Fatal(err)
	}
	waitSlices(ctx, t, kube, "pool tpu-b removed", func(m map[string][]resourceapi.ResourceSlice) bool {
		return len(m) == 1 && len(m["tpu-a"]) == 2
	})

	// The driver leaves the spec: its controller removes everything, then
	// retire stops it.
	retiring, err = d.apply(owner, map[string]map[string]resourceslice.Pool{})
	if err != nil || !slices.Equal(retiring, []string{testDriver}) {
		t.Fatalf("apply = %v, %v; want %s retiring", retiring, err, testDriver)
	}
	waitSlices(ctx, t, kube, "every slice removed", func(m map[string][]resourceapi.ResourceSlice) bool { return len(m) == 0 })
	d.retire(testDriver)
	if len(d.running) != 0 {
		t.Errorf("controllers still running after retire: %v", len(d.running))
	}
}

// TestDriversRestartOnNewOwner: a DRAStack deleted and created again has a
// new UID; new slices must name it, so the controllers are restarted.
func TestDriversRestartOnNewOwner(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kube := fakeAPI()
	d := &drivers{kube: kube, base: ctx}
	defer d.stop()
	desired := Compute([]v1alpha1.MultiHostSpec{entry()}, domainNodes("a"))
	first := ownerOf(v1alpha1.GroupVersion.String(), "DRAStack", v1alpha1.DRAStackName, "uid-1")
	if _, err := d.apply(first, desired.Drivers); err != nil {
		t.Fatal(err)
	}
	before := d.running[testDriver]
	second := first
	second.UID = "uid-2"
	if _, err := d.apply(second, desired.Drivers); err != nil {
		t.Fatal(err)
	}
	if after := d.running[testDriver]; after == nil || after == before {
		t.Errorf("controller not restarted for the new owner")
	}
	if d.owner.UID != "uid-2" {
		t.Errorf("owner %q, want uid-2", d.owner.UID)
	}
}
