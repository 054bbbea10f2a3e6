package pool

import (
	"context"
	"slices"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/drastack/drastack/internal/handover"
	poolpkg "github.com/drastack/drastack/internal/pool"
)

// queued records what a handler queued, and with which delay.
type queued struct {
	queue // nil: only Add and AddAfter are called
	added []poolpkg.ID
	after map[poolpkg.ID]time.Duration
}

func (q *queued) Add(id poolpkg.ID) { q.added = append(q.added, id) }

func (q *queued) AddAfter(id poolpkg.ID, d time.Duration) {
	if q.after == nil {
		q.after = map[poolpkg.ID]time.Duration{}
	}
	q.after[id] = d
}

func allocatedClaim(name, pool, device string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), ResourceVersion: "2"},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "r", Driver: testDriver, Pool: pool, Device: device}},
		}}},
	}
}

// Slice and allocation changes queue their pools with the batching
// delays, so that the changes of one pool within the delay make one
// status write; a negative delay queues at once.
func TestHandlersBatchByPool(t *testing.T) {
	ctx := context.Background()
	r := &Reconciler{SliceBatch: 300 * time.Millisecond, ClaimBatch: 700 * time.Millisecond}
	r.init()

	q := &queued{}
	r.sliceHandler().Create(ctx, event.TypedCreateEvent[*resourceapi.ResourceSlice]{Object: gpuSlice("s1", "p1", "n1", 1, 1, "d0", "d1")}, q)
	if len(q.added) != 0 || q.after[pid("p1")] != 300*time.Millisecond {
		t.Errorf("slice create queued %v at once and %v later, want p1 after 300ms", q.added, q.after)
	}

	q = &queued{}
	unallocated := allocatedClaim("c", "p1", "d0")
	unallocated.Status.Allocation, unallocated.ResourceVersion = nil, "1"
	r.claimHandler().Update(ctx, event.TypedUpdateEvent[*resourceapi.ResourceClaim]{ObjectOld: unallocated, ObjectNew: allocatedClaim("c", "p1", "d0")}, q)
	if len(q.added) != 0 || q.after[pid("p1")] != 700*time.Millisecond {
		t.Errorf("allocation queued %v at once and %v later, want p1 after 700ms", q.added, q.after)
	}

	// A claim update that leaves the allocation alone touches no pool.
	q = &queued{}
	same := allocatedClaim("c", "p1", "d0")
	same.ResourceVersion = "3"
	r.claimHandler().Update(ctx, event.TypedUpdateEvent[*resourceapi.ResourceClaim]{ObjectOld: allocatedClaim("c", "p1", "d0"), ObjectNew: same}, q)
	if len(q.added) != 0 || len(q.after) != 0 {
		t.Errorf("an unchanged allocation queued %v / %v", q.added, q.after)
	}

	r = &Reconciler{SliceBatch: -1, ClaimBatch: -1}
	r.init()
	q = &queued{}
	r.sliceHandler().Create(ctx, event.TypedCreateEvent[*resourceapi.ResourceSlice]{Object: gpuSlice("s1", "p1", "n1", 1, 1, "d0")}, q)
	r.claimHandler().Create(ctx, event.TypedCreateEvent[*resourceapi.ResourceClaim]{Object: allocatedClaim("c", "p1", "d0")}, q)
	if !slices.Equal(q.added, []poolpkg.ID{pid("p1"), pid("p1")}) || len(q.after) != 0 {
		t.Errorf("negative delays queued %v at once and %v later, want p1 twice at once", q.added, q.after)
	}

	r = &Reconciler{}
	r.init()
	q = &queued{}
	r.sliceHandler().Delete(ctx, event.TypedDeleteEvent[*resourceapi.ResourceSlice]{Object: gpuSlice("s1", "p1", "n1", 1, 1, "d0")}, q)
	if q.after[pid("p1")] != DefaultSliceBatch {
		t.Errorf("default slice batch: %v, want %v", q.after, DefaultSliceBatch)
	}
}

// The join barrier's canary slice (internal/handover) is the operator's
// own probe, no device of anyone's: it queues no pool and the model keeps
// nothing of it; a slice of the canary driver without the canary's labels
// is an ordinary slice.
func TestCanarySliceMakesNoPool(t *testing.T) {
	ctx := context.Background()
	r := &Reconciler{SliceBatch: -1, ClaimBatch: -1}
	r.init()
	canary := handover.CanarySlice()
	canary.ResourceVersion = "1"
	q := &queued{}
	r.sliceHandler().Create(ctx, event.TypedCreateEvent[*resourceapi.ResourceSlice]{Object: canary}, q)
	changed := canary.DeepCopy()
	changed.ResourceVersion = "2"
	r.sliceHandler().Update(ctx, event.TypedUpdateEvent[*resourceapi.ResourceSlice]{ObjectOld: canary, ObjectNew: changed}, q)
	r.sliceHandler().Delete(ctx, event.TypedDeleteEvent[*resourceapi.ResourceSlice]{Object: changed}, q)
	if len(q.added) != 0 || len(q.after) != 0 || len(r.model.slices) != 0 {
		t.Errorf("the canary slice queued %v / %v and left %d pools in the model", q.added, q.after, len(r.model.slices))
	}

	impostor := canary.DeepCopy()
	impostor.Labels = nil
	r.sliceHandler().Create(ctx, event.TypedCreateEvent[*resourceapi.ResourceSlice]{Object: impostor}, q)
	if len(q.added) != 1 || len(r.model.slices) != 1 {
		t.Errorf("a slice of the canary driver without its labels queued %v and left %d pools, want one", q.added, len(r.model.slices))
	}
}
