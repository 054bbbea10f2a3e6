package driver

import (
	"context"
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/driver"
)

func gpuNode(name string, gpus int64, labels map[string]string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if gpus >= 0 {
		n.Status.Capacity = corev1.ResourceList{driver.NVIDIADevicePluginResource: *resource.NewQuantity(gpus, resource.DecimalSI)}
	}
	return n
}

// TestNodeResourcesChanged: only what can change a render passes.
func TestNodeResourcesChanged(t *testing.T) {
	p := nodeResourcesChanged([]string{driver.NVIDIADevicePluginResource})
	gpu := map[string]string{"nvidia.com/gpu.present": "true"}
	tests := []struct {
		name     string
		old, new *corev1.Node
		want     bool
	}{
		{"the device plugin starts serving GPUs", gpuNode("a", -1, gpu), gpuNode("a", 8, gpu), true},
		{"the device plugin stops (capacity 0)", gpuNode("a", 8, gpu), gpuNode("a", 0, gpu), true},
		{"a GPU count change keeps it serving", gpuNode("a", 8, gpu), gpuNode("a", 7, gpu), false},
		{"a node with the device plugin relabelled", gpuNode("a", 8, gpu), gpuNode("a", 8, map[string]string{"x": "y"}), true},
		{"a node without it relabelled", gpuNode("a", -1, gpu), gpuNode("a", -1, nil), false},
		{"a heartbeat", gpuNode("a", 8, gpu), gpuNode("a", 8, gpu), false},
	}
	for _, tc := range tests {
		if got := p.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if !p.Create(event.CreateEvent{Object: gpuNode("b", 4, nil)}) || p.Create(event.CreateEvent{Object: gpuNode("c", -1, nil)}) {
		t.Error("creation passes only for a node with the device plugin")
	}
}

// TestNodeFacts: the renders get the nodes with the resources their
// profiles ask about, and nothing is listed when none asks.
func TestNodeFacts(t *testing.T) {
	c := fake.NewClientBuilder().WithObjects(gpuNode("a", 8, map[string]string{"l": "1"}), gpuNode("b", 0, nil), gpuNode("c", -1, nil)).Build()
	r := &Reconciler{Client: c}
	nvidia := v1alpha1.DriverSpec{Name: driver.NVIDIAGPUDriver, Profile: v1alpha1.DriverProfileNVIDIAGPU}
	facts, err := r.nodeFacts(context.Background(), []v1alpha1.DriverSpec{nvidia})
	if err != nil {
		t.Fatal(err)
	}
	if len(facts) != 1 || facts[0].Name != "a" || facts[0].Labels["l"] != "1" || facts[0].Resources[0] != driver.NVIDIADevicePluginResource {
		t.Errorf("facts %+v, want node a only", facts)
	}
	listed := false
	quiet := &Reconciler{Client: fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			listed = true
			return c.List(ctx, list, opts...)
		},
	}).Build()}
	if facts, err := quiet.nodeFacts(context.Background(), []v1alpha1.DriverSpec{{Name: "gpu.example.com"}}); err != nil || facts != nil || listed {
		t.Errorf("no profile asks: facts %v err %v listed %v", facts, err, listed)
	}
}

// TestReleaseCRD: a kept definition loses only the drastack labels and
// annotations; its schema and other labels stay.
func TestReleaseCRD(t *testing.T) {
	s := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "computedomains.resource.nvidia.com",
			Labels:      map[string]string{driver.LabelStack: "default", driver.LabelDriver: driver.NVIDIAGPUDriver, driver.LabelManagedBy: driver.ManagedByValue, "team": "ml"},
			Annotations: map[string]string{driver.AnnotationRemovalPolicy: "Force", "note": "kept"}},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: "resource.nvidia.com", Scope: apiextensionsv1.NamespaceScoped,
			Names:    apiextensionsv1.CustomResourceDefinitionNames{Kind: "ComputeDomain", Plural: "computedomains"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1beta1", Served: true, Storage: true}}},
	}
	var sent map[string]any
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(crd).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			data, _ := patch.Data(obj)
			_ = json.Unmarshal(data, &sent)
			return c.Patch(ctx, obj, patch, opts...)
		},
	}).Build()
	r := &Reconciler{Client: c}
	o := object{gvk: driver.CRDKind}
	o.SetName(crd.Name)
	if err := r.releaseCRD(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	got := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: crd.Name}, got); err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Labels[driver.LabelStack]; ok || got.Labels["team"] != "ml" || got.Annotations["note"] != "kept" || got.Annotations[driver.AnnotationRemovalPolicy] != "" {
		t.Errorf("labels %v annotations %v", got.Labels, got.Annotations)
	}
	if len(got.Spec.Versions) != 1 || got.Spec.Group != "resource.nvidia.com" {
		t.Errorf("the release changed the definition itself: %+v", got.Spec)
	}
	if _, ok := sent["spec"]; ok {
		t.Errorf("the patch touches more than metadata: %v", sent)
	}
}

func TestServedVersion(t *testing.T) {
	v := func(name string, served, storage bool) apiextensionsv1.CustomResourceDefinitionVersion {
		return apiextensionsv1.CustomResourceDefinitionVersion{Name: name, Served: served, Storage: storage}
	}
	for _, tc := range []struct {
		versions []apiextensionsv1.CustomResourceDefinitionVersion
		want     string
	}{
		{[]apiextensionsv1.CustomResourceDefinitionVersion{v("v1alpha1", true, false), v("v1beta1", true, true)}, "v1beta1"},
		{[]apiextensionsv1.CustomResourceDefinitionVersion{v("v1", false, true), v("v2", true, false)}, "v2"},
		{[]apiextensionsv1.CustomResourceDefinitionVersion{v("v1", false, true)}, ""},
	} {
		crd := &apiextensionsv1.CustomResourceDefinition{Spec: apiextensionsv1.CustomResourceDefinitionSpec{Versions: tc.versions}}
		if got := servedVersion(crd); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.versions, got, tc.want)
		}
	}
}
