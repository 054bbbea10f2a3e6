package driver

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// nvidiaRender renders the nvidia-gpu profile with options and nodes.
func nvidiaRender(t *testing.T, o *v1alpha1.NVIDIAOptions, nodes ...NodeFacts) *Rendered {
	t.Helper()
	r, err := Render(Input{Stack: "default", Namespace: "drastack-drivers", Nodes: nodes,
		Driver: v1alpha1.DriverSpec{Name: NVIDIAGPUDriver, Profile: v1alpha1.DriverProfileNVIDIAGPU, NVIDIA: o}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// typed finds a rendered object by kind and name and decodes it into out.
func typed(t *testing.T, r *Rendered, kind, name string, out runtime.Object) bool {
	t.Helper()
	for _, u := range r.Objects {
		if u.GetKind() == kind && u.GetName() == name {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
				t.Fatal(err)
			}
			return true
		}
	}
	return false
}

func envOf(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

func containerNames(cs []corev1.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// TestNVIDIAOptions is spec.drivers[].nvidia as a specification: each
// option and what it changes in the render, as NVIDIA's chart values do.
func TestNVIDIAOptions(t *testing.T) {
	pluginDS := func(t *testing.T, r *Rendered) appsv1.DaemonSet {
		var ds appsv1.DaemonSet
		if !typed(t, r, "DaemonSet", "gpu-nvidia-com-kubelet-plugin", &ds) {
			t.Fatal("no plugin DaemonSet")
		}
		return ds
	}
	t.Run("defaults: both plugins, the driver on the host, no FEATURE_GATES", func(t *testing.T) {
		r := nvidiaRender(t, nil)
		ds := pluginDS(t, r)
		pod := ds.Spec.Template.Spec
		if got := containerNames(pod.Containers); !slices.Equal(got, []string{"compute-domains", "gpus"}) {
			t.Errorf("containers %v", got)
		}
		for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
			if v, _ := envOf(c, "NVIDIA_DRIVER_ROOT"); v != "/" {
				t.Errorf("%s: NVIDIA_DRIVER_ROOT %q", c.Name, v)
			}
			if _, ok := envOf(c, "FEATURE_GATES"); ok {
				t.Errorf("%s has FEATURE_GATES though the spec sets no gate", c.Name)
			}
		}
		if m := pod.InitContainers[0].VolumeMounts[0]; !m.ReadOnly || m.MountPropagation != nil {
			t.Errorf("driver on the host: the init container reads / read-only without propagation, got %+v", m)
		}
		if len(r.Controllers) != 1 || len(r.CRDs) != 2 || len(r.DeviceClasses) != 5 {
			t.Errorf("controllers %v CRDs %v classes %v", r.Controllers, r.CRDs, r.DeviceClasses)
		}
	})
	t.Run("driverRoot: the GPU Operator's driver container", func(t *testing.T) {
		pod := pluginDS(t, nvidiaRender(t, &v1alpha1.NVIDIAOptions{DriverRoot: NVIDIAGPUOperatorDriverRoot})).Spec.Template.Spec
		paths := map[string]string{}
		for _, v := range pod.Volumes {
			if v.HostPath != nil {
				paths[v.Name] = v.HostPath.Path
			}
		}
		if paths["driver-root"] != "/run/nvidia/driver" || paths["driver-root-parent"] != "/run/nvidia" {
			t.Errorf("host paths %v", paths)
		}
		for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
			if v, _ := envOf(c, "NVIDIA_DRIVER_ROOT"); v != "/run/nvidia/driver" {
				t.Errorf("%s: NVIDIA_DRIVER_ROOT %q", c.Name, v)
			}
		}
		m := pod.InitContainers[0].VolumeMounts[0]
		if m.ReadOnly || m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer {
			t.Errorf("a driver mounted later by another pod is seen only with HostToContainer: %+v", m)
		}
	})
	t.Run("plugins: ComputeDomains only, as beside the device plugin", func(t *testing.T) {
		r := nvidiaRender(t, &v1alpha1.NVIDIAOptions{Plugins: []v1alpha1.NVIDIAPlugin{v1alpha1.NVIDIAPluginComputeDomains}},
			NodeFacts{Name: "gpu-1", Labels: map[string]string{"nvidia.com/gpu.present": "true"}, Resources: []string{NVIDIADevicePluginResource}})
		if got := containerNames(pluginDS(t, r).Spec.Template.Spec.Containers); !slices.Equal(got, []string{"compute-domains"}) {
			t.Errorf("containers %v", got)
		}
		if !slices.Equal(r.DeviceClasses, []string{"compute-domain-daemon.nvidia.com", "compute-domain-default-channel.nvidia.com"}) || len(r.Controllers) != 1 {
			t.Errorf("classes %v controllers %v", r.DeviceClasses, r.Controllers)
		}
		if r.Refusal != nil {
			t.Errorf("without the GPU plugin nothing collides with the device plugin, yet refused %+v", r.Refusal)
		}
	})
	t.Run("plugins: GPUs only: no controller, no compute-domain classes", func(t *testing.T) {
		r := nvidiaRender(t, &v1alpha1.NVIDIAOptions{Plugins: []v1alpha1.NVIDIAPlugin{v1alpha1.NVIDIAPluginGPUs}})
		if got := containerNames(pluginDS(t, r).Spec.Template.Spec.Containers); !slices.Equal(got, []string{"gpus"}) {
			t.Errorf("containers %v", got)
		}
		if len(r.Controllers) != 0 || slices.Contains(r.DeviceClasses, "compute-domain-daemon.nvidia.com") {
			t.Errorf("controllers %v classes %v", r.Controllers, r.DeviceClasses)
		}
		var d appsv1.Deployment
		if typed(t, r, "Deployment", "gpu-nvidia-com-controller", &d) {
			t.Error("the ComputeDomain controller is rendered without ComputeDomains")
		}
	})
	t.Run("featureGates: FEATURE_GATES on every component, MPS and passthrough additions", func(t *testing.T) {
		r := nvidiaRender(t, &v1alpha1.NVIDIAOptions{FeatureGates: map[string]bool{"PassthroughSupport": true, "MPSSupport": true}})
		pod := pluginDS(t, r).Spec.Template.Spec
		const want = "MPSSupport=true,PassthroughSupport=true,"
		for _, c := range pod.Containers {
			if v, _ := envOf(c, "FEATURE_GATES"); v != want {
				t.Errorf("%s: FEATURE_GATES %q, want %q", c.Name, v, want)
			}
		}
		var d appsv1.Deployment
		typed(t, r, "Deployment", "gpu-nvidia-com-controller", &d)
		if v, _ := envOf(d.Spec.Template.Spec.Containers[0], "FEATURE_GATES"); v != want {
			t.Errorf("controller: FEATURE_GATES %q", v)
		}
		gpus := pod.Containers[slices.IndexFunc(pod.Containers, func(c corev1.Container) bool { return c.Name == "gpus" })]
		var mounts []string
		for _, m := range gpus.VolumeMounts {
			mounts = append(mounts, m.Name)
		}
		for _, want := range []string{"host-root", "sysfs", "procfs"} {
			if !slices.Contains(mounts, want) {
				t.Errorf("PassthroughSupport: gpus lacks mount %s (%v)", want, mounts)
			}
		}
		var role rbacv1.Role
		typed(t, r, "Role", "gpu-nvidia-com-kubelet-plugin", &role)
		if !slices.ContainsFunc(role.Rules, func(p rbacv1.PolicyRule) bool { return slices.Contains(p.Resources, "deployments") }) {
			t.Errorf("MPSSupport: the plugin may not manage the MPS control daemon: %v", role.Rules)
		}
	})
	t.Run("featureGates: DynamicMIG needs partitionable devices", func(t *testing.T) {
		r := nvidiaRender(t, &v1alpha1.NVIDIAOptions{FeatureGates: map[string]bool{"DynamicMIG": true}})
		if !slices.ContainsFunc(r.Requirements, func(q Requirement) bool { return q.Feature == "partitionableDevices" }) {
			t.Errorf("requirements %v", r.Requirements)
		}
		if r := nvidiaRender(t, nil); slices.ContainsFunc(r.Requirements, func(q Requirement) bool { return q.Feature == "partitionableDevices" }) {
			t.Errorf("without DynamicMIG: requirements %v", r.Requirements)
		}
	})
	t.Run("devicePluginNodes: Refuse excludes the nodes the plugin would run on; Allow does not ask", func(t *testing.T) {
		gpuNode := NodeFacts{Name: "gpu-1", Labels: map[string]string{"feature.node.kubernetes.io/pci-10de.present": "true"}, Resources: []string{NVIDIADevicePluginResource}}
		r := nvidiaRender(t, nil, gpuNode)
		if r.Refusal == nil || !slices.Equal(r.Refusal.Nodes, []string{"gpu-1"}) {
			t.Fatalf("refusal %+v", r.Refusal)
		}
		for _, term := range pluginDS(t, r).Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			if !slices.ContainsFunc(term.MatchFields, func(f corev1.NodeSelectorRequirement) bool {
				return f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpNotIn && slices.Equal(f.Values, []string{"gpu-1"})
			}) {
				t.Errorf("a node affinity term still admits gpu-1: %+v", term)
			}
		}
		refused := pluginDS(t, r)
		fit := FitNodes(&refused.Spec.Template.Spec, []corev1.Node{{ObjectMeta: metaWithLabels("gpu-1", gpuNode.Labels)}})
		if fit.Tolerated != 0 {
			t.Errorf("the DaemonSet still targets the refused node: %+v", fit)
		}
		allow := &v1alpha1.NVIDIAOptions{DevicePluginNodes: v1alpha1.DevicePluginNodesAllow}
		if got := NodeResources(&v1alpha1.DriverSpec{Name: NVIDIAGPUDriver, Profile: v1alpha1.DriverProfileNVIDIAGPU, NVIDIA: allow}); got != nil {
			t.Errorf("Allow asks about %v", got)
		}
		if r := nvidiaRender(t, allow, gpuNode); r.Refusal != nil {
			t.Errorf("Allow refused %+v", r.Refusal)
		}
		if got := NodeResources(&v1alpha1.DriverSpec{Name: NVIDIAGPUDriver, Profile: v1alpha1.DriverProfileNVIDIAGPU}); !slices.Equal(got, []string{NVIDIADevicePluginResource}) {
			t.Errorf("by default the profile asks about %v", got)
		}
	})
}
