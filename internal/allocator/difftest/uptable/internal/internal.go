//go:build uptable

// Package internal stands in for k8s.io/dynamic-resource-allocation's
// structured/internal, the package upstream's allocator test table imports
// and no other module may import. It names the same types (aliases of
// structured's exported ones where those exist) so that the table, which
// hack/upstream-table.sh takes from the module cache and points here,
// compiles against the native engine.
package internal

import (
	"context"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/structured"
)

// The table's view of the allocator's state and gates.
type (
	Features                   = structured.Features
	DeviceClassLister          = structured.DeviceClassLister
	DeviceID                   = structured.DeviceID
	SharedDeviceID             = structured.SharedDeviceID
	ConsumedCapacity           = structured.ConsumedCapacity
	ConsumedCapacityCollection = structured.ConsumedCapacityCollection
	AllocatedState             = structured.AllocatedState
)

// AllocatorChannel names an implementation; the table keys expected
// search statistics by it.
type AllocatorChannel string

// The upstream implementations the table knows.
const (
	Experimental = "experimental"
	Stable       = "stable"
	Incubating   = "incubating"
)

// Allocator is what the table drives: one Filter call per Allocate.
type Allocator interface {
	Allocate(ctx context.Context, node *v1.Node, claims []*resourceapi.ResourceClaim) ([]resourceapi.AllocationResult, error)
	Channel() AllocatorChannel
}

// Stats are upstream's search statistics; the native engine has none, so
// the table skips the cases that count search steps.
type Stats struct{ NumAllocateOneInvocations int64 }

// AllocatorExtended is implemented by allocators that report Stats.
type AllocatorExtended interface{ GetStats() Stats }

// MakeDeviceID is structured.MakeDeviceID.
func MakeDeviceID(driver, pool, device string) DeviceID {
	return structured.MakeDeviceID(driver, pool, device)
}

// MakeSharedDeviceID is structured.MakeSharedDeviceID.
func MakeSharedDeviceID(id DeviceID, shareID *types.UID) SharedDeviceID {
	return structured.MakeSharedDeviceID(id, shareID)
}
