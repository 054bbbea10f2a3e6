package allocator

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
)

// PlacementPolicy says which placement an engine picks when several fit:
// which node, and which devices on it.
type PlacementPolicy string

const (
	// PlacementFirstFit takes the first node that fits, in input order, and
	// on it the first devices that fit, in the order kube-scheduler tries
	// them (smallest counter footprint first). It is what kube-scheduler's
	// allocator does when asked node after node.
	PlacementFirstFit PlacementPolicy = "FirstFit"
	// PlacementPack keeps the most capacity usable for later claims: it
	// prefers the counter sets and nodes that are already partly used
	// (best fit), and among the devices that fit, the ones whose allocation
	// leaves the largest free partition of their counter sets intact
	// (a whole GPU, a 4x4 or 8x8 block of hosts). See the native engine's
	// pack.go for the exact order.
	PlacementPack PlacementPolicy = "Pack"
)

// PlacementPolicies lists the policies engines know, in documentation order.
var PlacementPolicies = []PlacementPolicy{PlacementPack, PlacementFirstFit}

// Validate reports an unknown policy. The empty policy is valid and means
// PlacementFirstFit.
func (p PlacementPolicy) Validate() error {
	switch p {
	case "", PlacementFirstFit, PlacementPack:
		return nil
	}
	return fmt.Errorf("unknown placement policy %q (want %s or %s)", string(p), PlacementPack, PlacementFirstFit)
}

// Releaser is implemented by sessions that can give devices back: the
// opposite of Session.Record, for a claim whose allocation was recorded
// (its devices freed, its counters and capacity returned), so that a
// long-lived session follows deallocations without being rebuilt.
type Releaser interface {
	// Release frees what Record took for claim, identified as Record
	// identifies it (UID, else namespace/name). claim.Status.Allocation
	// must be the allocation that was recorded. Releasing a claim that is
	// not recorded does nothing.
	Release(claim *resourceapi.ResourceClaim) error
}
