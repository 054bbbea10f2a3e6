package upstream

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

var _ allocator.Releaser = &session{}

// Release implements allocator.Releaser: the devices of the claim's
// allocation are no longer allocated, as when kube-scheduler sees a claim's
// allocation removed; the next Allocate builds a new upstream allocator.
// The adapter does not remember which claims it recorded, so releasing an
// allocation it never recorded frees its devices all the same.
func (s *session) Release(claim *resourceapi.ResourceClaim) error {
	if claim == nil || claim.Status.Allocation == nil {
		return fmt.Errorf("release claim %s: status.allocation is not set", keyOf(claim))
	}
	s.state.remove(claim.Status.Allocation)
	s.upstream = nil
	return nil
}

// remove undoes add.
func (st *allocatedState) remove(alloc *resourceapi.AllocationResult) {
	for _, r := range alloc.Devices.Results {
		if ptr.Deref(r.AdminAccess, false) {
			continue
		}
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		if r.ShareID == nil {
			st.devices.Delete(id)
			continue
		}
		st.shared.Delete(structured.MakeSharedDeviceID(id, r.ShareID))
		if len(r.ConsumedCapacity) > 0 {
			st.capacity.Remove(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
		}
	}
}
