package driver

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// customProfile deploys any kubelet plugin from the spec's image, args,
// env and mounts, with the same namespace, identity, permissions and
// admission policy as the built-in drivers.
type customProfile struct{}

func (customProfile) Name() v1alpha1.DriverProfile { return v1alpha1.DriverProfileCustom }

func (customProfile) Defaults(driver string) Defaults {
	return Defaults{
		DriverNames:      []string{driver},
		PluginContainers: []string{"plugin"},
		DeviceClasses:    []v1alpha1.DeviceClassSpec{{Name: driver}},
	}
}

// Validate requires an image: there is no default for an unknown driver.
func (customProfile) Validate(spec *v1alpha1.DriverSpec, path *field.Path) *field.Error {
	if spec.Image == "" {
		return field.Required(path.Child("image"), "image is required with the custom profile")
	}
	return nil
}

func (customProfile) Requirements(spec *v1alpha1.DriverSpec) []Requirement {
	return baseRequirements(spec)
}
