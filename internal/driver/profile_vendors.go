package driver

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// Releases and driver names of the vendor profiles that take no typed
// options. Each profile deploys its vendor's release as the vendor's own
// chart or manifests do; fidelity_*_test.go holds the profile to them.
const (
	// AMDRelease is the release of ROCm/k8s-gpu-dra-driver the amd-gpu
	// profile deploys (its chart helm-charts-k8s).
	AMDRelease = "v1.0.0"
	// AMDImage is that release's image.
	AMDImage = "docker.io/rocm/k8s-gpu-dra-driver:" + AMDRelease
	// AMDDriver is the name AMD's plugin publishes under.
	AMDDriver = "gpu.amd.com"

	// IntelRelease is the release (tag gpu-v0.11.0) of
	// intel/intel-resource-drivers-for-kubernetes the intel-gpu profile
	// deploys (its chart charts/intel-gpu-resource-driver).
	IntelRelease = "v0.11.0"
	// IntelImage is that release's GPU driver image.
	IntelImage = "ghcr.io/intel/intel-resource-drivers-for-kubernetes/intel-gpu-resource-driver:" + IntelRelease
	// IntelDriver is the name Intel's GPU plugin publishes under.
	IntelDriver = "gpu.intel.com"

	// DRANETRelease is the release of kubernetes-sigs/dranet the dranet
	// profile deploys (its install.yaml and chart deployments/helm/dranet).
	DRANETRelease = "v1.4.0"
	// DRANETImage is that release's image.
	DRANETImage = "registry.k8s.io/networking/dranet:" + DRANETRelease
	// DRANETDriver is the name dranet publishes under.
	DRANETDriver = "dra.net"
)

// amdProfile deploys AMD's DRA driver for GPUs: one plugin per AMD GPU
// node, whole GPUs and compute partitions as plain devices (no shared
// counters), so it needs only resource.k8s.io/v1.
type amdProfile struct{}

func (amdProfile) Name() v1alpha1.DriverProfile { return v1alpha1.DriverProfileAMDGPU }

func (amdProfile) Defaults(string) Defaults {
	return Defaults{
		Image:            AMDImage,
		DriverNames:      []string{AMDDriver},
		PluginContainers: []string{"plugin"},
		// The chart's class selects every device of the driver, which the
		// class's own driver selector already does.
		DeviceClasses: []v1alpha1.DeviceClassSpec{{Name: AMDDriver}},
	}
}

func (amdProfile) Validate(spec *v1alpha1.DriverSpec, path *field.Path) *field.Error {
	return requireName(spec, path, v1alpha1.DriverProfileAMDGPU, AMDDriver)
}

func (amdProfile) Requirements(spec *v1alpha1.DriverSpec) []Requirement {
	return baseRequirements(spec)
}

// intelProfile deploys Intel's GPU resource driver. Its two classes are
// the chart's: gpu.intel.com for containers and gpu-vfio.intel.com for
// VM passthrough, which with manage-binding on (the chart's default) select
// the same devices; the plugin binds a GPU to the driver the class needs.
type intelProfile struct{}

func (intelProfile) Name() v1alpha1.DriverProfile { return v1alpha1.DriverProfileIntelGPU }

func (intelProfile) Defaults(string) Defaults {
	return Defaults{
		Image:            IntelImage,
		DriverNames:      []string{IntelDriver},
		PluginContainers: []string{"kubelet-plugin"},
		DeviceClasses:    []v1alpha1.DeviceClassSpec{{Name: IntelDriver}, {Name: "gpu-vfio.intel.com"}},
	}
}

func (intelProfile) Validate(spec *v1alpha1.DriverSpec, path *field.Path) *field.Error {
	return requireName(spec, path, v1alpha1.DriverProfileIntelGPU, IntelDriver)
}

func (intelProfile) Requirements(spec *v1alpha1.DriverSpec) []Requirement {
	return baseRequirements(spec)
}

// dranetProfile deploys dranet. Its release ships no DeviceClass (its
// documentation has users write one per network); the profile's dra.net
// class selects every interface the driver publishes, which the driver's
// default filter already limits to non-veth interfaces.
type dranetProfile struct{}

func (dranetProfile) Name() v1alpha1.DriverProfile { return v1alpha1.DriverProfileDRANET }

func (dranetProfile) Defaults(string) Defaults {
	return Defaults{
		Image:            DRANETImage,
		DriverNames:      []string{DRANETDriver},
		PluginContainers: []string{"dranet"},
		DeviceClasses:    []v1alpha1.DeviceClassSpec{{Name: DRANETDriver}},
	}
}

func (dranetProfile) Validate(spec *v1alpha1.DriverSpec, path *field.Path) *field.Error {
	return requireName(spec, path, v1alpha1.DriverProfileDRANET, DRANETDriver)
}

func (dranetProfile) Requirements(spec *v1alpha1.DriverSpec) []Requirement {
	return baseRequirements(spec)
}
