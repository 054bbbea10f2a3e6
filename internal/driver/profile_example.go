package driver

import (
	"fmt"

	"github.com/blang/semver/v4"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/stack"
)

// ExampleImage is the plugin image the example profile deploys when the
// spec names none: drastack's own kubelet plugin
// (cmd/drastack-example-plugin, `make image`), which publishes simulated
// GPUs with MIG-like partitions and proves to each container which devices
// it got.
const ExampleImage = "ghcr.io/drastack/drastack-example-plugin:v0.1.0"

// The kubernetes-sigs dra-example-driver runs under the same manifest
// (command and environment are the interface both images honour), but its
// releases before UpstreamExampleDriverNameSince ignore DRIVER_NAME and
// always publish as UpstreamExampleDriverName.
const (
	UpstreamExampleRepository      = "registry.k8s.io/dra-example-driver/dra-example-driver"
	UpstreamExampleDriverName      = "gpu.example.com"
	UpstreamExampleDriverNameSince = "v0.3.0"
)

// exampleProfile deploys a kubelet plugin that publishes simulated GPUs
// and needs no hardware: the profile for trying DRA and for tests.
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

// Validate accepts any driver name, since the plugin takes its name from
// DRIVER_NAME, except with a dra-example-driver release too old to read
// it: that one publishes gpu.example.com whatever the spec says, so the
// node-restriction policy would deny its slices and the DeviceClass would
// match nothing.
func (exampleProfile) Validate(spec *v1alpha1.DriverSpec, path *field.Path) *field.Error {
	image := spec.Image
	if image == "" {
		image = ExampleImage
	}
	if spec.Name == UpstreamExampleDriverName {
		return nil
	}
	if old, version := upstreamBeforeDriverName(image); old {
		return field.Invalid(path.Child("name"), spec.Name, fmt.Sprintf(
			"dra-example-driver %s publishes only as %s (DRIVER_NAME is read from %s on): name the driver %s or use %s:%s or newer",
			version, UpstreamExampleDriverName, UpstreamExampleDriverNameSince, UpstreamExampleDriverName, UpstreamExampleRepository, UpstreamExampleDriverNameSince))
	}
	return nil
}

// upstreamBeforeDriverName reports whether image is a dra-example-driver
// release older than UpstreamExampleDriverNameSince, and its tag. A tag
// that is not a version (latest) or a digest alone cannot be judged and
// is accepted.
func upstreamBeforeDriverName(image string) (bool, string) {
	img, err := stack.ParseImage(image)
	if err != nil || img.Repository != UpstreamExampleRepository || img.Tag == "" {
		return false, ""
	}
	v, err := semver.ParseTolerant(img.Tag)
	if err != nil {
		return false, ""
	}
	return v.LT(semver.MustParse(UpstreamExampleDriverNameSince[1:])), img.Tag
}

// Requirements are the base ones: drastack's plugin publishes partitions
// on shared counters where the cluster serves them and whole GPUs where it
// does not.
func (exampleProfile) Requirements(spec *v1alpha1.DriverSpec) []Requirement {
	return baseRequirements(spec)
}
