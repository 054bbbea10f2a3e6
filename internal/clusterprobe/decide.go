package clusterprobe

import (
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// keptTaint: the device taint survived.
func keptTaint(got *resourceapi.ResourceSlice) bool {
	return got != nil && len(got.Spec.Devices) == 1 && len(got.Spec.Devices[0].Taints) == 1
}

// keptFirstAvailable: the subrequests survived.
func keptFirstAvailable(got *resourceapi.ResourceClaim) bool {
	return got != nil && len(got.Spec.Devices.Requests) == 1 && len(got.Spec.Devices.Requests[0].FirstAvailable) == 1
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

// servesResource reports whether any version of resource.k8s.io serves the
// named resource (for example devicetaintrules).
func servesResource(lists []*metav1.APIResourceList, resource string) bool {
	for _, l := range lists {
		if l == nil || !strings.HasPrefix(l.GroupVersion, resourceapi.GroupName+"/") {
			continue
		}
		for _, r := range l.APIResources {
			if r.Name == resource {
				return true
			}
		}
	}
	return false
}
