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

// specDefaulter is a profile whose defaults depend on more of the spec
// than the driver name (nvidia-gpu: which plugins run). Render uses it
// instead of Defaults where a profile has it.
type specDefaulter interface {
	defaultsFor(spec *v1alpha1.DriverSpec) Defaults
}

// objectTuner is a profile with typed options: it changes (or drops) the
// objects of its base before the DRAStack's generic fields are set and
// before kustomize applies the name prefix, namespace, labels and patches,
// so the user's env and patches still win over what it sets.
type objectTuner interface {
	tune(spec *v1alpha1.DriverSpec, obj *baseObject) (keep bool, err error)
}

// nodeRefuser is a profile that keeps its kubelet plugin off some nodes
// for what runs there (nvidia-gpu: NVIDIA's device plugin). Resources are
// the extended resources whose capacity on a node it needs to know (see
// NodeFacts); refuse returns the refusals for the nodes given.
type nodeRefuser interface {
	nodeResources(spec *v1alpha1.DriverSpec) []string
	refuse(spec *v1alpha1.DriverSpec, nodes []NodeFacts) *Refusal
}

// profiles are the built-in profiles by name.
var profiles = map[v1alpha1.DriverProfile]Profile{
	v1alpha1.DriverProfileExample:   exampleProfile{},
	v1alpha1.DriverProfileNVIDIAGPU: nvidiaProfile{},
	v1alpha1.DriverProfileAMDGPU:    amdProfile{},
	v1alpha1.DriverProfileIntelGPU:  intelProfile{},
	v1alpha1.DriverProfileDRANET:    dranetProfile{},
	v1alpha1.DriverProfileCustom:    customProfile{},
}

// defaultsOf are a profile's defaults for a spec.
func defaultsOf(p Profile, spec *v1alpha1.DriverSpec) Defaults {
	if d, ok := p.(specDefaulter); ok {
		return d.defaultsFor(spec)
	}
	return p.Defaults(spec.Name)
}

// NodeResources are the extended resources whose capacity on each node the
// render of a spec depends on (see Input.Nodes); nil for most profiles.
func NodeResources(spec *v1alpha1.DriverSpec) []string {
	p, err := Lookup(spec.Profile)
	if err != nil {
		return nil
	}
	if r, ok := p.(nodeRefuser); ok {
		return r.nodeResources(spec)
	}
	return nil
}

// WatchedNodeResources are the extended resources any profile may ask
// about (NodeResources): a change of a node's capacity for one of them can
// change a render.
func WatchedNodeResources() []string {
	var out []string
	for _, name := range ProfileNames() {
		if r, ok := profiles[name].(nodeRefuser); ok {
			for _, res := range r.nodeResources(&v1alpha1.DriverSpec{Profile: name}) {
				if !slices.Contains(out, res) {
					out = append(out, res)
				}
			}
		}
	}
	return out
}

// requireName is the Validate of a profile whose plugin publishes under a
// fixed driver name: any other name would install a driver whose slices
// the status and the removal could never find, and DeviceClasses that
// match nothing.
func requireName(spec *v1alpha1.DriverSpec, path *field.Path, profile v1alpha1.DriverProfile, want string) *field.Error {
	if spec.Name != want {
		return field.Invalid(path.Child("name"), spec.Name, fmt.Sprintf("the %s profile's plugin publishes as %s; name the driver %s", profile, want, want))
	}
	return nil
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
	return defaultsOf(p, spec).DriverNames
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
