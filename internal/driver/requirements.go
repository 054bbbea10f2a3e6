package driver

import (
	"fmt"
	"slices"
	"strings"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	stackpkg "github.com/drastack/drastack/internal/stack"
)

// APIResourceV1 is the requirement that resource.k8s.io/v1 is served. Every
// profile has it: the drivers they deploy publish v1 ResourceSlices.
const APIResourceV1 = "resource.k8s.io/v1"

// Requirement is something a driver needs from the cluster.
type Requirement struct {
	// Feature is a ClusterFeatures field name (partitionableDevices, ...)
	// or APIResourceV1.
	Feature string
	// Why says which part of the driver needs it.
	Why string
}

// String reads as "partitionableDevices (shared counters)".
func (r Requirement) String() string {
	if r.Why == "" {
		return r.Feature
	}
	return fmt.Sprintf("%s (%s)", r.Feature, r.Why)
}

// baseRequirements are what every profile needs, plus the features the
// spec declares itself.
func baseRequirements(spec *v1alpha1.DriverSpec) []Requirement {
	reqs := []Requirement{{Feature: APIResourceV1, Why: "ResourceSlices and DeviceClasses"}}
	for _, f := range spec.RequiredFeatures {
		reqs = append(reqs, Requirement{Feature: f, Why: "spec.requiredFeatures"})
	}
	return reqs
}

// MissingRequirements returns the requirements the cluster does not meet.
// known is false when the cluster has not been probed yet: nothing can be
// said then, and nothing is reported missing.
func MissingRequirements(reqs []Requirement, cluster *v1alpha1.ClusterStatus) (missing []Requirement, known bool) {
	if cluster == nil || len(cluster.ResourceAPIVersions) == 0 {
		return nil, false
	}
	for _, r := range reqs {
		ok := false
		if r.Feature == APIResourceV1 {
			ok = slices.Contains(cluster.ResourceAPIVersions, "v1")
		} else {
			ok = stackpkg.HasFeature(&cluster.Features, r.Feature)
		}
		if !ok {
			missing = append(missing, r)
		}
	}
	return missing, true
}

// describeRequirements joins requirements for a message.
func describeRequirements(reqs []Requirement) string {
	parts := make([]string, len(reqs))
	for i, r := range reqs {
		parts[i] = r.String()
	}
	return strings.Join(parts, ", ")
}
