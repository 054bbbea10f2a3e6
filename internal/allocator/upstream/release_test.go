package upstream

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
)

func TestRelease(t *testing.T) {
	in := allocator.Inputs{
		Slices:  []*resourceapi.ResourceSlice{onNode(slice("n0-gpus", "n0", dev("gpu-0", nil)), "n0")},
		Classes: []*resourceapi.DeviceClass{class("gpu")},
		Nodes:   []*corev1.Node{node("n0", nil)},
	}
	sess, err := New().NewSession(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	allocate := func(name string) (*resourceapi.ResourceClaim, error) {
		c := claim(name)
		res, err := sess.Allocate(context.Background(), []*resourceapi.ResourceClaim{c}, allocator.Options{})
		if err != nil {
			return nil, err
		}
		c.Status.Allocation = res[0].Allocation
		return c, sess.Record(c)
	}
	first, err := allocate("first")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := allocate("second"); !errors.Is(err, allocator.ErrUnsatisfiable) {
		t.Fatalf("second claim on a full node: got %v", err)
	}
	if err := sess.(allocator.Releaser).Release(first); err != nil {
		t.Fatal(err)
	}
	if _, err := allocate("second"); err != nil {
		t.Fatalf("after release: %v", err)
	}
	if err := sess.(allocator.Releaser).Release(claim("unallocated")); err == nil {
		t.Error("release of a claim without allocation: want an error")
	}
}
