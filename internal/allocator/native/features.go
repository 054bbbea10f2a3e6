package native

import (
	"fmt"
	"slices"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/central"
	"github.com/drastack/drastack/internal/pool"
)

// Feature gates change what the engine sees and allows, as they change
// kube-scheduler's allocator (k8s.io/dynamic-resource-allocation/structured
// v0.37): this file holds the decisions that depend on the whole snapshot;
// the per-device ones are flags set in addPool (session.go), the per-request
// ones are in planSub (plan.go).

// stableOnly reports whether kube-scheduler runs its "stable" allocator
// under f: it is picked when no gate beyond admin access, prioritized
// lists, partitionable devices and device taints is on. That allocator
// knows nothing of consumable capacity, so it ignores capacity requests
// where the others refuse them while DRAConsumableCapacity is off.
func stableOnly(f allocator.Features) bool {
	return !f.CompatibilityGroups && !f.ConsumableCapacity && !f.DerivedAttributes && !f.BindingAndStatus() &&
		!f.FractionalCapacityRange && !f.ListTypeAttributes && !f.OptionalNodeOperations
}

// experimental reports whether kube-scheduler runs its "experimental"
// allocator under f, the only one that knows skipNodeOperations: it is
// picked when a gate only it supports is on. The others allocate devices of
// slices that skip node operations as any other (and write no
// skipNodeOperations into results); it refuses them unless
// DRAOptionalNodeOperations is on.
func experimental(f allocator.Features) bool {
	return f.ListTypeAttributes || f.OptionalNodeOperations || f.DerivedAttributes || f.CompatibilityGroups
}

// visibleSlices are the slices as kube-scheduler's allocator sees them
// under the session's gates:
//
//   - with DRADeviceTaintRules on, the taints of in.TaintRules are added to
//     the devices they select;
//   - with DRADeviceCompatibilityGroups off, a slice in which a device
//     declares compatibility groups is ignored: its pool cannot be
//     complete, so none of the pool's devices are allocated;
//   - with DRAPartitionableDevices off, a slice with per-device node
//     selection offers no devices, but still counts towards its pool being
//     complete. (kube-scheduler then does not check counter sets either;
//     the native engine still does, so a pool with broken counters stays
//     unusable. Its devices that consume counters are refused anyway.)
func (s *Session) visibleSlices(in allocator.Inputs) []*resourceapi.ResourceSlice {
	slices := in.Slices
	if s.f.DeviceTaintRules && len(in.TaintRules) > 0 {
		slices = central.ApplyTaintRules(slices, in.TaintRules)
	}
	if s.f.CompatibilityGroups && s.f.PartitionableDevices {
		return slices
	}
	out := make([]*resourceapi.ResourceSlice, 0, len(slices))
	for _, sl := range slices {
		if sl == nil {
			continue
		}
		if !s.f.CompatibilityGroups && usesCompatibilityGroups(sl) {
			s.gate(sl, fmt.Sprintf("%s, %s: DRADeviceCompatibilityGroups is off and slice %s declares compatibility groups", pool.HealthInvalid, pool.ReasonFeatureGateDisabled, sl.Name))
			continue
		}
		if !s.f.PartitionableDevices {
			if cp := withoutPartitions(sl); cp != sl {
				s.gate(sl, fmt.Sprintf("%s: DRAPartitionableDevices is off and slice %s selects nodes per device", pool.ReasonFeatureGateDisabled, sl.Name))
				sl = cp
			}
		}
		out = append(out, sl)
	}
	return out
}

// gate records that a gate that is off hides slice sl (why), in
// Session.gatedPools.
func (s *Session) gate(sl *resourceapi.ResourceSlice, why string) {
	id := pool.ID{Driver: sl.Spec.Driver, Pool: sl.Spec.Pool.Name}
	for i := range s.gatedPools {
		if g := &s.gatedPools[i]; g.id == id {
			g.slices = append(g.slices, sl)
			return
		}
	}
	s.gatedPools = append(s.gatedPools, badPool{id: id, slices: []*resourceapi.ResourceSlice{sl}, why: why})
}

// gatedReason is why for a bad pool, or the reason a gate hides some of
// its slices when one does (then the cause, and the pool is named once).
func (s *Session) gatedReason(id pool.ID, why string) string {
	for i, g := range s.gatedPools {
		if g.id == id {
			s.gatedPools = slices.Delete(s.gatedPools, i, i+1)
			return g.why
		}
	}
	return why
}

// usesCompatibilityGroups reports whether a device of the slice declares
// compatibility groups on one of its counter consumptions.
func usesCompatibilityGroups(sl *resourceapi.ResourceSlice) bool {
	for i := range sl.Spec.Devices {
		for _, c := range sl.Spec.Devices[i].ConsumesCounters {
			if len(c.CompatibilityGroups) > 0 {
				return true
			}
		}
	}
	return false
}

// withoutPartitions is the slice as kube-scheduler uses it with
// DRAPartitionableDevices off: a slice with per-device node selection keeps
// its place in the pool (it counts towards the pool being complete) but
// offers no devices. Devices that consume counters stay, refused (see
// device.refused). The slice is copied when it changes.
func withoutPartitions(sl *resourceapi.ResourceSlice) *resourceapi.ResourceSlice {
	if sl.Spec.PerDeviceNodeSelection == nil || len(sl.Spec.Devices) == 0 {
		return sl
	}
	cp := sl.DeepCopy()
	cp.Spec.Devices = nil
	return cp
}
