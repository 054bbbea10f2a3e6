package claimpolicy

import (
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/allocator"
)

// Names the controller puts on objects.
const (
	// AllocationLabel on a claim (or in a ResourceClaimTemplate's
	// spec.metadata.labels) with the value AllocationImmediate asks the
	// operator to allocate the claim as soon as it exists.
	AllocationLabel = "resource.drastack.io/allocation"
	// AllocationImmediate is the value of AllocationLabel that opts in.
	AllocationImmediate = "Immediate"
	// SchedulingGate holds a pod until the operator has allocated its
	// claims; kube-scheduler ignores gated pods, so it cannot allocate
	// them without their CEL constraints.
	SchedulingGate = "resource.drastack.io/allocation"
	// Finalizer is the finalizer kube-scheduler puts on claims it
	// allocates. The operator uses the same one, so that
	// kube-controller-manager's resourceclaim controller deallocates and
	// releases the claims the operator allocated exactly like its own.
	Finalizer = resourceapi.Finalizer
)

// Config is what the claim controller reads from the DRAStack.
type Config struct {
	// Active is false when there is no DRAStack: the operator then
	// allocates nothing and gates no pod, leaving every claim to
	// kube-scheduler.
	Active bool
	// Engine is "native" or "upstream".
	Engine string
	// ImmediateClasses are the DeviceClass names whose claims are the
	// operator's, sorted.
	ImmediateClasses []string
	// GatePods holds pods whose claims the operator allocates.
	GatePods bool
	// Central are the devices only the operator allocates
	// (spec.claims.central), as written.
	Central []v1alpha1.CentralDevices
	// CentralClasses are the DeviceClass names of every central entry,
	// sorted: a claim with a request for one of them is the operator's.
	CentralClasses []string
	// PlacementTimeout is how long a pod whose operator claims are
	// allocated but not reserved may stay unschedulable before they are
	// placed again.
	PlacementTimeout time.Duration
	// AllocationTimeout is the deadline of one engine call.
	AllocationTimeout time.Duration
	// PlacementPolicy is the engine's choice among placements that fit
	// (allocator.Options.Policy of every engine call); default Pack.
	PlacementPolicy allocator.PlacementPolicy
	// GangTimeout is how long a gang may lack pods before it is reported.
	GangTimeout time.Duration
}

// Defaults of the durations (the CRD defaults them too).
const (
	DefaultPlacementTimeout  = 60 * time.Second
	DefaultAllocationTimeout = 10 * time.Second
	DefaultGangTimeout       = 5 * time.Minute
)

// ConfigFrom reads the claim configuration of a DRAStack (nil: none). Only
// the singleton named v1alpha1.DRAStackName counts. Fields the API server
// defaults are defaulted here too, for objects that bypassed it.
func ConfigFrom(st *v1alpha1.DRAStack) Config {
	if st == nil || st.Name != v1alpha1.DRAStackName || st.DeletionTimestamp != nil {
		return Config{}
	}
	c := Config{Active: true, Engine: string(st.Spec.Claims.Engine), GatePods: true}
	if c.Engine == "" {
		c.Engine = string(v1alpha1.EngineNative)
	}
	if st.Spec.Claims.GatePods != nil {
		c.GatePods = *st.Spec.Claims.GatePods
	}
	c.ImmediateClasses = sortedSet(st.Spec.Claims.ImmediateClasses)
	var classes []string
	for _, e := range st.Spec.Claims.Central {
		c.Central = append(c.Central, *e.DeepCopy())
		classes = append(classes, e.Classes...)
	}
	c.CentralClasses = sortedSet(classes)
	c.PlacementTimeout = DefaultPlacementTimeout
	if d := st.Spec.Claims.PlacementTimeout; d != nil && d.Duration > 0 {
		c.PlacementTimeout = d.Duration
	}
	c.AllocationTimeout = DefaultAllocationTimeout
	if d := st.Spec.Claims.AllocationTimeout; d != nil && d.Duration > 0 {
		c.AllocationTimeout = d.Duration
	}
	c.PlacementPolicy = allocator.PlacementPolicy(st.Spec.Claims.PlacementPolicy)
	if c.PlacementPolicy == "" {
		c.PlacementPolicy = allocator.PlacementPack
	}
	c.GangTimeout = DefaultGangTimeout
	if d := st.Spec.Claims.GangTimeout; d != nil && d.Duration > 0 {
		c.GangTimeout = d.Duration
	}
	return c
}

func sortedSet(in []string) []string {
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out)
}

// Equal reports whether two configurations decide the same.
func (c Config) Equal(o Config) bool {
	return c.Active == o.Active && c.Engine == o.Engine && c.GatePods == o.GatePods &&
		slices.Equal(c.ImmediateClasses, o.ImmediateClasses) &&
		slices.Equal(c.CentralClasses, o.CentralClasses) &&
		c.PlacementTimeout == o.PlacementTimeout && c.AllocationTimeout == o.AllocationTimeout &&
		c.PlacementPolicy == o.PlacementPolicy && c.GangTimeout == o.GangTimeout &&
		slices.EqualFunc(c.Central, o.Central, func(a, b v1alpha1.CentralDevices) bool { return equalEntry(&a, &b) })
}

func equalEntry(a, b *v1alpha1.CentralDevices) bool {
	if a.Driver != b.Driver || !slices.Equal(a.Pools, b.Pools) || !slices.Equal(a.Classes, b.Classes) {
		return false
	}
	if (a.NodeSelector == nil) != (b.NodeSelector == nil) {
		return false
	}
	return a.NodeSelector == nil || a.NodeSelector.String() == b.NodeSelector.String()
}

func (c Config) centralClass(name string) bool {
	_, ok := slices.BinarySearch(c.CentralClasses, name)
	return ok
}

func (c Config) immediateClass(name string) bool {
	_, ok := slices.BinarySearch(c.ImmediateClasses, name)
	return ok
}
