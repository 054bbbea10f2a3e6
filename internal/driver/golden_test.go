package driver

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// goldenCases are the renders whose every byte is reviewed: each profile
// with its defaults, a spec that sets every DRAStack field, and both kinds
// of user patch.
var goldenCases = []struct {
	name string
	in   Input
}{
	{name: "example", in: Input{Stack: "default", Namespace: "drastack-drivers", Driver: v1alpha1.DriverSpec{
		Name: "gpu.example.com", Profile: v1alpha1.DriverProfileExample,
	}}},
	{name: "nvidia-gpu", in: Input{Stack: "default", Namespace: "drastack-drivers", Driver: v1alpha1.DriverSpec{
		Name: "gpu.nvidia.com", Profile: v1alpha1.DriverProfileNVIDIAGPU,
	}}},
	{name: "nvidia-gpu-options", in: Input{Stack: "default", Namespace: "drastack-drivers",
		Driver: v1alpha1.DriverSpec{
			Name: "gpu.nvidia.com", Profile: v1alpha1.DriverProfileNVIDIAGPU,
			NVIDIA: &v1alpha1.NVIDIAOptions{
				DriverRoot:   NVIDIAGPUOperatorDriverRoot,
				FeatureGates: map[string]bool{"MPSSupport": true, "PassthroughSupport": true, "TimeSlicingSettings": true},
			},
		},
		// gpu-2 is no GPU node (no NVIDIA label), so only gpu-1 is refused.
		Nodes: []NodeFacts{
			{Name: "gpu-1", Labels: map[string]string{"nvidia.com/gpu.present": "true"}, Resources: []string{NVIDIADevicePluginResource}},
			{Name: "gpu-2", Resources: []string{NVIDIADevicePluginResource}},
		},
	}},
	{name: "nvidia-gpu-compute-domains", in: Input{Stack: "default", Namespace: "drastack-drivers", Driver: v1alpha1.DriverSpec{
		Name: "gpu.nvidia.com", Profile: v1alpha1.DriverProfileNVIDIAGPU,
		NVIDIA: &v1alpha1.NVIDIAOptions{Plugins: []v1alpha1.NVIDIAPlugin{v1alpha1.NVIDIAPluginComputeDomains}},
	}}},
	{name: "amd-gpu", in: Input{Stack: "default", Namespace: "drastack-drivers", Driver: v1alpha1.DriverSpec{
		Name: AMDDriver, Profile: v1alpha1.DriverProfileAMDGPU,
	}}},
	{name: "intel-gpu", in: Input{Stack: "default", Namespace: "drastack-drivers", Driver: v1alpha1.DriverSpec{
		Name: IntelDriver, Profile: v1alpha1.DriverProfileIntelGPU,
	}}},
	{name: "dranet", in: Input{Stack: "default", Namespace: "drastack-drivers", Driver: v1alpha1.DriverSpec{
		Name: DRANETDriver, Profile: v1alpha1.DriverProfileDRANET,
	}}},
	{name: "custom", in: Input{Stack: "default", Namespace: "dra", Driver: v1alpha1.DriverSpec{
		Name:    "fpga.acme.io",
		Profile: v1alpha1.DriverProfileCustom,
		Image:   "registry.acme.io/fpga-dra-plugin:1.4.2",
		Args:    []string{"--v=2", "--publish-interval=30s"},
		Mounts: []v1alpha1.HostPathMount{
			{Name: "dev-fpga", HostPath: "/dev/fpga"},
			{Name: "acme-libs", HostPath: "/opt/acme/lib", MountPath: "/usr/local/acme/lib", ReadOnly: true},
		},
		DeviceClasses: []v1alpha1.DeviceClassSpec{{
			Name:      "fpga-large.acme.io",
			Selectors: celSelectors(`device.capacity["fpga.acme.io"].luts.compareTo(quantity("1M")) >= 0`),
		}},
		RequiredFeatures: []string{"partitionableDevices"},
	}}},
	{name: "example-all-fields", in: Input{Stack: "default", Namespace: "drastack-drivers", Driver: v1alpha1.DriverSpec{
		Name:              "gpu.example.com",
		Profile:           v1alpha1.DriverProfileExample,
		Image:             "registry.example.com/dra/example@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		ImagePullPolicy:   corev1.PullAlways,
		NodeSelector:      map[string]string{"example.com/gpu": "true"},
		Tolerations:       []corev1.Toleration{{Key: "example.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		Args:              []string{"--v=4"},
		Env:               []corev1.EnvVar{{Name: "NUM_DEVICES", Value: "2"}, {Name: "LOG_FORMAT", Value: "json"}},
		Resources:         &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")}},
		PriorityClassName: "dra-drivers",
		UpdateStrategy:    v1alpha1.DriverUpdateStrategy{MaxUnavailable: ptrTo(intstr.FromString("25%"))},
		RemovalPolicy:     v1alpha1.RemovalPolicyForce,
		DeviceClasses: []v1alpha1.DeviceClassSpec{
			{Name: "gpu.example.com"},
			{
				Name:      "big-gpu.example.com",
				Selectors: celSelectors(`device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0`),
				Config: []resourcev1.DeviceClassConfiguration{{DeviceConfiguration: resourcev1.DeviceConfiguration{
					Opaque: &resourcev1.OpaqueDeviceConfiguration{Driver: "gpu.example.com", Parameters: runtimeRaw(`{"sharing":{"strategy":"TimeSlicing"}}`)},
				}}},
			},
		},
	}}},
	{name: "example-patches", in: Input{Stack: "default", Namespace: "drastack-drivers", Driver: v1alpha1.DriverSpec{
		Name:    "gpu.example.com",
		Profile: v1alpha1.DriverProfileExample,
		Patches: []v1alpha1.Patch{
			{Patch: `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: kubelet-plugin
spec:
  template:
    metadata:
      annotations:
        example.com/scrape: "true"
    spec:
      containers:
      - name: plugin
        env:
        - name: NUM_DEVICES
          value: "16"
`},
			{Patch: `[{"op": "replace", "path": "/spec/template/spec/priorityClassName", "value": "system-cluster-critical"}]`,
				Target: &v1alpha1.PatchTarget{Kind: "DaemonSet"}},
			{Patch: `- op: add
  path: /rules/-
  value: {apiGroups: [resource.k8s.io], resources: [resourceclaims/status], verbs: [update]}`,
				Target: &v1alpha1.PatchTarget{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "kubelet-plugin"}},
		},
	}}},
}

// TestGolden compares each render with testdata/<name>.yaml. Run
// `go test ./internal/driver -run TestGolden -update` after an intended
// change and review the diff.
func TestGolden(t *testing.T) {
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Render(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			got := serialize(t, r)
			path := filepath.Join("testdata", tc.name+".yaml")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden file (run with -update to create it): %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("render differs from %s (run with -update after checking the change):\n%s", path, got)
			}
		})
	}
}

// serialize writes a render as one YAML stream, objects in apply order.
func serialize(t *testing.T, r *Rendered) []byte {
	t.Helper()
	var b bytes.Buffer
	for i, u := range r.Objects {
		if i > 0 {
			b.WriteString("---\n")
		}
		data, err := yaml.Marshal(u.Object)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
	}
	return b.Bytes()
}
