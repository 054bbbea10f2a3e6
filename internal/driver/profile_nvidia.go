package driver

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// NVIDIA driver names, release and image. The plugins publish under fixed
// names, and the compute-domain controller refers to the compute-domain
// DeviceClasses by name, so neither can be chosen by the spec.
const (
	NVIDIAGPUDriver           = "gpu.nvidia.com"
	NVIDIAComputeDomainDriver = "compute-domain.nvidia.com"
	// NVIDIARelease is the release of kubernetes-sigs/dra-driver-nvidia-gpu
	// (formerly NVIDIA/k8s-dra-driver-gpu) the profile deploys; its chart
	// deployments/helm/dra-driver-nvidia-gpu is what the fidelity test
	// (fidelity_nvidia_test.go) holds the profile to.
	NVIDIARelease = "v0.4.1"
	// NVIDIAImage is that release's image, where the project publishes it
	// since it moved to kubernetes-sigs.
	NVIDIAImage = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:" + NVIDIARelease
	// NVIDIADriverRoot is where the NVIDIA GPU driver is by default: on the
	// host itself.
	NVIDIADriverRoot = "/"
	// NVIDIAGPUOperatorDriverRoot is where the NVIDIA GPU Operator's driver
	// container installs the driver.
	NVIDIAGPUOperatorDriverRoot = "/run/nvidia/driver"
	// NVIDIADevicePluginResource is the extended resource NVIDIA's device
	// plugin serves GPUs as.
	NVIDIADevicePluginResource = "nvidia.com/gpu"
)

// nvidiaProfile deploys NVIDIA's DRA driver for GPUs as its chart does at
// NVIDIARelease, with spec.drivers[].nvidia for what the chart makes
// configurable (profile_nvidia_options.go).
//
// Requirements, decided from what the driver does: GPUs and statically
// configured MIG devices are plain devices, and compute domains are IMEX
// channel devices per node plus a controller, so neither needs
// partitionable devices or list-valued attributes; the DynamicMIG feature
// gate makes the GPU plugin publish shared counters, so with it the
// profile needs partitionableDevices.
type nvidiaProfile struct{}

func (nvidiaProfile) Name() v1alpha1.DriverProfile { return v1alpha1.DriverProfileNVIDIAGPU }

// Defaults are those of a spec without nvidia options: both plugins.
func (p nvidiaProfile) Defaults(driver string) Defaults {
	return p.defaultsFor(&v1alpha1.DriverSpec{Name: driver})
}

// defaultsFor follows nvidia.plugins: the plugin containers and the
// DeviceClasses of the plugins that run. The driver names stay both, so
// that removal and status find every slice either plugin ever published.
func (nvidiaProfile) defaultsFor(spec *v1alpha1.DriverSpec) Defaults {
	gpu := fmt.Sprintf("device.attributes[%q]", NVIDIAGPUDriver)
	cd := fmt.Sprintf("device.attributes[%q]", NVIDIAComputeDomainDriver)
	d := Defaults{Image: NVIDIAImage, DriverNames: []string{NVIDIAGPUDriver, NVIDIAComputeDomainDriver}}
	plugins := nvidiaPlugins(spec)
	if slices.Contains(plugins, v1alpha1.NVIDIAPluginComputeDomains) {
		d.PluginContainers = append(d.PluginContainers, nvidiaCDContainer)
		d.DeviceClasses = append(d.DeviceClasses,
			v1alpha1.DeviceClassSpec{Name: "compute-domain-daemon.nvidia.com", Selectors: celSelectors(fmt.Sprintf("device.driver == %q && %s.type == \"daemon\"", NVIDIAComputeDomainDriver, cd))},
			v1alpha1.DeviceClassSpec{Name: "compute-domain-default-channel.nvidia.com", Selectors: celSelectors(fmt.Sprintf("device.driver == %q && %s.type == \"channel\" && %s.id == 0", NVIDIAComputeDomainDriver, cd, cd))},
		)
	}
	if slices.Contains(plugins, v1alpha1.NVIDIAPluginGPUs) {
		d.PluginContainers = append(d.PluginContainers, nvidiaGPUContainer)
		d.DeviceClasses = append(d.DeviceClasses,
			v1alpha1.DeviceClassSpec{
				Name:      "gpu.nvidia.com",
				Selectors: celSelectors(fmt.Sprintf("device.driver == %q && %s.type == \"gpu\"", NVIDIAGPUDriver, gpu)),
				// Pods asking for nvidia.com/gpu get a whole GPU through
				// DRA on nodes without the device plugin (KEP-5004).
				ExtendedResourceName: ptr.To(NVIDIADevicePluginResource),
			},
			v1alpha1.DeviceClassSpec{Name: "mig.nvidia.com", Selectors: celSelectors(fmt.Sprintf("device.driver == %q && %s.type == \"mig\"", NVIDIAGPUDriver, gpu))},
			v1alpha1.DeviceClassSpec{Name: "vfio.gpu.nvidia.com", Selectors: celSelectors(fmt.Sprintf("device.driver == %q && %s.type == \"vfio\"", NVIDIAGPUDriver, gpu))},
		)
	}
	return d
}

// Validate insists on the driver name the plugin really publishes under
// and checks the nvidia options.
func (nvidiaProfile) Validate(spec *v1alpha1.DriverSpec, path *field.Path) *field.Error {
	if err := requireName(spec, path, v1alpha1.DriverProfileNVIDIAGPU, NVIDIAGPUDriver); err != nil {
		return err
	}
	return validateNVIDIAOptions(spec.NVIDIA, path.Child("nvidia"))
}

func (nvidiaProfile) Requirements(spec *v1alpha1.DriverSpec) []Requirement {
	reqs := baseRequirements(spec)
	if nvidiaGateEnabled(spec.NVIDIA, "DynamicMIG") && slices.Contains(nvidiaPlugins(spec), v1alpha1.NVIDIAPluginGPUs) {
		reqs = append(reqs, Requirement{Feature: "partitionableDevices", Why: "nvidia feature gate DynamicMIG: the GPU plugin publishes shared counters"})
	}
	return reqs
}

// nodeResources: the GPU plugin must know where NVIDIA's device plugin
// serves GPUs, unless the spec allows both or runs no GPU plugin.
func (nvidiaProfile) nodeResources(spec *v1alpha1.DriverSpec) []string {
	if !slices.Contains(nvidiaPlugins(spec), v1alpha1.NVIDIAPluginGPUs) || nvidiaDevicePluginPolicy(spec) == v1alpha1.DevicePluginNodesAllow {
		return nil
	}
	return []string{NVIDIADevicePluginResource}
}

// refuse keeps the plugin pod off nodes where NVIDIA's device plugin
// serves nvidia.com/gpu: both would hand out the same GPUs (NVIDIA's chart
// refuses to render the GPU plugin at all unless told otherwise). The
// compute-domains plugin shares the pod, so it stays off those nodes too.
func (p nvidiaProfile) refuse(spec *v1alpha1.DriverSpec, nodes []NodeFacts) *Refusal {
	if len(p.nodeResources(spec)) == 0 {
		return nil
	}
	r := &Refusal{
		Why: "NVIDIA's device plugin serves " + NVIDIADevicePluginResource + " there, and the GPU plugin would hand out the same GPUs",
		Remedy: "stop the device plugin on those nodes, run only ComputeDomains (nvidia.plugins: [ComputeDomains]), " +
			"or set nvidia.devicePluginNodes: Allow where the two serve different GPUs",
	}
	if slices.Contains(nvidiaPlugins(spec), v1alpha1.NVIDIAPluginComputeDomains) {
		r.Why += " (the ComputeDomains plugin, in the same pod, stays off them too)"
	}
	for _, n := range nodes {
		if slices.Contains(n.Resources, NVIDIADevicePluginResource) {
			r.Nodes = append(r.Nodes, n.Name)
		}
	}
	return r
}

// Names of the plugin containers in profiles/nvidia-gpu/0500.
const (
	nvidiaGPUContainer  = "gpus"
	nvidiaCDContainer   = "compute-domains"
	nvidiaInitContainer = "init-container"
)

// nvidiaPlugins are the plugins a spec runs: nvidia.plugins, else both.
func nvidiaPlugins(spec *v1alpha1.DriverSpec) []v1alpha1.NVIDIAPlugin {
	if spec.NVIDIA == nil || len(spec.NVIDIA.Plugins) == 0 {
		return []v1alpha1.NVIDIAPlugin{v1alpha1.NVIDIAPluginGPUs, v1alpha1.NVIDIAPluginComputeDomains}
	}
	return spec.NVIDIA.Plugins
}

// nvidiaDevicePluginPolicy is nvidia.devicePluginNodes, Refuse by default.
func nvidiaDevicePluginPolicy(spec *v1alpha1.DriverSpec) v1alpha1.DevicePluginNodePolicy {
	if spec.NVIDIA == nil || spec.NVIDIA.DevicePluginNodes == "" {
		return v1alpha1.DevicePluginNodesRefuse
	}
	return spec.NVIDIA.DevicePluginNodes
}

// nvidiaDriverRoot is nvidia.driverRoot, / by default.
func nvidiaDriverRoot(o *v1alpha1.NVIDIAOptions) string {
	if o == nil || o.DriverRoot == "" {
		return NVIDIADriverRoot
	}
	return o.DriverRoot
}
