package driver

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// NVIDIA driver names and image. The plugins publish under fixed names, and
// the compute-domain controller refers to the compute-domain DeviceClasses
// by name, so neither can be chosen by the spec.
const (
	NVIDIAGPUDriver           = "gpu.nvidia.com"
	NVIDIAComputeDomainDriver = "compute-domain.nvidia.com"
	NVIDIAImage               = "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.0"
)

// nvidiaProfile deploys the NVIDIA DRA driver for GPUs.
//
// Requirements, decided from what the driver does: GPUs and statically
// configured MIG devices are plain devices, and compute domains are IMEX
// channel devices per node plus a controller, so none of them needs
// partitionable devices (shared counters) or list-valued attributes; the
// profile needs only resource.k8s.io/v1. A driver configuration that makes
// the plugin publish counters can say so in spec.requiredFeatures.
type nvidiaProfile struct{}

func (nvidiaProfile) Name() v1alpha1.DriverProfile { return v1alpha1.DriverProfileNVIDIAGPU }

func (nvidiaProfile) Defaults(string) Defaults {
	gpu := fmt.Sprintf("device.attributes[%q].type", NVIDIAGPUDriver)
	cd := fmt.Sprintf("device.attributes[%q]", NVIDIAComputeDomainDriver)
	return Defaults{
		Image:            NVIDIAImage,
		DriverNames:      []string{NVIDIAGPUDriver, NVIDIAComputeDomainDriver},
		PluginContainers: []string{"gpus", "compute-domains"},
		DeviceClasses: []v1alpha1.DeviceClassSpec{
			{Name: "gpu.nvidia.com", Selectors: celSelectors(fmt.Sprintf("device.driver == %q && %s == \"gpu\"", NVIDIAGPUDriver, gpu))},
			{Name: "mig.nvidia.com", Selectors: celSelectors(fmt.Sprintf("device.driver == %q && %s == \"mig\"", NVIDIAGPUDriver, gpu))},
			{Name: "compute-domain-daemon.nvidia.com", Selectors: celSelectors(fmt.Sprintf("device.driver == %q && %s.type == \"daemon\"", NVIDIAComputeDomainDriver, cd))},
			{Name: "compute-domain-default-channel.nvidia.com", Selectors: celSelectors(fmt.Sprintf("device.driver == %q && %s.type == \"channel\" && %s.id == 0", NVIDIAComputeDomainDriver, cd, cd))},
		},
	}
}

// Validate insists on the driver name the plugin really publishes under;
// any other name would install a driver whose slices the status and the
// removal could never find.
func (nvidiaProfile) Validate(spec *v1alpha1.DriverSpec, path *field.Path) *field.Error {
	if spec.Name != NVIDIAGPUDriver {
		return field.Invalid(path.Child("name"), spec.Name, fmt.Sprintf("the nvidia-gpu profile publishes as %s (and %s); name the driver %s", NVIDIAGPUDriver, NVIDIAComputeDomainDriver, NVIDIAGPUDriver))
	}
	return nil
}

func (nvidiaProfile) Requirements(spec *v1alpha1.DriverSpec) []Requirement {
	return baseRequirements(spec)
}
