package clusterprobe

import (
	"errors"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
)

// The functions below decide from what the API server returned whether it
// kept a gated field. They are pure so that every case is a table test.

// keptPartitionable: per-device node selection and counter consumption
// both survived the write.
func keptPartitionable(got *resourceapi.ResourceSlice) bool {
	if got == nil || got.Spec.PerDeviceNodeSelection == nil || !*got.Spec.PerDeviceNodeSelection || len(got.Spec.Devices) != 1 {
		return false
	}
	d := got.Spec.Devices[0]
	return d.AllNodes != nil && *d.AllNodes && len(d.ConsumesCounters) == 1
}

// keptListAttribute: the list-valued attribute survived with its values.
func keptListAttribute(got *resourceapi.ResourceSlice) bool {
	if got == nil || len(got.Spec.Devices) != 1 {
		return false
	}
	a, ok := got.Spec.Devices[0].Attributes["roots"]
	return ok && len(a.StringValues) == 2
}

// keptCompatibilityGroups: the counter consumption kept its group.
func keptCompatibilityGroups(got *resourceapi.ResourceSlice) bool {
	if got == nil || len(got.Spec.Devices) != 1 || len(got.Spec.Devices[0].ConsumesCounters) != 1 {
		return false
	}
	return len(got.Spec.Devices[0].ConsumesCounters[0].CompatibilityGroups) == 1
}

// keptPartitionType: the slice kept partitionTypeAttribute.
func keptPartitionType(got *resourceapi.ResourceSlice) bool {
	return got != nil && got.Spec.PartitionTypeAttribute != nil && *got.Spec.PartitionTypeAttribute != ""
}

// keptTaint: the device taint survived.
func keptTaint(got *resourceapi.ResourceSlice) bool {
	return got != nil && len(got.Spec.Devices) == 1 && len(got.Spec.Devices[0].Taints) == 1
}

// keptBindingConditions: bindsToNode and both condition lists survived.
// They share their gates, so a server keeps all three or none.
func keptBindingConditions(got *resourceapi.ResourceSlice) bool {
	if got == nil || len(got.Spec.Devices) != 1 {
		return false
	}
	d := got.Spec.Devices[0]
	return d.BindsToNode != nil && *d.BindsToNode && len(d.BindingConditions) == 1 && len(d.BindingFailureConditions) == 1
}

// keptMultiAllocatable: the device still allows multiple allocations and
// its capacity kept the requestPolicy (the slice half of consumable
// capacity).
func keptMultiAllocatable(got *resourceapi.ResourceSlice) bool {
	if got == nil || len(got.Spec.Devices) != 1 {
		return false
	}
	d := got.Spec.Devices[0]
	c, ok := d.Capacity[capacityName]
	return d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations && ok && c.RequestPolicy != nil
}

// keptSkipNodeOperations: the slice kept skipNodeOperations.
func keptSkipNodeOperations(got *resourceapi.ResourceSlice) bool {
	return got != nil && len(got.Spec.SkipNodeOperations) == 1
}

// keptFirstAvailable: the subrequests survived.
func keptFirstAvailable(got *resourceapi.ResourceClaim) bool {
	return got != nil && len(got.Spec.Devices.Requests) == 1 && len(got.Spec.Devices.Requests[0].FirstAvailable) == 1
}

// exactRequest returns the one exact request of a probe claim, or nil.
func exactRequest(got *resourceapi.ResourceClaim) *resourceapi.ExactDeviceRequest {
	if got == nil || len(got.Spec.Devices.Requests) != 1 {
		return nil
	}
	return got.Spec.Devices.Requests[0].Exactly
}

// keptCapacityRequest: the request kept its capacity request (the claim
// half of consumable capacity).
func keptCapacityRequest(got *resourceapi.ResourceClaim) bool {
	r := exactRequest(got)
	if r == nil || r.Capacity == nil {
		return false
	}
	_, ok := r.Capacity.Requests[capacityName]
	return ok
}

// keptDerivedAttributes: the request kept its derived attribute.
func keptDerivedAttributes(got *resourceapi.ResourceClaim) bool {
	r := exactRequest(got)
	return r != nil && len(r.DerivedAttributes) == 1
}

// keptAdminAccess: the request kept adminAccess.
func keptAdminAccess(got *resourceapi.ResourceClaim) bool {
	r := exactRequest(got)
	return r != nil && r.AdminAccess != nil && *r.AdminAccess
}

// refusedForAdminAccess: the server refused the admin access claim because
// of its adminAccess field, which it checks (against the namespace's
// resource.kubernetes.io/admin-access label) only when the gate is on; with
// the gate off it drops the field before validation. So such a refusal
// means the feature is there, the probe namespace just lacks the label.
func refusedForAdminAccess(refusal error) bool {
	var status apierrors.APIStatus
	if refusal == nil || !errors.As(refusal, &status) || status.Status().Details == nil {
		return false
	}
	for _, c := range status.Status().Details.Causes {
		if c.Field == "adminAccess" || strings.HasSuffix(c.Field, ".adminAccess") {
			return true
		}
	}
	return false
}

// keptExtendedResourceName: the class kept extendedResourceName.
func keptExtendedResourceName(got *resourceapi.DeviceClass) bool {
	return got != nil && got.Spec.ExtendedResourceName != nil && *got.Spec.ExtendedResourceName != ""
}

// granularStatusAuthorizationSince is the first Kubernetes release whose
// API server requires resourceclaims/binding for allocation writes by
// default (DRAResourceClaimGranularStatusAuthorization beta, on).
var granularStatusAuthorizationSince = version.MajorMinor(1, 36)

// requiresGranularStatusAuthorization derives from the server's version
// whether it requires resourceclaims/binding to change status.allocation.
// No request can find this out: a client holding the permission never sees
// the check, and an access review says what a client may do, not what the
// server demands. An unparsable version gives false.
func requiresGranularStatusAuthorization(gitVersion string) bool {
	v, err := version.ParseGeneric(gitVersion)
	return err == nil && v.AtLeast(granularStatusAuthorizationSince)
}

// resourceVersions returns the served versions of resource.k8s.io from
// discovery groups, preferred first, then the rest newest first.
func resourceVersions(groups *metav1.APIGroupList) []string {
	if groups == nil {
		return nil
	}
	for _, g := range groups.Groups {
		if g.Name != resourceapi.GroupName {
			continue
		}
		var vs []string
		for _, v := range g.Versions {
			vs = append(vs, v.Version)
		}
		sort.SliceStable(vs, func(i, j int) bool { return versionRank(vs[i]) > versionRank(vs[j]) })
		return vs
	}
	return nil
}

// versionRank orders Kubernetes API versions: v1 > v1beta2 > v1beta1 > v1alpha3.
func versionRank(v string) int {
	major, stage, minor := 0, 3, 0
	rest := strings.TrimPrefix(v, "v")
	i := 0
	for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
		major = major*10 + int(rest[i]-'0')
		i++
	}
	rest = rest[i:]
	switch {
	case strings.HasPrefix(rest, "beta"):
		stage, rest = 2, strings.TrimPrefix(rest, "beta")
	case strings.HasPrefix(rest, "alpha"):
		stage, rest = 1, strings.TrimPrefix(rest, "alpha")
	case rest != "":
		stage = 0
	}
	for _, c := range rest {
		if c < '0' || c > '9' {
			break
		}
		minor = minor*10 + int(c-'0')
	}
	return major*10000 + stage*1000 + minor
}

// servingVersion returns the newest version of resource.k8s.io that
// serves the named resource (for example devicetaintrules), or "" when none
// does.
func servingVersion(lists []*metav1.APIResourceList, resource string) string {
	best := ""
	for _, l := range lists {
		if l == nil {
			continue
		}
		v, ok := strings.CutPrefix(l.GroupVersion, resourceapi.GroupName+"/")
		if !ok || (best != "" && versionRank(v) <= versionRank(best)) {
			continue
		}
		for _, r := range l.APIResources {
			if r.Name == resource {
				best = v
				break
			}
		}
	}
	return best
}
