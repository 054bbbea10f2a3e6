package driver

import (
	"embed"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// profileFiles holds every profile's kustomize base; profiles/common is the
// part they share.
//
//go:embed profiles
var profileFiles embed.FS

// profilesRoot is the folder of profileFiles that holds the bases.
const profilesRoot = "profiles"

// commonDir is the shared base every profile's kustomization includes.
const commonDir = "common"

// Profile is one built-in way of deploying a DRA driver. Its manifests are
// the kustomize base in profiles/<Name>; the methods say what the manifests
// cannot: defaults that depend on the driver, what a spec must satisfy,
// and what the cluster must support.
type Profile interface {
	// Name is the profile's value in DRAStack spec.drivers[].profile and
	// its folder under profiles/.
	Name() v1alpha1.DriverProfile
	// Defaults are the values used where the spec is silent.
	Defaults(driver string) Defaults
	// Validate reports what in the spec this profile cannot deploy; path
	// is the spec entry's.
	Validate(spec *v1alpha1.DriverSpec, path *field.Path) *field.Error
	// Requirements are the cluster capabilities the driver needs.
	Requirements(spec *v1alpha1.DriverSpec) []Requirement
}

// Defaults are a profile's values for one driver.
type Defaults struct {
	// Image is the kubelet-plugin (and controller) image; empty when the
	// spec must name one.
	Image string
	// DriverNames are the DRA driver names the plugins publish
	// ResourceSlices under. The first is the spec's name.
	DriverNames []string
	// PluginContainers are the kubelet-plugin containers that the spec's
	// args, env, resources and mounts apply to.
	PluginContainers []string
	// DeviceClasses are created when the spec lists none.
	DeviceClasses []v1alpha1.DeviceClassSpec
}

// profiles are the built-in profiles by name.
var profiles = map[v1alpha1.DriverProfile]Profile{
	v1alpha1.DriverProfileExample:   exampleProfile{},
	v1alpha1.DriverProfileNVIDIAGPU: nvidiaProfile{},
	v1alpha1.DriverProfileCustom:    customProfile{},
}

// DefaultProfile is used when a spec names none, as the CRD defaults it.
const DefaultProfile = v1alpha1.DriverProfileExample

// Lookup returns the profile of a spec value; empty means DefaultProfile.
func Lookup(name v1alpha1.DriverProfile) (Profile, error) {
	if name == "" {
		name = DefaultProfile
	}
	p, ok := profiles[name]
	if !ok {
		return nil, fmt.Errorf("unknown driver profile %q (known: %v)", name, ProfileNames())
	}
	return p, nil
}

// ProfileNames lists the built-in profiles, sorted.
func ProfileNames() []v1alpha1.DriverProfile {
	names := make([]v1alpha1.DriverProfile, 0, len(profiles))
	for n := range profiles {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// DriverNames returns the DRA driver names a spec's plugins publish under,
// or just the spec's name when its profile is unknown: removal and status
// must still find the driver's slices and claims.
func DriverNames(spec *v1alpha1.DriverSpec) []string {
	p, err := Lookup(spec.Profile)
	if err != nil {
		return []string{spec.Name}
	}
	return p.Defaults(spec.Name).DriverNames
}

// driverSelector is the CEL selector that keeps a DeviceClass to the
// devices of the given drivers.
func driverSelector(names []string) string {
	if len(names) == 1 {
		return fmt.Sprintf("device.driver == %q", names[0])
	}
	quoted := ""
	for i, n := range names {
		if i > 0 {
			quoted += ", "
		}
		quoted += fmt.Sprintf("%q", n)
	}
	return "device.driver in [" + quoted + "]"
}
