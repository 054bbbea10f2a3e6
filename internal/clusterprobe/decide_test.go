package clusterprobe

import (
	"errors"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The probe objects are what we send; a server with the gate off returns
// them with the gated field dropped. Each case strips fields the way such a
// server would and checks which decisions flip: a decision must read only
// its own field, so dropping one feature's field never hides another's.
func TestKeptSliceFields(t *testing.T) {
	type drop func(*resourceapi.ResourceSlice)
	dev := func(f func(*resourceapi.Device)) drop {
		return func(s *resourceapi.ResourceSlice) { f(&s.Spec.Devices[0]) }
	}
	kept := map[string]func(*resourceapi.ResourceSlice) bool{
		"partitionable":       keptPartitionable,
		"compatibilityGroups": keptCompatibilityGroups,
		"partitionType":       keptPartitionType,
		"list":                keptListAttribute,
		"taint":               keptTaint,
		"bindingConditions":   keptBindingConditions,
		"multiAllocatable":    keptMultiAllocatable,
		"skipNodeOperations":  keptSkipNodeOperations,
	}
	tests := []struct {
		name  string
		slice func() *resourceapi.ResourceSlice
		drop  drop
		// want are the decisions that must be true; all others must be false.
		want []string
	}{
		{name: "partitionable as sent", slice: partitionableSlice, want: []string{"partitionable"}},
		{name: "partitionable: per-device selection dropped", slice: partitionableSlice,
			drop: func(s *resourceapi.ResourceSlice) { s.Spec.PerDeviceNodeSelection = nil }},
		{name: "partitionable: counters dropped", slice: partitionableSlice,
			drop: dev(func(d *resourceapi.Device) { d.ConsumesCounters = nil })},
		{name: "partitionable: device node selection dropped", slice: partitionableSlice,
			drop: dev(func(d *resourceapi.Device) { d.AllNodes = nil })},

		{name: "partition features as sent", slice: partitionFeaturesSlice,
			want: []string{"partitionable", "compatibilityGroups", "partitionType"}},
		{name: "partition features: groups dropped", slice: partitionFeaturesSlice,
			drop: dev(func(d *resourceapi.Device) { d.ConsumesCounters[0].CompatibilityGroups = nil }),
			want: []string{"partitionable", "partitionType"}},
		{name: "partition features: partition type dropped", slice: partitionFeaturesSlice,
			drop: func(s *resourceapi.ResourceSlice) { s.Spec.PartitionTypeAttribute = nil },
			want: []string{"partitionable", "compatibilityGroups"}},

		{name: "list as sent", slice: listAttributeSlice, want: []string{"list"}},
		{name: "list values dropped", slice: listAttributeSlice,
			drop: dev(func(d *resourceapi.Device) { d.Attributes["roots"] = resourceapi.DeviceAttribute{} })},
		{name: "list attribute gone", slice: listAttributeSlice,
			drop: dev(func(d *resourceapi.Device) { d.Attributes = nil })},

		{name: "device features as sent", slice: deviceFeaturesSlice,
			want: []string{"taint", "bindingConditions", "multiAllocatable", "skipNodeOperations"}},
		{name: "device features: taint dropped", slice: deviceFeaturesSlice,
			drop: dev(func(d *resourceapi.Device) { d.Taints = nil }),
			want: []string{"bindingConditions", "multiAllocatable", "skipNodeOperations"}},
		{name: "device features: binding conditions dropped", slice: deviceFeaturesSlice,
			drop: dev(func(d *resourceapi.Device) {
				d.BindsToNode, d.BindingConditions, d.BindingFailureConditions = nil, nil, nil
			}),
			want: []string{"taint", "multiAllocatable", "skipNodeOperations"}},
		{name: "device features: only bindsToNode kept", slice: deviceFeaturesSlice,
			drop: dev(func(d *resourceapi.Device) { d.BindingConditions, d.BindingFailureConditions = nil, nil }),
			want: []string{"taint", "multiAllocatable", "skipNodeOperations"}},
		{name: "device features: consumable capacity dropped", slice: deviceFeaturesSlice,
			drop: dev(func(d *resourceapi.Device) {
				d.AllowMultipleAllocations = nil
				c := d.Capacity[capacityName]
				c.RequestPolicy = nil
				d.Capacity[capacityName] = c
			}),
			want: []string{"taint", "bindingConditions", "skipNodeOperations"}},
		{name: "device features: requestPolicy alone dropped", slice: deviceFeaturesSlice,
			drop: dev(func(d *resourceapi.Device) {
				c := d.Capacity[capacityName]
				c.RequestPolicy = nil
				d.Capacity[capacityName] = c
			}),
			want: []string{"taint", "bindingConditions", "skipNodeOperations"}},
		{name: "device features: skipNodeOperations dropped", slice: deviceFeaturesSlice,
			drop: func(s *resourceapi.ResourceSlice) { s.Spec.SkipNodeOperations = nil },
			want: []string{"taint", "bindingConditions", "multiAllocatable"}},
		{name: "refused write", slice: func() *resourceapi.ResourceSlice { return nil }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.slice()
			if got != nil {
				got = got.DeepCopy()
			}
			if tc.drop != nil {
				tc.drop(got)
			}
			for name, f := range kept {
				if want := slices.Contains(tc.want, name); f(got) != want {
					t.Errorf("kept %s = %v, want %v", name, !want, want)
				}
			}
		})
	}
}

func TestKeptClaimFields(t *testing.T) {
	kept := map[string]func(*resourceapi.ResourceClaim) bool{
		"firstAvailable":    keptFirstAvailable,
		"capacityRequest":   keptCapacityRequest,
		"derivedAttributes": keptDerivedAttributes,
		"adminAccess":       keptAdminAccess,
	}
	exact := func(f func(*resourceapi.ExactDeviceRequest)) func(*resourceapi.ResourceClaim) {
		return func(c *resourceapi.ResourceClaim) { f(c.Spec.Devices.Requests[0].Exactly) }
	}
	tests := []struct {
		name  string
		claim *resourceapi.ResourceClaim
		drop  func(*resourceapi.ResourceClaim)
		want  []string
	}{
		{name: "prioritized list as sent", claim: prioritizedListClaim("ns"), want: []string{"firstAvailable"}},
		{name: "firstAvailable dropped", claim: prioritizedListClaim("ns"),
			drop: func(c *resourceapi.ResourceClaim) { c.Spec.Devices.Requests[0].FirstAvailable = nil }},
		{name: "request features as sent", claim: requestFeaturesClaim("ns"), want: []string{"capacityRequest", "derivedAttributes"}},
		{name: "capacity dropped", claim: requestFeaturesClaim("ns"),
			drop: exact(func(r *resourceapi.ExactDeviceRequest) { r.Capacity = nil }), want: []string{"derivedAttributes"}},
		{name: "derived attributes dropped", claim: requestFeaturesClaim("ns"),
			drop: exact(func(r *resourceapi.ExactDeviceRequest) { r.DerivedAttributes = nil }), want: []string{"capacityRequest"}},
		{name: "admin access as sent", claim: adminAccessClaim("ns"), want: []string{"adminAccess"}},
		{name: "admin access dropped", claim: adminAccessClaim("ns"),
			drop: exact(func(r *resourceapi.ExactDeviceRequest) { r.AdminAccess = nil })},
		{name: "refused write"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.claim.DeepCopy()
			if tc.drop != nil {
				tc.drop(got)
			}
			for name, f := range kept {
				if want := slices.Contains(tc.want, name); f(got) != want {
					t.Errorf("kept %s = %v, want %v", name, !want, want)
				}
			}
		})
	}
}

// The derived attribute must be used by a constraint of its request, or the
// server refuses the claim whatever its gates.
func TestRequestFeaturesClaimUsesDerivedAttribute(t *testing.T) {
	c := requestFeaturesClaim("ns")
	r := c.Spec.Devices.Requests[0]
	for _, con := range c.Spec.Devices.Constraints {
		if con.MatchAttribute != nil && *con.MatchAttribute == r.Exactly.DerivedAttributes[0].Name && slices.Contains(con.Requests, r.Name) {
			return
		}
	}
	t.Fatal("no matchAttribute constraint of the request uses the derived attribute")
}

// The server refuses partitionTypeAttribute unless a device consumes
// counters and carries the named attribute as a string.
func TestPartitionFeaturesSliceIsConsistent(t *testing.T) {
	s := partitionFeaturesSlice()
	name := resourceapi.QualifiedName(*s.Spec.PartitionTypeAttribute)
	d := s.Spec.Devices[0]
	if len(d.ConsumesCounters) == 0 {
		t.Fatal("partitionTypeAttribute needs a device that consumes counters")
	}
	if a, ok := d.Attributes[name]; !ok || a.StringValue == nil {
		t.Fatalf("device lacks string attribute %s", name)
	}
}

func TestKeptExtendedResourceName(t *testing.T) {
	c := extendedResourceClass()
	if !keptExtendedResourceName(c) {
		t.Error("class as sent must count as kept")
	}
	c.Spec.ExtendedResourceName = nil
	if keptExtendedResourceName(c) {
		t.Error("class without extendedResourceName must count as dropped")
	}
	if keptExtendedResourceName(nil) {
		t.Error("refused write must count as dropped")
	}
}

func TestRefusedForAdminAccess(t *testing.T) {
	invalid := func(causes ...metav1.StatusCause) error {
		var errs field.ErrorList
		for _, c := range causes {
			errs = append(errs, &field.Error{Type: field.ErrorType(c.Type), Field: c.Field, Detail: c.Message})
		}
		return apierrors.NewInvalid(schema.GroupKind{Group: "resource.k8s.io", Kind: "ResourceClaim"}, "drastack-probe-admin-access", errs)
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"no refusal", nil, false},
		{"namespace lacks the admin label", invalid(metav1.StatusCause{
			Type: metav1.CauseType(field.ErrorTypeForbidden), Field: "spec.devices.requests[0].exactly.adminAccess",
			Message: "admin access to devices requires the `resource.kubernetes.io/admin-access: true` label on the containing namespace",
		}), true},
		{"namespace lacks the admin label (path of Kubernetes 1.37)", invalid(metav1.StatusCause{
			Type: metav1.CauseType(field.ErrorTypeForbidden), Field: "spec.devices.requests[0].adminAccess",
		}), true},
		{"namespace lookup failed", invalid(metav1.StatusCause{
			Type: metav1.CauseType(field.ErrorTypeInternal), Field: "spec.devices.requests[0].exactly.adminAccess",
		}), true},
		{"refused for another field", invalid(metav1.StatusCause{
			Type: metav1.CauseType(field.ErrorTypeRequired), Field: "spec.devices.requests[0]",
		}), false},
		{"a field that only ends like it", invalid(metav1.StatusCause{
			Type: metav1.CauseType(field.ErrorTypeInvalid), Field: "spec.devices.requests[0].exactly.notAdminAccess",
		}), false},
		{"not a status error", errors.New("adminAccess"), false},
		{"forbidden by RBAC", apierrors.NewForbidden(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}, "x", errors.New("no")), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := refusedForAdminAccess(tc.err); got != tc.want {
				t.Fatalf("refusedForAdminAccess = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRequiresGranularStatusAuthorization(t *testing.T) {
	tests := []struct {
		version string
		want    bool
	}{
		{"v1.37.2", true},
		{"v1.36.3", true},
		{"v1.36.0", true},
		{"v1.35.9", false},
		{"v1.34.0", false},
		{"v2.0.0", true},
		{"v1.36.3-gke.100", true},
		{"v0.0.0-master+$Format:%H$", false},
		{"", false},
		{"garbage", false},
	}
	for _, tc := range tests {
		if got := requiresGranularStatusAuthorization(tc.version); got != tc.want {
			t.Errorf("requiresGranularStatusAuthorization(%q) = %v, want %v", tc.version, got, tc.want)
		}
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

func TestServingVersion(t *testing.T) {
	lists := []*metav1.APIResourceList{
		{GroupVersion: "resource.k8s.io/v1beta2", APIResources: []metav1.APIResource{{Name: "devicetaintrules"}}},
		{GroupVersion: "resource.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "resourceslices"}, {Name: "devicetaintrules"}}},
		nil,
		{GroupVersion: "resource.k8s.io/v1alpha3", APIResources: []metav1.APIResource{{Name: "devicetaintrules"}, {Name: "resourcepoolstatusrequests"}}},
		{GroupVersion: "other.io/v1", APIResources: []metav1.APIResource{{Name: "widgets"}}},
	}
	tests := []struct {
		name     string
		lists    []*metav1.APIResourceList
		resource string
		want     string
	}{
		{"1.37: v1 wins over older versions in any order", lists, "devicetaintrules", "v1"},
		{"1.36: only v1beta2", lists[:1], "devicetaintrules", "v1beta2"},
		{"alpha only", lists, "resourcepoolstatusrequests", "v1alpha3"},
		{"v1 alone does not serve taint rules", lists[1:2], "resourcepoolstatusrequests", ""},
		{"other groups do not count", lists, "widgets", ""},
		{"nothing", nil, "devicetaintrules", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := servingVersion(tc.lists, tc.resource); got != tc.want {
				t.Fatalf("servingVersion(%s) = %q, want %q", tc.resource, got, tc.want)
			}
		})
	}
}
