package upstream

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
)

func smallInputs() allocator.Inputs {
	return allocator.Inputs{
		Nodes:   []*corev1.Node{node("node-1", nil), node("node-2", nil)},
		Classes: []*resourceapi.DeviceClass{class("gpu")},
		Slices: []*resourceapi.ResourceSlice{
			onNode(slice("s1", "node-1", dev("gpu-0", nil)), "node-1"),
			onNode(slice("s2", "node-2", dev("gpu-0", nil), dev("gpu-1", nil)), "node-2"),
		},
	}
}

func TestAllocateClaimsOfOnePodTogether(t *testing.T) {
	ctx := context.Background()
	sess, err := New().NewSession(ctx, smallInputs())
	if err != nil {
		t.Fatal(err)
	}
	// Two claims of one pod need two GPUs on the same node: only node-2 has them.
	a, b := claim("a"), claim("b")
	results, err := sess.Allocate(ctx, []*resourceapi.ResourceClaim{a, b}, allocator.Options{})
	if err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	if len(results) != 2 || results[0].Claim != a || results[1].Claim != b {
		t.Fatalf("want results for a and b in order, got %+v", results)
	}
	for _, r := range results {
		if r.Node != "node-2" {
			t.Errorf("claim %s on %q, want node-2", r.Claim.Name, r.Node)
		}
	}
	if results[0].Allocation.Devices.Results[0].Device == results[1].Allocation.Devices.Results[0].Device {
		t.Errorf("both claims got the same device")
	}
}

func TestAllocatedInputsAreInUse(t *testing.T) {
	ctx := context.Background()
	in := smallInputs()
	done := claim("done")
	done.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
		Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: driver, Pool: "node-1", Device: "gpu-0"}},
	}}
	in.Allocated = []*resourceapi.ResourceClaim{done}
	sess, err := New().NewSession(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	results, err := sess.Allocate(ctx, []*resourceapi.ResourceClaim{claim("next")}, allocator.Options{})
	if err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	if results[0].Node != "node-2" {
		t.Errorf("allocated on %q, want node-2 because node-1's GPU is in use", results[0].Node)
	}
}

func TestAllocateHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	sess, err := New().NewSession(context.Background(), smallInputs())
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	_, err = sess.Allocate(ctx, []*resourceapi.ResourceClaim{claim("a")}, allocator.Options{})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
	if errors.Is(err, allocator.ErrUnsatisfiable) {
		t.Errorf("a cancelled call must not claim the claim is unsatisfiable: %v", err)
	}
}

func TestRecordNeedsAnAllocation(t *testing.T) {
	sess, err := New().NewSession(context.Background(), smallInputs())
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.Record(claim("unallocated")); err == nil {
		t.Error("Record accepted a claim without status.allocation")
	}
}

func TestEngineName(t *testing.T) {
	if got := New().Name(); got != "upstream" {
		t.Errorf("Name() = %q", got)
	}
}

func TestAllRequestStoppedByIncompletePoolIsAborted(t *testing.T) {
	in := smallInputs()
	incomplete := onNode(slice("s3", "node-1-extra", dev("gpu-0", nil)), "node-1")
	incomplete.Spec.Pool.ResourceSliceCount = 2
	in.Slices = append(in.Slices, incomplete)
	in.Nodes = in.Nodes[:1]
	all := claim("all")
	all.Spec.Devices.Requests[0].Exactly.AllocationMode = resourceapi.DeviceAllocationModeAll
	all.Spec.Devices.Requests[0].Exactly.Count = 0
	sess, err := New().NewSession(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	_, err = sess.Allocate(context.Background(), []*resourceapi.ResourceClaim{all}, allocator.Options{})
	if !errors.Is(err, allocator.ErrUnsatisfiable) || !errors.Is(err, ErrAborted) {
		t.Errorf("error %v, want ErrUnsatisfiable and ErrAborted", err)
	}
	_, err = sess.Allocate(context.Background(), []*resourceapi.ResourceClaim{claim("one")}, allocator.Options{})
	if err != nil {
		t.Errorf("an ExactCount request is not affected by the incomplete pool: %v", err)
	}
}
