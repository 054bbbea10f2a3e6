package stack

import (
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// Every boolean of ClusterFeatures is in Features with its gate, and
// HasFeature reads exactly that field: turning one field on turns on that
// name and no other.
func TestFeaturesCoverClusterFeatures(t *testing.T) {
	typ := reflect.TypeOf(v1alpha1.ClusterFeatures{})
	bools := 0
	for i := 0; i < typ.NumField(); i++ {
		fld := typ.Field(i)
		if fld.Type.Kind() != reflect.Bool {
			continue
		}
		bools++
		name, _, _ := strings.Cut(fld.Tag.Get("json"), ",")
		if FeatureGate(name) == "" {
			t.Errorf("ClusterFeatures.%s (%s) has no entry with a gate in Features", fld.Name, name)
			continue
		}
		var f v1alpha1.ClusterFeatures
		reflect.ValueOf(&f).Elem().Field(i).SetBool(true)
		for _, other := range Features {
			if got, want := HasFeature(&f, other.Name), other.Name == name; got != want {
				t.Errorf("with only %s on, HasFeature(%s) = %v", name, other.Name, got)
			}
		}
	}
	if bools != len(Features) {
		t.Errorf("%d boolean features, %d entries in Features", bools, len(Features))
	}
	if HasFeature(&v1alpha1.ClusterFeatures{PartitionableDevices: true}, "noSuchFeature") || FeatureGate("noSuchFeature") != "" {
		t.Error("an unknown feature must be absent and have no gate")
	}
}

func TestRequirementString(t *testing.T) {
	tests := []struct {
		req  Requirement
		want string
	}{
		{Requirement{Feature: "partitionableDevices", Field: "spec.multiHost"}, "spec.multiHost needs partitionableDevices (feature gate DRAPartitionableDevices)"},
		{Requirement{Feature: "deviceTaintRules", Field: "spec.claims.central[2]"}, "spec.claims.central[2] needs deviceTaintRules (feature gate DRADeviceTaintRules)"},
		{Requirement{Feature: "mystery", Field: "spec.x"}, "spec.x needs mystery"},
	}
	for _, tc := range tests {
		if got := tc.req.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}

func TestRequirements(t *testing.T) {
	selector := &metav1.LabelSelector{MatchLabels: map[string]string{"example.com/topology-jobs": "true"}}
	tests := []struct {
		name string
		spec v1alpha1.DRAStackSpec
		want []string
	}{
		{name: "empty spec needs nothing"},
		{
			name: "multiHost needs counters and list attributes",
			spec: v1alpha1.DRAStackSpec{MultiHost: []v1alpha1.MultiHostSpec{validMultiHost()}},
			want: []string{"spec.multiHost:partitionableDevices", "spec.multiHost:listTypeAttributes"},
		},
		{
			name: "central pools of a driver's own need taint rules",
			spec: v1alpha1.DRAStackSpec{Claims: v1alpha1.ClaimsSpec{Central: []v1alpha1.CentralDevices{
				{Driver: "gpu.example.com", NodeSelector: selector},
				{Driver: "gpu.example.com", Pools: []string{"node-7"}},
				{Driver: "nic.example.com"},
			}}},
			want: []string{"spec.claims.central[0]:deviceTaintRules", "spec.claims.central[1]:deviceTaintRules", "spec.claims.central[2]:deviceTaintRules"},
		},
		{
			name: "central devices the publisher writes carry the taint themselves",
			spec: v1alpha1.DRAStackSpec{
				MultiHost: []v1alpha1.MultiHostSpec{validMultiHost()},
				Claims: v1alpha1.ClaimsSpec{Central: []v1alpha1.CentralDevices{
					{Driver: "tpu.example.com", Classes: []string{"tpu.example.com"}},
					{Driver: "tpu.example.com", Pools: []string{"tpu-a"}},
				}},
			},
			want: []string{"spec.multiHost:partitionableDevices", "spec.multiHost:listTypeAttributes",
				"spec.claims.central[0]:deviceTaints", "spec.claims.central[1]:deviceTaints"},
		},
		{
			name: "node-local pools of a published driver still need taint rules",
			spec: v1alpha1.DRAStackSpec{
				MultiHost: []v1alpha1.MultiHostSpec{validMultiHost()},
				Claims:    v1alpha1.ClaimsSpec{Central: []v1alpha1.CentralDevices{{Driver: "tpu.example.com", NodeSelector: selector}}},
			},
			want: []string{"spec.multiHost:partitionableDevices", "spec.multiHost:listTypeAttributes", "spec.claims.central[0]:deviceTaintRules"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, r := range Requirements(&tc.spec) {
				got = append(got, r.Field+":"+r.Feature)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("requirements = %v, want %v", got, tc.want)
			}
		})
	}
}
