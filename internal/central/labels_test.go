package central

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

func nodeSel(keys ...string) *corev1.NodeSelector {
	var reqs []corev1.NodeSelectorRequirement
	for _, k := range keys {
		reqs = append(reqs, corev1.NodeSelectorRequirement{Key: k, Operator: corev1.NodeSelectorOpExists})
	}
	return &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: reqs,
		MatchFields:      []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n"}}},
	}}}
}

func TestLabelKeys(t *testing.T) {
	sliceSel := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{NodeSelector: nodeSel("rack")}}
	perDevice := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Devices: []resourceapi.Device{
		{Name: "a", NodeSelector: nodeSel("tpu-domain", "tpu-coords")}, {Name: "b"},
	}}}
	nodeLocal := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{NodeName: ptrTo("n1")}}
	entries := []v1alpha1.CentralDevices{{Driver: "d", NodeSelector: &metav1.LabelSelector{
		MatchLabels:      map[string]string{"pool": "central"},
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "gpu", Operator: metav1.LabelSelectorOpExists}},
	}}, {Driver: "e"}}
	for _, tc := range []struct {
		name    string
		slices  []*resourceapi.ResourceSlice
		entries []v1alpha1.CentralDevices
		want    []string
	}{
		{"node-local slices and whole drivers read no label", []*resourceapi.ResourceSlice{nodeLocal, nil}, []v1alpha1.CentralDevices{{Driver: "e"}}, nil},
		{"slice and per-device selectors, not matchFields", []*resourceapi.ResourceSlice{sliceSel, perDevice, nodeLocal}, nil, []string{"rack", "tpu-coords", "tpu-domain"}},
		{"central entries' selectors", nil, entries, []string{"gpu", "pool"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for k := range LabelKeys(tc.slices, tc.entries) {
				got = append(got, k)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("LabelKeys = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLabelsChanged(t *testing.T) {
	keys := map[string]bool{"tpu-domain": true}
	base := map[string]string{"kubernetes.io/arch": "amd64", "tpu-domain": "d1"}
	for _, tc := range []struct {
		name string
		cur  map[string]string
		want bool
	}{
		{"beta labels added", map[string]string{"kubernetes.io/arch": "amd64", "beta.kubernetes.io/arch": "amd64", "tpu-domain": "d1"}, false},
		{"a read label changed", map[string]string{"kubernetes.io/arch": "amd64", "tpu-domain": "d2"}, true},
		{"a read label removed", map[string]string{"kubernetes.io/arch": "amd64"}, true},
		{"nothing changed", base, false},
	} {
		if got := LabelsChanged(keys, base, tc.cur); got != tc.want {
			t.Errorf("%s: LabelsChanged = %v, want %v", tc.name, got, tc.want)
		}
	}
	if !LabelsChanged(keys, map[string]string{}, map[string]string{"tpu-domain": ""}) {
		t.Error("a read label added with an empty value is a change")
	}
}

func ptrTo[T any](v T) *T { return &v }
