package driver

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// TestExampleProfileDriverNames: the example profile runs drastack's
// plugin under any name, and the kubernetes-sigs dra-example-driver under
// any name from the release that reads DRIVER_NAME on; an older release
// only under the one name it publishes as (issue 24).
func TestExampleProfileDriverNames(t *testing.T) {
	up := UpstreamExampleRepository
	tests := []struct {
		name, driver, image string
		// want is "" when the spec is accepted, else part of the reason.
		want string
	}{
		{"default image, any name", "gpu.acme.io", "", ""},
		{"drastack's plugin at another tag, any name", "gpu.acme.io", "ghcr.io/drastack/drastack-example-plugin:v0.2.0", ""},
		{"upstream v0.2.0 as gpu.example.com", "gpu.example.com", up + ":v0.2.0", ""},
		{"upstream v0.2.0 under another name", "gpu.acme.io", up + ":v0.2.0", "dra-example-driver v0.2.0 publishes only as gpu.example.com"},
		{"upstream v0.2.1 under another name", "gpu.acme.io", up + ":v0.2.1", "DRIVER_NAME is read from v0.3.0 on"},
		{"upstream v0.1.0 pinned by digest too", "gpu.acme.io", up + ":v0.1.0@sha256:" + strings.Repeat("a", 64), "name the driver gpu.example.com"},
		{"upstream v0.3.0 under another name", "gpu.acme.io", up + ":v0.3.0", ""},
		{"upstream v0.4.0 under another name", "gpu.acme.io", up + ":v0.4.0", ""},
		{"upstream latest cannot be judged", "gpu.acme.io", up + ":latest", ""},
		{"upstream by digest alone cannot be judged", "gpu.acme.io", up + "@sha256:" + strings.Repeat("b", 64), ""},
		{"a mirror of upstream is another image", "gpu.acme.io", "mirror.example.com/dra-example-driver/dra-example-driver:v0.2.0", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := input(func(d *v1alpha1.DriverSpec) { d.Name, d.Image = tt.driver, tt.image })
			in.Path = field.NewPath("spec", "drivers").Index(0)
			_, err := Render(in)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			ferr, ok := err.(*field.Error)
			if !ok || ferr.Field != "spec.drivers[0].name" || !strings.Contains(ferr.Error(), tt.want) {
				t.Fatalf("got %v, want an error on spec.drivers[0].name containing %q", err, tt.want)
			}
		})
	}
}

// TestExampleProfileRunsEitherImage: the one manifest calls the command
// and sets the environment both images read, the driver's name in
// DRIVER_NAME above all.
func TestExampleProfileRunsEitherImage(t *testing.T) {
	for _, image := range []string{"", UpstreamExampleRepository + ":v0.4.0"} {
		r, err := Render(input(func(d *v1alpha1.DriverSpec) { d.Name, d.Image = "gpu.acme.io", image }))
		if err != nil {
			t.Fatal(err)
		}
		want := image
		if want == "" {
			want = ExampleImage
		}
		if r.Image != want {
			t.Errorf("image %q, want %q", r.Image, want)
		}
		var ds appsv1.DaemonSet
		for _, o := range r.Objects {
			if o.GetKind() == "DaemonSet" {
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &ds); err != nil {
					t.Fatal(err)
				}
			}
		}
		c := ds.Spec.Template.Spec.Containers[0]
		if c.Image != want || len(c.Command) != 1 || c.Command[0] != "dra-example-kubeletplugin" {
			t.Errorf("image %q: container %s command %v", want, c.Image, c.Command)
		}
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
			if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
				env[e.Name] = "fieldRef:" + e.ValueFrom.FieldRef.FieldPath
			}
		}
		for k, v := range map[string]string{
			"DRIVER_NAME": "gpu.acme.io", "CDI_ROOT": "/var/run/cdi", "KUBELET_PLUGINS_DIRECTORY_PATH": "/var/lib/kubelet/plugins",
			"KUBELET_REGISTRAR_DIRECTORY_PATH": "/var/lib/kubelet/plugins_registry", "HEALTHCHECK_PORT": "51515",
			"NODE_NAME": "fieldRef:spec.nodeName", "POD_UID": "fieldRef:metadata.uid",
		} {
			if env[k] != v {
				t.Errorf("image %q: env %s=%q, want %q", want, k, env[k], v)
			}
		}
		// The CDI mounts of prepared devices name files under the plugins
		// folder: the container must see it at the node's path.
		for _, m := range c.VolumeMounts {
			for _, v := range ds.Spec.Template.Spec.Volumes {
				if v.Name == m.Name && v.HostPath != nil && v.HostPath.Path != m.MountPath {
					t.Errorf("volume %s: host path %s mounted at %s", v.Name, v.HostPath.Path, m.MountPath)
				}
			}
		}
	}
}
