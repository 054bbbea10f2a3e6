//go:build uptable

// Package uptable runs upstream's allocator test table
// (k8s.io/dynamic-resource-allocation structured/internal/allocatortesting)
// on the native engine: `make upstream-table`, which builds the table into
// an overlay from the module cache (hack/upstream-table.sh). Each case's
// feature gates reach the engine through Inputs.Features; cases that count
// upstream's search steps are skipped by the table itself.
package uptable

import (
	"context"
	"flag"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/cel"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/difftest/uptable/allocatortesting"
	"github.com/drastack/drastack/internal/allocator/difftest/uptable/internal"
	"github.com/drastack/drastack/internal/allocator/native"
)

// supported is every allocator feature: the native engine implements them
// all, so the table skips no case for a missing feature.
var supported = internal.Features{
	AdminAccess: true, CompatibilityGroups: true, ConsumableCapacity: true, DerivedAttributes: true,
	DeviceBindingAndStatus: true, DeviceTaints: true, FractionalCapacityRange: true, ListTypeAttributes: true,
	OptionalNodeOperations: true, PartitionableDevices: true, PrioritizedList: true,
}

func TestUpstreamTable(t *testing.T) {
	allocatortesting.TestAllocator(t, supported, newNative)
	allocatortesting.TestLexicographicalAllocator(t, supported, newNative)
	// With -run only some cases run; otherwise every departure must have met its case.
	if unmet := allocatortesting.UnmetDepartures(); len(unmet) > 0 && flag.Lookup("test.run").Value.String() == "" {
		t.Errorf("departures for cases the table no longer has (or that were not run): %v", unmet)
	}
}

// nativeAllocator is one case's native session, built at Allocate, when
// the table gives the node.
type nativeAllocator struct {
	eng allocator.Engine
	in  allocator.Inputs
}

func newNative(_ context.Context, f internal.Features, st internal.AllocatedState, classes internal.DeviceClassLister, slices []*resourceapi.ResourceSlice, _ *cel.Cache) (internal.Allocator, error) {
	cls, err := classes.List()
	if err != nil {
		return nil, err
	}
	gates := allocator.Features{
		AdminAccess:               f.AdminAccess,
		CompatibilityGroups:       f.CompatibilityGroups,
		ConsumableCapacity:        f.ConsumableCapacity,
		DerivedAttributes:         f.DerivedAttributes,
		DeviceBindingConditions:   f.DeviceBindingAndStatus,
		ResourceClaimDeviceStatus: f.DeviceBindingAndStatus,
		DeviceTaints:              f.DeviceTaints,
		FractionalCapacityRange:   f.FractionalCapacityRange,
		ListTypeAttributes:        f.ListTypeAttributes,
		OptionalNodeOperations:    f.OptionalNodeOperations,
		PartitionableDevices:      f.PartitionableDevices,
		PrioritizedList:           f.PrioritizedList,
	}
	in := allocator.Inputs{Slices: slices, Classes: cls, Allocated: allocatedClaims(st), Features: &gates}
	return &nativeAllocator{eng: native.New(), in: in}, nil
}

// allocatedClaims is the table's allocated state as the native engine
// reads it, from claims: one claim holding every allocated device, a share
// per shared device ID, and each device's aggregated consumed capacity on
// one of its shares (a share of its own when it has none).
func allocatedClaims(st internal.AllocatedState) []*resourceapi.ResourceClaim {
	var results []resourceapi.DeviceRequestAllocationResult
	result := func(id internal.DeviceID) resourceapi.DeviceRequestAllocationResult {
		return resourceapi.DeviceRequestAllocationResult{Request: "r", Driver: id.Driver.String(), Pool: id.Pool.String(), Device: id.Device.String()}
	}
	for id := range st.AllocatedDevices {
		results = append(results, result(id))
	}
	charged := map[internal.DeviceID]bool{}
	share := func(id internal.DeviceID, shareID string) {
		r := result(id)
		uid := types.UID(shareID)
		r.ShareID = &uid
		if consumed, ok := st.AggregatedCapacity[id]; ok && !charged[id] {
			charged[id] = true
			r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{}
			for name, q := range consumed {
				r.ConsumedCapacity[name] = q.DeepCopy()
			}
		}
		results = append(results, r)
	}
	for sid := range st.AllocatedSharedDeviceIDs {
		share(sid.GetDeviceID(), sid.ShareID.String())
	}
	n := 0
	for id := range st.AggregatedCapacity {
		if !charged[id] {
			n++
			share(id, fmt.Sprintf("00000000-0000-0000-0000-%012d", n))
		}
	}
	if len(results) == 0 {
		return nil
	}
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "allocated", Namespace: "default", UID: "allocated"}}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
	return []*resourceapi.ResourceClaim{c}
}

// Channel implements internal.Allocator.
func (a *nativeAllocator) Channel() internal.AllocatorChannel { return "native" }

// Allocate implements internal.Allocator: one native Allocate on node.
func (a *nativeAllocator) Allocate(ctx context.Context, node *v1.Node, claims []*resourceapi.ResourceClaim) ([]resourceapi.AllocationResult, error) {
	in := a.in
	in.Nodes = []*v1.Node{node}
	s, err := a.eng.NewSession(ctx, in)
	if err != nil {
		return nil, err
	}
	res, err := s.Allocate(ctx, claims, allocator.Options{Node: node.Name})
	if err != nil {
		return nil, err
	}
	out := make([]resourceapi.AllocationResult, len(res))
	for i, r := range res {
		out[i] = *r.Allocation
	}
	return out, nil
}
