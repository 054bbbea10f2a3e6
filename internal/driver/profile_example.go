package driver

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// ExampleImage is the dra-example-driver release the example profile
// deploys when the spec names no image.
const ExampleImage = "registry.k8s.io/dra-example-driver/dra-example-driver:v0.2.0"

// exampleProfile deploys the kubernetes-sigs dra-example-driver, whose
// kubelet plugin publishes simulated GPUs. It is the profile for trying
// DRA and for tests: it needs no hardware.
type exampleProfile struct{}

func (exampleProfile) Name() v1alpha1.DriverProfile { return v1alpha1.DriverProfileExample }

func (exampleProfile) Defaults(driver string) Defaults {
	return Defaults{
		Image:            ExampleImage,
		DriverNames:      []string{driver},
		PluginContainers: []string{"plugin"},
		DeviceClasses:    []v1alpha1.DeviceClassSpec{{Name: driver}},
	}
}

// Validate accepts every spec: the plugin takes its driver name from
// DRIVER_NAME, so any name works.
func (exampleProfile) Validate(*v1alpha1.DriverSpec, *field.Path) *field.Error { return nil }

func (exampleProfile) Requirements(spec *v1alpha1.DriverSpec) []Requirement {
	return baseRequirements(spec)
}
