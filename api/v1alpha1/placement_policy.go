package v1alpha1

// PlacementPolicy says which placement the operator's allocation engine
// picks when several fit (spec.claims.placementPolicy, default Pack).
// +kubebuilder:validation:Enum=Pack;FirstFit
type PlacementPolicy string

// Placement policies; the values of internal/allocator's PlacementPolicy.
const (
	// PlacementPack keeps the most capacity usable for later claims: the
	// counter sets and nodes already partly used first (best fit), and the
	// devices whose allocation breaks the smallest free partition (a MIG
	// slice into the hole of a partly used GPU, a 2x4-host slice into a
	// 4x4 block that is already broken).
	PlacementPack PlacementPolicy = "Pack"
	// PlacementFirstFit takes the first node that fits and on it the first
	// devices, as kube-scheduler does.
	PlacementFirstFit PlacementPolicy = "FirstFit"
)
