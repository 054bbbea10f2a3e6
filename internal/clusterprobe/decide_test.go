package clusterprobe

import (
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The probe objects are what we send; a server with the gate off returns
// them with the gated field dropped. Each test strips one field the way such
// a server would and checks the decision flips.
func TestKeptFields(t *testing.T) {
	dropped := func(s *resourceapi.ResourceSlice, drop func(*resourceapi.ResourceSlice)) *resourceapi.ResourceSlice {
		c := s.DeepCopy()
		drop(c)
		return c
	}
	tests := []struct {
		name string
		got  *resourceapi.ResourceSlice
		kept func(*resourceapi.ResourceSlice) bool
		want bool
	}{
		{"partitionable kept", partitionableSlice(), keptPartitionable, true},
		{"partitionable: per-device selection dropped", dropped(partitionableSlice(), func(s *resourceapi.ResourceSlice) { s.Spec.PerDeviceNodeSelection = nil }), keptPartitionable, false},
		{"partitionable: counters dropped", dropped(partitionableSlice(), func(s *resourceapi.ResourceSlice) { s.Spec.Devices[0].ConsumesCounters = nil }), keptPartitionable, false},
		{"partitionable: device node selection dropped", dropped(partitionableSlice(), func(s *resourceapi.ResourceSlice) { s.Spec.Devices[0].AllNodes = nil }), keptPartitionable, false},
		{"partitionable: nil", nil, keptPartitionable, false},
		{"list kept", listAttributeSlice(), keptListAttribute, true},
		{"list dropped", dropped(listAttributeSlice(), func(s *resourceapi.ResourceSlice) {
			s.Spec.Devices[0].Attributes["roots"] = resourceapi.DeviceAttribute{}
		}), keptListAttribute, false},
		{"list attribute gone", dropped(listAttributeSlice(), func(s *resourceapi.ResourceSlice) { s.Spec.Devices[0].Attributes = nil }), keptListAttribute, false},
		{"taint kept", taintSlice(), keptTaint, true},
		{"taint dropped", dropped(taintSlice(), func(s *resourceapi.ResourceSlice) { s.Spec.Devices[0].Taints = nil }), keptTaint, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.kept(tc.got); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	claim := prioritizedListClaim("default")
	if !keptFirstAvailable(claim) {
		t.Error("firstAvailable claim as sent must count as kept")
	}
	claim.Spec.Devices.Requests[0].FirstAvailable = nil
	if keptFirstAvailable(claim) {
		t.Error("claim without firstAvailable must count as dropped")
	}
}

func TestResourceVersions(t *testing.T) {
	groups := &metav1.APIGroupList{Groups: []metav1.APIGroup{
		{Name: "apps", Versions: []metav1.GroupVersionForDiscovery{{Version: "v1"}}},
		{Name: "resource.k8s.io", Versions: []metav1.GroupVersionForDiscovery{{Version: "v1alpha3"}, {Version: "v1beta2"}, {Version: "v1"}, {Version: "v1beta1"}}},
	}}
	got := resourceVersions(groups)
	want := []string{"v1", "v1beta2", "v1beta1", "v1alpha3"}
	if !slices.Equal(got, want) {
		t.Fatalf("resourceVersions = %v, want %v", got, want)
	}
	if got := resourceVersions(&metav1.APIGroupList{}); got != nil {
		t.Fatalf("no resource group: got %v", got)
	}
	if resourceVersions(nil) != nil {
		t.Fatal("nil groups must give nil")
	}
}

func TestVersionRank(t *testing.T) {
	order := []string{"v2", "v1", "v1beta10", "v1beta2", "v1alpha3", "v1alpha1"}
	for i := 1; i < len(order); i++ {
		if versionRank(order[i-1]) <= versionRank(order[i]) {
			t.Errorf("%s must rank above %s", order[i-1], order[i])
		}
	}
}

func TestServesResource(t *testing.T) {
	lists := []*metav1.APIResourceList{
		{GroupVersion: "resource.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "resourceslices"}}},
		nil,
		{GroupVersion: "resource.k8s.io/v1beta2", APIResources: []metav1.APIResource{{Name: "devicetaintrules"}}},
		{GroupVersion: "other.io/v1", APIResources: []metav1.APIResource{{Name: "widgets"}}},
	}
	if !servesResource(lists, "devicetaintrules") {
		t.Error("devicetaintrules served in v1beta2")
	}
	if servesResource(lists, "widgets") {
		t.Error("widgets are not in resource.k8s.io")
	}
	if servesResource(lists[:1], "devicetaintrules") {
		t.Error("v1 alone does not serve devicetaintrules")
	}
}
