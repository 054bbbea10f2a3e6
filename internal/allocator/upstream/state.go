package upstream

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

// allocatedState is the devices in use, in the form the upstream allocator
// reads. It is filled the way kube-scheduler fills it from allocated claims:
// admin-access results do not make a device busy, results with a share ID
// (consumable capacity) record the share and its consumed capacity, all
// others mark the device as allocated. Counter consumption is derived by the
// upstream allocator from the allocated devices and the slices.
type allocatedState struct {
	devices  sets.Set[structured.DeviceID]
	shared   sets.Set[structured.SharedDeviceID]
	capacity structured.ConsumedCapacityCollection
}

func newAllocatedState() *allocatedState {
	return &allocatedState{
		devices:  sets.New[structured.DeviceID](),
		shared:   sets.New[structured.SharedDeviceID](),
		capacity: structured.NewConsumedCapacityCollection(),
	}
}

func (s *allocatedState) add(alloc *resourceapi.AllocationResult) {
	for _, r := range alloc.Devices.Results {
		if ptr.Deref(r.AdminAccess, false) {
			continue
		}
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		if r.ShareID == nil {
			s.devices.Insert(id)
			continue
		}
		s.shared.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
		if len(r.ConsumedCapacity) > 0 {
			s.capacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
		}
	}
}

// snapshot hands the state to a new upstream allocator. The sets are shared,
// not copied: the session drops that allocator before the next change.
func (s *allocatedState) snapshot() structured.AllocatedState {
	return structured.AllocatedState{
		AllocatedDevices:         s.devices,
		AllocatedSharedDeviceIDs: s.shared,
		AggregatedCapacity:       s.capacity,
	}
}

// nodeIndependent reports whether every slice is reachable from every node,
// so that one upstream call decides a claim for all nodes.
func nodeIndependent(in allocator.Inputs) bool {
	for _, slice := range in.Slices {
		spec := &slice.Spec
		switch {
		case ptr.Deref(spec.AllNodes, false):
		case ptr.Deref(spec.PerDeviceNodeSelection, false):
			for i := range spec.Devices {
				if !ptr.Deref(spec.Devices[i].AllNodes, false) {
					return false
				}
			}
		case ptr.Deref(spec.NodeName, "") != "" || spec.NodeSelector != nil:
			return false
		}
	}
	return true
}
