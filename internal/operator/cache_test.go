package operator

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drastack/drastack/internal/claimpolicy"
)

func fields(raw string) *metav1.FieldsV1 { return &metav1.FieldsV1{Raw: []byte(raw)} }

func TestSlimClaimKeepsWhoAllocated(t *testing.T) {
	alloc := &resourceapi.AllocationResult{}
	spec := fields(`{"f:spec":{"f:devices":{"f:requests":{}}}}`)
	for _, tc := range []struct {
		name    string
		entries []metav1.ManagedFieldsEntry
		alloc   *resourceapi.AllocationResult
		want    string
	}{
		{"the operator allocated", []metav1.ManagedFieldsEntry{
			{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate, FieldsV1: spec},
			{Manager: "drastack-claims", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status",
				FieldsV1: fields(`{"f:status":{"f:allocation":{".":{},"f:allocationTimestamp":{},"f:devices":{".":{},"f:results":{}}}}}`)},
		}, alloc, "drastack-claims"},
		{"kube-scheduler allocated and reserved", []metav1.ManagedFieldsEntry{
			{Manager: "kubectl", FieldsV1: spec},
			{Manager: "kube-scheduler", Subresource: "status",
				FieldsV1: fields(`{"f:status":{"f:allocation":{".":{}},"f:reservedFor":{}}}`)},
		}, alloc, "kube-scheduler"},
		{"someone else wrote the status", []metav1.ManagedFieldsEntry{
			{Manager: "kubectl", FieldsV1: spec},
			{Manager: "driver", Subresource: "status", FieldsV1: fields(`{"f:status":{"f:devices":{}}}`)},
		}, alloc, ""},
		{"unallocated", []metav1.ManagedFieldsEntry{{Manager: "kubectl", FieldsV1: spec}}, nil, ""},
		{"a field set that is not JSON", []metav1.ManagedFieldsEntry{{Manager: "x", FieldsV1: fields(`{`)}}, alloc, ""},
		{"no field set", []metav1.ManagedFieldsEntry{{Manager: "x"}}, alloc, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", ManagedFields: tc.entries},
				Status: resourceapi.ResourceClaimStatus{Allocation: tc.alloc}}
			before := claimpolicy.AllocatedBy(c)
			if before != tc.want {
				t.Fatalf("AllocatedBy before the transform = %q, want %q", before, tc.want)
			}
			out, err := slimClaim(c.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			slim := out.(*resourceapi.ResourceClaim)
			if got := claimpolicy.AllocatedBy(slim); got != before {
				t.Errorf("AllocatedBy after the transform = %q, want %q", got, before)
			}
			if len(slim.ManagedFields) != len(tc.entries) {
				t.Fatalf("%d managedFields entries, want %d", len(slim.ManagedFields), len(tc.entries))
			}
			for i, mf := range slim.ManagedFields {
				if mf.Manager != tc.entries[i].Manager || mf.Subresource != tc.entries[i].Subresource {
					t.Errorf("entry %d: %s/%s, want %s/%s", i, mf.Manager, mf.Subresource, tc.entries[i].Manager, tc.entries[i].Subresource)
				}
				if mf.FieldsV1 != nil && mf.Manager != tc.want {
					t.Errorf("entry %d (%s) keeps a field set: %s", i, mf.Manager, mf.FieldsV1.Raw)
				}
			}
		})
	}
}

func TestSlimNodeKeepsWhatIsRead(t *testing.T) {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"a": "b"}, Annotations: map[string]string{"x": "y"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Capacity:         corev1.ResourceList{"example.com/gpu": resource.MustParse("8")},
			Allocatable:      corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")},
			DeclaredFeatures: []string{"DRAOptionalNodeOperations"},
			Conditions:       []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Images:           []corev1.ContainerImage{{Names: []string{"registry.example.com/big:1"}, SizeBytes: 1 << 30}},
			Addresses:        []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
			NodeInfo:         corev1.NodeSystemInfo{KubeletVersion: "v1.37.2"},
		},
	}
	out, err := slimNode(n.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	s := out.(*corev1.Node)
	if s.Labels["a"] != "b" || s.Annotations["x"] != "y" || !s.Spec.Unschedulable || len(s.Spec.Taints) != 1 {
		t.Errorf("metadata or spec lost: %+v %+v", s.ObjectMeta, s.Spec)
	}
	if q := s.Status.Capacity["example.com/gpu"]; q.Value() != 8 {
		t.Errorf("capacity lost: %v", s.Status.Capacity)
	}
	if q := s.Status.Allocatable[corev1.ResourcePods]; q.Value() != 110 {
		t.Errorf("allocatable lost: %v", s.Status.Allocatable)
	}
	if len(s.Status.DeclaredFeatures) != 1 {
		t.Errorf("declared features lost: %v", s.Status.DeclaredFeatures)
	}
	if s.ManagedFields != nil || s.Status.Conditions != nil || s.Status.Images != nil || s.Status.Addresses != nil || s.Status.NodeInfo.KubeletVersion != "" {
		t.Errorf("kept what nothing reads: %+v %+v", s.ManagedFields, s.Status)
	}
}

func TestTransformsPassOtherTypes(t *testing.T) {
	pod := &corev1.Pod{}
	for name, f := range map[string]func(any) (any, error){"slimNode": slimNode, "slimClaim": slimClaim} {
		if out, err := f(pod); err != nil || out != pod {
			t.Errorf("%s changed a Pod: %v %v", name, out, err)
		}
	}
}
