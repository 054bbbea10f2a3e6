// Package pool is the resource-pool model shared by the pool validator, the
// allocation engine, the multi-host publisher and kubectl-dra: it groups
// ResourceSlices into pools, picks each pool's current generation, decides
// completeness, validates pools with the reason codes of SEMANTICS.md, and
// accounts counters consumed by allocated devices.
//
// It is pure Go with no client: callers hand it objects.
package pool

import (
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// ID identifies a pool: (driver, pool name).
type ID struct {
	Driver string
	Pool   string
}

func (id ID) String() string { return id.Driver + "/" + id.Pool }

// Reason is a problem's reason code. The same codes are used by DevicePool
// status, Events, kubectl-dra and the `reason` metric label.
type Reason string

// Reason codes (SEMANTICS.md).
const (
	ReasonIncompletePool          Reason = "IncompletePool"
	ReasonStaleSlices             Reason = "StaleSlices"
	ReasonDuplicateDeviceName     Reason = "DuplicateDeviceName"
	ReasonDuplicateCounterSet     Reason = "DuplicateCounterSet"
	ReasonMissingCounterSet       Reason = "MissingCounterSet"
	ReasonMissingCounter          Reason = "MissingCounter"
	ReasonMixedCountersAndDevices Reason = "MixedCountersAndDevices"
	ReasonInvalidNodeSelection    Reason = "InvalidNodeSelection"
	ReasonTooManyDevices          Reason = "TooManyDevices"
	ReasonTooManyCounterSets      Reason = "TooManyCounterSets"
	ReasonTooManyCounters         Reason = "TooManyCounters"
	ReasonTooManyConsumptions     Reason = "TooManyConsumptions"
	ReasonTooManyAttributes       Reason = "TooManyAttributes"
	ReasonCounterOverconsumed     Reason = "CounterOverconsumed"
	ReasonDeviceDoubleAllocated   Reason = "DeviceDoubleAllocated"
	ReasonAllocatedDeviceMissing  Reason = "AllocatedDeviceMissing"
	// ReasonFeatureGateDisabled: a slice sets a field behind a feature
	// gate the cluster has off, so kube-scheduler ignores the slice and its
	// pool cannot be used (reported only with Options that name the gate).
	ReasonFeatureGateDisabled Reason = "FeatureGateDisabled"
)

// Severity of a problem. Errors make a pool Invalid (or Degraded for
// allocation problems); warnings are reported but do not change health.
type Severity string

const (
	SeverityError   Severity = "Error"
	SeverityWarning Severity = "Warning"
)

// Problem is one finding about a pool.
type Problem struct {
	Reason   Reason
	Severity Severity
	// Slice and Device name where the problem is, when it is in one place.
	Slice   string
	Device  string
	Message string
}

// Health of a pool (DevicePool status.health).
type Health string

const (
	HealthHealthy    Health = "Healthy"
	HealthIncomplete Health = "Incomplete"
	HealthInvalid    Health = "Invalid"
	HealthDegraded   Health = "Degraded"
)

// Device is one device of a pool's current generation with where it lives.
type Device struct {
	// Slice is the slice that publishes the device.
	Slice *resourceapi.ResourceSlice
	// Device points into Slice.Spec.Devices; never modify it.
	Device *resourceapi.Device
	// Exactly one of NodeName, NodeSelector and AllNodes describes which
	// nodes can reach the device, resolved from the slice or (with
	// perDeviceNodeSelection) from the device itself. All empty means the
	// node selection is invalid (the pool then has a problem).
	NodeName     string
	NodeSelector *corev1.NodeSelector
	AllNodes     bool
}

// CounterSet is a shared counter set of a pool: counter name -> capacity.
// Counters is read-only: Group shares one map between counter sets with the
// same counters (see intern.go).
type CounterSet struct {
	Name     string
	Slice    string
	Counters map[string]resource.Quantity

	// layout is Counters indexed (shared like Counters); first is the
	// slot of its first counter in the pool's counter table.
	layout *counterLayout
	first  int32
}

// Pool is one (driver, pool) at its current generation.
type Pool struct {
	ID
	// Generation is the highest spec.pool.generation seen.
	Generation int64
	// Slices of the current generation, sorted by name.
	Slices []*resourceapi.ResourceSlice
	// StaleSlices are slices of older generations, sorted by name.
	StaleSlices []*resourceapi.ResourceSlice
	// ExpectedSlices is spec.pool.resourceSliceCount of the current generation.
	ExpectedSlices int64
	// Node is set when every current slice is node-local to the same node.
	Node string
	// Devices of the current generation in slice order, then device order.
	Devices []Device
	// CounterSets of the current generation by name (the first one wins when
	// a name is duplicated; the duplicate is a problem).
	CounterSets map[string]*CounterSet
	// Problems found by structural validation (not allocations).
	Problems []Problem

	// counters indexes CounterSets and what each device consumes, for
	// exact accounting (counters.go); nil for pools not made by Group or
	// Build.
	counters *counterTable
}

// Complete reports whether every slice of the current generation is there.
func (p *Pool) Complete() bool { return int64(len(p.Slices)) == p.ExpectedSlices }

// Valid reports whether structural validation found no error.
func (p *Pool) Valid() bool {
	for _, pr := range p.Problems {
		if pr.Severity == SeverityError {
			return false
		}
	}
	return true
}

// Allocatable reports whether an allocator may use the pool: complete and valid.
func (p *Pool) Allocatable() bool { return p.Complete() && p.Valid() }
