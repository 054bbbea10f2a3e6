package cli

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	drastackv1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// liveCluster: node-1 (cordoned) and node-2, two GPUs each; claim held on
// node-2 holds gpu-0 there; claim big wants 4 GPUs; pod p wants one GPU
// through claim small and cannot go to node-1.
func liveCluster(t *testing.T) client.Reader {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := drastackv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	objs := []client.Object{
		&resourceapi.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: "gpu"},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
				CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "gpu.example.com"`},
			}}},
		},
	}
	for i, name := range []string{"node-1", "node-2"} {
		objs = append(objs, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
			Spec:       corev1.NodeSpec{Unschedulable: i == 0},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
				corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceCPU: resource.MustParse("4"),
			}},
		}, &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-gpus"},
			Spec: resourceapi.ResourceSliceSpec{
				Driver: "gpu.example.com", NodeName: ptr.To(name),
				Pool:    resourceapi.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: 1},
				Devices: []resourceapi.Device{{Name: "gpu-0"}, {Name: "gpu-1"}},
			},
		})
	}
	req := func(n int64) resourceapi.DeviceClaim {
		return resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: n,
		}}}}
	}
	objs = append(objs,
		&resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "held", UID: "uid-held"},
			Spec:       resourceapi.ResourceClaimSpec{Devices: req(1)},
			Status: resourceapi.ResourceClaimStatus{
				ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "uid-p"}},
				Allocation: &resourceapi.AllocationResult{
					Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
						Request: "gpu", Driver: "gpu.example.com", Pool: "node-2", Device: "gpu-0",
					}}},
					NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
						Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"node-2"},
					}}}}},
				}},
		},
		&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "big", UID: "uid-big"}, Spec: resourceapi.ResourceClaimSpec{Devices: req(4)}},
		&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "small", UID: "uid-small"}, Spec: resourceapi.ResourceClaimSpec{Devices: req(2)}},
		&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "p", UID: "uid-p"},
			Spec: corev1.PodSpec{
				Containers:     []corev1.Container{{Name: "c", Image: "x"}},
				ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("small")}},
			},
		},
	)
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
}

// TestExplainLive: kubectl dra explain without -f reads the cluster; a
// pod's node filters rule node-1 out, and with gpu-0 of node-2 held the
// pod's claim for 2 GPUs fits nowhere, which the verdict says with the
// holder; an allocated claim says where it is.
func TestExplainLive(t *testing.T) {
	c := liveCluster(t)
	code, out, stderr := run(t, "", c, "explain", "pod/p", "-n", "ml")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	containsAll(t, "pod table", out,
		"Pod ml/p, claim ml/small: request gpu: 2 devices match the class on node-2, 1 after devices allocated to ml/held; 2 needed; node filters: 1/2 nodes are available: 1 node(s) were unschedulable.",
		"node-1: node(s) were unschedulable",
		"Nodes node-2: does not fit")
	if strings.Contains(out, "Nodes node-1") {
		t.Errorf("node-1 is ruled out by the pod's filters but explained:\n%s", out)
	}
	// The node-filter obstacle, pinned as the other obstacles are.
	golden(t, "explain-node-filter.txt", out)

	code, js, stderr := run(t, "", c, "explain", "claim/big", "-n", "ml", "-o", "json")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res ExplainOutput
	if err := unmarshalOutput("json", js, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Explanations) != 1 || res.Explanations[0].Fits || res.Features != "Kubernetes 1.37's defaults" || res.Pod != "" {
		t.Fatalf("claim/big: %s", js)
	}
	containsAll(t, "claim/big verdict", res.Explanations[0].Verdict, "request gpu: 2 devices on node-1; 4 needed")

	code, out, stderr = run(t, "", c, "explain", "claim/held", "-n", "ml")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	containsAll(t, "claim/held", out, "allocated (status.allocation): ml/held gpu: gpu.example.com/node-2/gpu-0; on node-2; reserved for pods/p")

	for _, args := range [][]string{
		{"explain", "claim/missing", "-n", "ml"},
		{"explain", "pod/missing", "-n", "ml"},
	} {
		if code, _, stderr := run(t, "", c, args...); code != ExitInvalidInput || !strings.Contains(stderr, "missing") {
			t.Errorf("%v: exit %d (%s), want %d naming the object", args, code, stderr, ExitInvalidInput)
		}
	}
}

// TestAllocatedWhy: who wrote an allocation comes from managedFields
// (which the fake client does not keep, hence a test of its own).
func TestAllocatedWhy(t *testing.T) {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{{
			Manager: "drastack-claims", Operation: metav1.ManagedFieldsOperationApply, Subresource: "status",
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:allocation":{}}}`)},
		}}},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}},
	}
	if got, want := allocatedWhy(c), "; allocated by drastack-claims; reserved for no consumer yet"; got != want {
		t.Errorf("allocatedWhy = %q, want %q", got, want)
	}
}
