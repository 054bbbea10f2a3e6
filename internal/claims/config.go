package claims

import (
	"slices"

	resourceapi "k8s.io/api/resource/v1"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
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
}

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
	c.ImmediateClasses = slices.Clone(st.Spec.Claims.ImmediateClasses)
	slices.Sort(c.ImmediateClasses)
	c.ImmediateClasses = slices.Compact(c.ImmediateClasses)
	return c
}

// Equal reports whether two configurations decide the same.
func (c Config) Equal(o Config) bool {
	return c.Active == o.Active && c.Engine == o.Engine && c.GatePods == o.GatePods &&
		slices.Equal(c.ImmediateClasses, o.ImmediateClasses)
}

func (c Config) immediateClass(name string) bool {
	_, ok := slices.BinarySearch(c.ImmediateClasses, name)
	return ok
}
