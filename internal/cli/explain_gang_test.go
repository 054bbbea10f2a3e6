package cli

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	drastackv1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/gang"
)

// gangCluster: node-1 has GPUs of types x, x, y, x; pod a wants one GPU,
// pod b wants b's count of type x; both are in the label gang train (of
// min pods). extra objects are added.
func gangCluster(t *testing.T, bCount, min int, extra ...client.Object) client.Reader {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := drastackv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1-gpus"},
		Spec: resourceapi.ResourceSliceSpec{Driver: "gpu.example.com", NodeName: ptr.To("node-1"),
			Pool: resourceapi.ResourcePool{Name: "node-1", Generation: 1, ResourceSliceCount: 1}},
	}
	for i, typ := range []string{"x", "x", "y", "x"} {
		slice.Spec.Devices = append(slice.Spec.Devices, resourceapi.Device{Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"type": {StringValue: ptr.To(typ)}}})
	}
	claim := func(name string, count int, selector string) *resourceapi.ResourceClaim {
		req := &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(count)}
		if selector != "" {
			req.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}
		}
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID("uid-" + name)},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: req}}}}}
	}
	pod := func(name, claim string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID("uid-" + name),
				Labels: map[string]string{gang.LabelName: "train"}, Annotations: map[string]string{gang.AnnotationMinCount: fmt.Sprint(min)}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}},
				ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim)}}},
		}
	}
	objs := []client.Object{
		&resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "gpu.example.com"`}}}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"kubernetes.io/hostname": "node-1"}},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceCPU: resource.MustParse("4")}}},
		slice, claim("a", 1, ""), claim("b", bCount, `device.attributes["gpu.example.com"].type == "x"`),
		pod("a", "a"), pod("b", "b"),
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(append(objs, extra...)...).Build()
}

// TestExplainGangLive: kubectl dra explain pod/NAME of any member of a
// gang explains the gang: where all members go when they fit together
// (a, alone first, would take an x GPU that b needs: kubernetes#138765),
// which member fits nowhere when they do not, and what an incomplete gang
// waits for.
func TestExplainGangLive(t *testing.T) {
	for _, tc := range []struct {
		name  string
		c     client.Reader
		pod   string
		table []string
		gang  func(*GangOutput) string
	}{
		{
			name: "fits together", c: gangCluster(t, 3, 2), pod: "pod/a",
			table: []string{"Gang ml/train (Label, 2 of 2 pods): gang ml/train fits: ml/a on node-1, ml/b on node-1",
				"pod ml/a: on node-1: ml/a gpu: gpu.example.com/node-1/gpu-2"},
			gang: func(g *GangOutput) string {
				if g.Explanation == nil || !g.Explanation.Fits || g.Present != 2 || g.MinCount != 2 {
					return "want a fitting gang of 2 pods"
				}
				return ""
			},
		},
		{
			name: "a member fits nowhere", c: gangCluster(t, 4, 2), pod: "pod/b",
			table: []string{"gang ml/train: pod ml/b cannot be placed even alone: request gpu: 4 devices match the class on node-1, 3 after selector 1",
				"pod ml/b alone: request gpu"},
			gang: func(g *GangOutput) string {
				if g.Explanation == nil || g.Explanation.Fits || g.Explanation.Reason == "" {
					return "want a gang that does not fit, with the engine's reason"
				}
				return ""
			},
		},
		{
			name: "waiting for its pods", c: gangCluster(t, 3, 3), pod: "pod/a",
			table: []string{"Gang ml/train (Label, 2 of 3 pods): gang ml/train has 2 of its 3 pods: none is placed before all are there"},
			gang: func(g *GangOutput) string {
				if g.Waiting != "its pods" || g.Explanation != nil {
					return "want a gang waiting for its pods, not explained"
				}
				return ""
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := run(t, "", tc.c, "explain", tc.pod, "-n", "ml")
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			containsAll(t, "table", out, tc.table...)
			code, js, stderr := run(t, "", tc.c, "explain", tc.pod, "-n", "ml", "-o", "json")
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var res ExplainOutput
			if err := unmarshalOutput("json", js, &res); err != nil {
				t.Fatal(err)
			}
			if res.Gang == nil {
				t.Fatalf("no gang in %s", js)
			}
			if msg := tc.gang(res.Gang); msg != "" {
				t.Errorf("%s: %+v", msg, res.Gang)
			}
			// The pod's own claims are still explained, alone.
			if len(res.Explanations) != 1 {
				t.Errorf("%d explanations of the pod's claims, want 1", len(res.Explanations))
			}
		})
	}
	t.Run("a member whose claim does not exist", func(t *testing.T) {
		c := gangCluster(t, 3, 2, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "c", UID: "uid-c",
				Labels: map[string]string{gang.LabelName: "train"}, Annotations: map[string]string{gang.AnnotationMinCount: "2"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}},
				ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("gone")}}},
		})
		code, js, stderr := run(t, "", c, "explain", "pod/a", "-n", "ml", "-o", "json")
		if code != ExitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var res ExplainOutput
		if err := unmarshalOutput("json", js, &res); err != nil {
			t.Fatal(err)
		}
		if res.Gang == nil || res.Gang.Waiting != "the claims of pod c" || res.Gang.Explanation != nil ||
			!strings.Contains(res.Gang.Verdict, "gang ml/train waits for pod ml/c: claim gone does not exist; none is placed before it is there") {
			t.Errorf("want a gang waiting for the claim of pod c, not explained: %+v", res.Gang)
		}
	})
	t.Run("a pod whose PodGroup does not exist", func(t *testing.T) {
		c := gangCluster(t, 3, 2, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "w", UID: "uid-w"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}},
				SchedulingGroup: &corev1.PodSchedulingGroup{PodGroupName: ptr.To("workers")},
				ResourceClaims:  []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("a")}}},
		})
		code, out, stderr := run(t, "", c, "explain", "pod/w", "-n", "ml")
		if code != ExitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		containsAll(t, "table", out, "pod ml/w names PodGroup workers, which does not exist: it waits for it")
	})
	t.Run("a PodGroup's gang", func(t *testing.T) {
		pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "workers"},
			Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 2}}}}
		c := gangCluster(t, 3, 2, pg, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "w", UID: "uid-w"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}},
				SchedulingGroup: &corev1.PodSchedulingGroup{PodGroupName: ptr.To("workers")},
				ResourceClaims:  []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("a")}}},
		})
		code, out, stderr := run(t, "", c, "explain", "pod/w", "-n", "ml")
		if code != ExitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		containsAll(t, "table", out, "Gang ml/workers (PodGroup, 1 of 2 pods): gang ml/workers has 1 of its 2 pods")
	})
	// A pod in no gang has no gang section.
	code, out, _ := run(t, "", liveCluster(t), "explain", "pod/p", "-n", "ml")
	if code != ExitOK || strings.Contains(out, "Gang") {
		t.Errorf("pod in no gang: exit %d, output mentions a gang:\n%s", code, out)
	}
}
