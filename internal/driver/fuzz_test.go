package driver

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// FuzzNVIDIAOptions renders the nvidia-gpu profile with arbitrary options
// and nodes: Render never panics, refuses bad options with a field error
// under spec.drivers[0].nvidia, and what it renders keeps the driver root
// and refuses only nodes it was given.
func FuzzNVIDIAOptions(f *testing.F) {
	f.Add("/run/nvidia/driver", "GPUs", "ComputeDomains", "MPSSupport", true, "Refuse", "gpu-1", "nvidia.com/gpu.present")
	f.Add("/", "ComputeDomains", "", "DynamicMIG", true, "Allow", "", "")
	f.Add("run/../x/", "GPUs", "GPUs", "NoSuchGate", false, "Maybe", "n\n1", "a b")
	f.Fuzz(func(t *testing.T, root, p1, p2, gate string, on bool, policy, node, label string) {
		o := &v1alpha1.NVIDIAOptions{DriverRoot: root, DevicePluginNodes: v1alpha1.DevicePluginNodePolicy(policy)}
		for _, p := range []string{p1, p2} {
			if p != "" {
				o.Plugins = append(o.Plugins, v1alpha1.NVIDIAPlugin(p))
			}
		}
		if gate != "" {
			o.FeatureGates = map[string]bool{gate: on}
		}
		in := Input{Stack: "default", Namespace: "drastack-drivers", Path: field.NewPath("spec", "drivers").Index(0),
			Driver: v1alpha1.DriverSpec{Name: NVIDIAGPUDriver, Profile: v1alpha1.DriverProfileNVIDIAGPU, NVIDIA: o},
			Nodes:  []NodeFacts{{Name: node, Labels: map[string]string{label: "true"}, Resources: []string{NVIDIADevicePluginResource}}}}
		r, err := Render(in)
		if err != nil {
			var ferr *field.Error
			if !errors.As(err, &ferr) {
				t.Fatalf("Render error %v (%T), want a *field.Error", err, err)
			}
			return
		}
		if r.Refusal != nil {
			for _, n := range r.Refusal.Nodes {
				if n != node {
					t.Errorf("refused %q, which it was not given", n)
				}
			}
		}
		if len(r.Objects) == 0 || r.PluginDaemonSet == "" {
			t.Errorf("a render without objects: %+v", r)
		}
	})
}
