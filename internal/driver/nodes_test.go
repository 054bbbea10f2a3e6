package driver

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

func node(name string, labels map[string]string, taints ...corev1.Taint) corev1.Node {
	return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.NodeSpec{Taints: taints}}
}

// pluginTemplate renders a driver and returns its kubelet-plugin pod spec.
func pluginTemplate(t *testing.T, spec v1alpha1.DriverSpec) *corev1.PodSpec {
	t.Helper()
	r, err := Render(Input{Stack: "default", Namespace: "drastack-drivers", Driver: spec})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range r.Objects {
		if o.GetKind() == "DaemonSet" && o.GetName() == r.PluginDaemonSet {
			var ds appsv1.DaemonSet
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &ds); err != nil {
				t.Fatal(err)
			}
			return &ds.Spec.Template.Spec
		}
	}
	t.Fatal("no kubelet-plugin DaemonSet rendered")
	return nil
}

// TestFitNodes: the node selector, a profile's required node affinity and
// taints, each named when it is the filter that leaves no node.
func TestFitNodes(t *testing.T) {
	gpu := map[string]string{"nvidia.com/gpu.present": "true", "pool": "a"}
	nfd := map[string]string{"feature.node.kubernetes.io/pci-10de.present": "true"}
	plain := map[string]string{"pool": "a"}
	nvidia := v1alpha1.DriverSpec{Name: NVIDIAGPUDriver, Profile: v1alpha1.DriverProfileNVIDIAGPU}
	example := v1alpha1.DriverSpec{Name: "gpu.example.com", Profile: v1alpha1.DriverProfileExample}
	withSelector := func(d v1alpha1.DriverSpec, sel map[string]string) v1alpha1.DriverSpec {
		d.NodeSelector = sel
		return d
	}
	tests := []struct {
		name      string
		spec      v1alpha1.DriverSpec
		nodes     []corev1.Node
		tolerated int
		mention   string
	}{
		{name: "example profile runs on every node", spec: example, nodes: []corev1.Node{node("a", plain), node("b", nil)}, tolerated: 2},
		{name: "a selector that matches nothing", spec: withSelector(example, map[string]string{"pool": "z"}), nodes: []corev1.Node{node("a", plain)},
			mention: "no node matches the plugin's node selector {pool=z} (1 node in the cluster)"},
		{name: "nvidia-gpu: NFD or GPU-operator labels", spec: nvidia, nodes: []corev1.Node{node("a", gpu), node("b", nfd), node("c", plain)}, tolerated: 2},
		{name: "nvidia-gpu: the selector picks only nodes without GPU labels", spec: withSelector(nvidia, map[string]string{"pool": "a"}), nodes: []corev1.Node{node("c", plain), node("d", nfd)},
			mention: "none of the 1 node the node selector {pool=a} picks satisfies the profile's required node affinity: feature.node.kubernetes.io/pci-10de.present In (true) or " +
				"feature.node.kubernetes.io/pci-0302_10de.present In (true) or feature.node.kubernetes.io/pci-0300_10de.present In (true) or " +
				"feature.node.kubernetes.io/cpu-model.vendor_id In (NVIDIA) or nvidia.com/gpu.present In (true)"},
		{name: "an untolerated taint", spec: example, nodes: []corev1.Node{node("a", plain, corev1.Taint{Key: "dedicated", Value: "ml", Effect: corev1.TaintEffectNoSchedule})},
			mention: "dedicated=ml:NoSchedule"},
		{name: "a cordoned node is no obstacle for a daemon", spec: example, nodes: []corev1.Node{node("a", plain, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule})}, tolerated: 1},
		{name: "no nodes", spec: example, mention: "the cluster has no nodes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fit := FitNodes(pluginTemplate(t, tc.spec), tc.nodes)
			if fit.Tolerated != tc.tolerated {
				t.Errorf("%d nodes fit, want %d: %+v", fit.Tolerated, tc.tolerated, fit)
			}
			if tc.mention != "" && !strings.Contains(fit.Message(), tc.mention) {
				t.Errorf("message %q lacks %q", fit.Message(), tc.mention)
			}
		})
	}
}
