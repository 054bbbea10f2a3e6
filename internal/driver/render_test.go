package driver

import (
	"errors"
	"io/fs"
	"path"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// nvidiaInput is the nvidia-gpu profile with the options mutate sets.
func nvidiaInput(mutate func(*v1alpha1.NVIDIAOptions)) Input {
	o := &v1alpha1.NVIDIAOptions{}
	mutate(o)
	return Input{Stack: "default", Namespace: "drastack-drivers", Driver: v1alpha1.DriverSpec{Name: NVIDIAGPUDriver, Profile: v1alpha1.DriverProfileNVIDIAGPU, NVIDIA: o}}
}

func input(mutate func(*v1alpha1.DriverSpec)) Input {
	in := Input{Stack: "default", Namespace: "drastack-drivers", Driver: v1alpha1.DriverSpec{Name: "gpu.example.com", Profile: v1alpha1.DriverProfileExample}}
	if mutate != nil {
		mutate(&in.Driver)
	}
	return in
}

// TestRenderRejects: specs that would deploy something broken, unsafe or
// unmanageable are refused with the field to fix and a one-line reason.
func TestRenderRejects(t *testing.T) {
	goodPatch := v1alpha1.Patch{Patch: `[{"op": "add", "path": "/metadata/annotations/a", "value": "b"}]`, Target: &v1alpha1.PatchTarget{Kind: "ServiceAccount"}}
	tests := []struct {
		name        string
		in          Input
		field, want string
	}{
		{"unknown profile", input(func(d *v1alpha1.DriverSpec) { d.Profile = "tpu-google" }), "spec.drivers[0].profile", "Unsupported value"},
		{"custom without image", input(func(d *v1alpha1.DriverSpec) { d.Profile = v1alpha1.DriverProfileCustom }), "spec.drivers[0].image", "image is required"},
		{"an image that would inject YAML", input(func(d *v1alpha1.DriverSpec) { d.Image = "x:1\n        hostNetwork: true" }), "spec.drivers[0].image", "not a container image reference"},
		{"an image that only looks valid", input(func(d *v1alpha1.DriverSpec) { d.Image = "Registry.K8s.io/UPPER/Case::v1@sha" }), "spec.drivers[0].image", "invalid reference format"},
		{"nvidia-gpu under another name", input(func(d *v1alpha1.DriverSpec) { d.Profile = v1alpha1.DriverProfileNVIDIAGPU }), "spec.drivers[0].name", "name the driver gpu.nvidia.com"},
		{"amd-gpu under another name", input(func(d *v1alpha1.DriverSpec) { d.Profile = v1alpha1.DriverProfileAMDGPU }), "spec.drivers[0].name", "name the driver gpu.amd.com"},
		{"intel-gpu under another name", input(func(d *v1alpha1.DriverSpec) { d.Profile = v1alpha1.DriverProfileIntelGPU }), "spec.drivers[0].name", "name the driver gpu.intel.com"},
		{"dranet under another name", input(func(d *v1alpha1.DriverSpec) { d.Profile = v1alpha1.DriverProfileDRANET }), "spec.drivers[0].name", "name the driver dra.net"},
		{"nvidia options on another profile", input(func(d *v1alpha1.DriverSpec) {
			d.NVIDIA = &v1alpha1.NVIDIAOptions{DriverRoot: "/run/nvidia/driver"}
		}), "spec.drivers[0].nvidia", "nvidia-gpu profile only"},
		{"an nvidia feature gate the release does not know", nvidiaInput(func(o *v1alpha1.NVIDIAOptions) {
			o.FeatureGates = map[string]bool{"MPSSupport": true, "NoSuchGate": true}
		}), "spec.drivers[0].nvidia.featureGates[NoSuchGate]", "Unsupported value"},
		{"nvidia feature gates the release refuses together", nvidiaInput(func(o *v1alpha1.NVIDIAOptions) {
			o.FeatureGates = map[string]bool{"DynamicMIG": true, "MPSSupport": true}
		}), "spec.drivers[0].nvidia.featureGates[DynamicMIG]", "cannot both be enabled"},
		{"an nvidia feature gate without the one it needs", nvidiaInput(func(o *v1alpha1.NVIDIAOptions) {
			o.FeatureGates = map[string]bool{"IMEXDaemonsWithDNSNames": false}
		}), "spec.drivers[0].nvidia.featureGates[ComputeDomainCliques]", "needs IMEXDaemonsWithDNSNames"},
		{"an nvidia driver root that is not clean", nvidiaInput(func(o *v1alpha1.NVIDIAOptions) { o.DriverRoot = "/run/nvidia/driver/" }),
			"spec.drivers[0].nvidia.driverRoot", "clean path"},
		{"an nvidia driver root that is relative", nvidiaInput(func(o *v1alpha1.NVIDIAOptions) { o.DriverRoot = "run/nvidia" }),
			"spec.drivers[0].nvidia.driverRoot", "absolute"},
		{"an nvidia plugin twice", nvidiaInput(func(o *v1alpha1.NVIDIAOptions) {
			o.Plugins = []v1alpha1.NVIDIAPlugin{v1alpha1.NVIDIAPluginGPUs, v1alpha1.NVIDIAPluginGPUs}
		}), "spec.drivers[0].nvidia.plugins[1]", "Duplicate value"},
		{"a mount shadowing the plugin registry", input(func(d *v1alpha1.DriverSpec) {
			d.Mounts = []v1alpha1.HostPathMount{{Name: "x", HostPath: "/x"}, {Name: "plugins-registry", HostPath: "/tmp"}}
		}), "spec.drivers[0].mounts[1].name", "already has a volume"},
		{"a patch removing the kubelet-plugin label", input(func(d *v1alpha1.DriverSpec) {
			d.Patches = []v1alpha1.Patch{goodPatch, {Patch: `[{"op": "remove", "path": "/metadata/labels/drastack.io~1component"}]`, Target: &v1alpha1.PatchTarget{Kind: "DaemonSet"}}}
		}), "spec.drivers[0].patches[1]", "no kubelet-plugin DaemonSet"},
		{"a patch that matches nothing", input(func(d *v1alpha1.DriverSpec) {
			d.Patches = []v1alpha1.Patch{goodPatch, goodPatch, {Patch: "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: plugin\nspec:\n  minReadySeconds: 5\n"}}
		}), "spec.drivers[0].patches[2]", "kustomize"},
		{"a patch that is no YAML", input(func(d *v1alpha1.DriverSpec) {
			d.Patches = []v1alpha1.Patch{{Patch: "kind: [DaemonSet\n  : :", Target: &v1alpha1.PatchTarget{Kind: "DaemonSet"}}}
		}), "spec.drivers[0].patches[0]", "kustomize"},
		{"a JSON patch on a path that does not exist", input(func(d *v1alpha1.DriverSpec) {
			d.Patches = []v1alpha1.Patch{goodPatch, {Patch: `[{"op": "replace", "path": "/spec/nothing/here", "value": 1}]`, Target: &v1alpha1.PatchTarget{Kind: "DaemonSet"}}}
		}), "spec.drivers[0].patches[1]", "kustomize"},
		{"a driver name that is no DNS subdomain", input(func(d *v1alpha1.DriverSpec) { d.Name = "GPU_example" }), "spec.drivers[0].name", "DNS subdomain"},
		{"a namespace that is no DNS label", Input{Stack: "default", Namespace: "drastack.drivers", Driver: v1alpha1.DriverSpec{Name: "gpu.example.com"}}, "spec.namespace", "namespace"},
		{"the same DeviceClass twice", input(func(d *v1alpha1.DriverSpec) {
			d.DeviceClasses = []v1alpha1.DeviceClassSpec{{Name: "a.example.com"}, {Name: "a.example.com"}}
		}), "spec.drivers[0].deviceClasses[1].name", "Duplicate value"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.in.Path == nil {
				tc.in.Path = field.NewPath("spec", "drivers").Index(0)
			}
			_, err := Render(tc.in)
			var ferr *field.Error
			if !errors.As(err, &ferr) {
				t.Fatalf("Render error %v (%T), want a *field.Error", err, err)
			}
			msg := err.Error()
			if ferr.Field != tc.field || !strings.Contains(msg, tc.want) {
				t.Errorf("Render error %q at %s, want one at %s mentioning %q", msg, ferr.Field, tc.field, tc.want)
			}
			if strings.Contains(msg, "\n") || len(msg) > maxReason+200 {
				t.Errorf("error is not one short line: %q", msg)
			}
			t.Log(msg)
		})
	}
}

func TestRenderVersionFromTheParsedReference(t *testing.T) {
	for image, want := range map[string]string{
		"registry.k8s.io/dra-example-driver/dra-example-driver:v0.2.0": "v0.2.0",
		"localhost:5000/driver":                                       "latest",
		"r.io/d@sha256:" + strings.Repeat("0123456789abcdef", 4):      "sha256:0123456789ab",
		"r.io/d:v1.2@sha256:" + strings.Repeat("0123456789abcdef", 4): "v1.2",
		"Registry.K8s.io/lower/case:v9":                               "v9",
	} {
		r, err := Render(input(func(d *v1alpha1.DriverSpec) { d.Image = image }))
		if err != nil {
			t.Fatalf("%s: %v", image, err)
		}
		if r.Version != want || r.Image != image {
			t.Errorf("%s: image %q version %q, want version %q", image, r.Image, r.Version, want)
		}
	}
}

// TestRenderInvariants holds for every profile: what the controller relies
// on to apply, prune, find and remove a driver's objects.
func TestRenderInvariants(t *testing.T) {
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Render(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if r.Objects[0].GetKind() != "Namespace" || r.Objects[0].GetName() != tc.in.Namespace {
				t.Errorf("first object is %s %s, want the namespace %s", r.Objects[0].GetKind(), r.Objects[0].GetName(), tc.in.Namespace)
			}
			if _, ok := r.Objects[0].GetLabels()[LabelDriver]; ok {
				t.Error("the shared namespace carries a driver label: pruning one driver would delete it")
			}
			fixed := fixedNames(t, tc.in.Driver.Profile)
			prev := -1
			for _, u := range r.Objects {
				rank := kindRank(u.GroupVersionKind().GroupKind())
				if rank < prev {
					t.Errorf("%s %s out of apply order", u.GetKind(), u.GetName())
				}
				prev = rank
				if u.GetKind() == "Namespace" {
					continue
				}
				l := u.GetLabels()
				if l[LabelStack] != tc.in.Stack || l[LabelDriver] != tc.in.Driver.Name || l[LabelManagedBy] != ManagedByValue {
					t.Errorf("%s %s labels %v", u.GetKind(), u.GetName(), l)
				}
				if u.GetAnnotations()[AnnotationRemovalPolicy] == "" || u.GetAnnotations()[AnnotationDriverNames] == "" {
					t.Errorf("%s %s lacks the removal annotations", u.GetKind(), u.GetName())
				}
				if u.GetKind() != "DeviceClass" && !strings.HasPrefix(u.GetName(), NamePrefix(tc.in.Driver.Name)+"-") && !fixed[u.GetKind()+" "+u.GetName()] {
					t.Errorf("%s %s lacks the driver's name prefix", u.GetKind(), u.GetName())
				}
			}
			var ds appsv1.DaemonSet
			for _, u := range r.Objects {
				if u.GetName() == r.PluginDaemonSet && u.GetKind() == "DaemonSet" {
					if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &ds); err != nil {
						t.Fatal(err)
					}
				}
			}
			if ds.Spec.Template.Labels[LabelStack] != tc.in.Stack || ds.Spec.Selector.MatchLabels[LabelDriver] != tc.in.Driver.Name {
				t.Errorf("plugin pods are not selectable per driver: template %v selector %v", ds.Spec.Template.Labels, ds.Spec.Selector.MatchLabels)
			}
			if ds.Spec.Template.Spec.ServiceAccountName != ObjectName(tc.in.Driver.Name, pluginServiceAccount) {
				t.Errorf("plugin runs as %q", ds.Spec.Template.Spec.ServiceAccountName)
			}
			paths := map[string]bool{}
			for _, v := range ds.Spec.Template.Spec.Volumes {
				if v.HostPath != nil {
					paths[v.HostPath.Path] = true
				}
			}
			want := []string{"/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins", "/var/run/cdi"}
			if tc.in.Driver.Profile == v1alpha1.DriverProfileDRANET {
				want = want[:2] // dranet moves network interfaces; it writes no CDI specs
			}
			for _, p := range want {
				if !paths[p] {
					t.Errorf("plugin lacks host path %s", p)
				}
			}
			if len(r.DeviceClasses) == 0 || r.Image == "" || r.Version == "" || len(r.DriverNames) == 0 {
				t.Errorf("render summary incomplete: %+v", r)
			}
		})
	}
}

// TestAdmissionPolicyNamesThePluginIdentity: the policy must match the
// service account the DaemonSet really runs as, and only the driver's names.
func TestAdmissionPolicyNamesThePluginIdentity(t *testing.T) {
	r, err := Render(Input{Stack: "default", Namespace: "gpu-drivers", Driver: v1alpha1.DriverSpec{Name: NVIDIAGPUDriver, Profile: v1alpha1.DriverProfileNVIDIAGPU}})
	if err != nil {
		t.Fatal(err)
	}
	var policy string
	for _, u := range r.Objects {
		if u.GetKind() == "ValidatingAdmissionPolicy" {
			data, _ := u.MarshalJSON()
			policy = string(data)
		}
		if u.GetKind() == "ValidatingAdmissionPolicyBinding" {
			if name, _, _ := unstructuredString(u.Object, "spec", "policyName"); name != "gpu-nvidia-com-resourceslices-own-node" {
				t.Errorf("binding refers to policy %q", name)
			}
		}
	}
	for _, want := range []string{
		`system:serviceaccount:gpu-drivers:gpu-nvidia-com-kubelet-plugin`,
		`[\"gpu.nvidia.com\", \"compute-domain.nvidia.com\"]`,
		`authentication.kubernetes.io/node-name`,
	} {
		if !strings.Contains(policy, want) {
			t.Errorf("policy lacks %s:\n%s", want, policy)
		}
	}
	if strings.Contains(policy, "__DRASTACK") {
		t.Errorf("policy has an unreplaced token:\n%s", policy)
	}
}

func TestNamePrefix(t *testing.T) {
	long := strings.Repeat("a", 30) + "." + strings.Repeat("b", 30)
	tests := []struct{ in, want string }{
		{"gpu.example.com", "gpu-example-com"},
		{"gpu.nvidia.com", "gpu-nvidia-com"},
	}
	for _, tc := range tests {
		if got := NamePrefix(tc.in); got != tc.want {
			t.Errorf("NamePrefix(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	p := NamePrefix(long)
	if len(p) > maxPrefix || p == NamePrefix(long[:len(long)-1]+"c") {
		t.Errorf("long names: prefix %q (%d chars) must fit %d and stay unique", p, len(p), maxPrefix)
	}
}

func TestDriverNames(t *testing.T) {
	if got := DriverNames(&v1alpha1.DriverSpec{Name: NVIDIAGPUDriver, Profile: v1alpha1.DriverProfileNVIDIAGPU}); len(got) != 2 || got[1] != NVIDIAComputeDomainDriver {
		t.Errorf("nvidia-gpu publishes under %v", got)
	}
	if got := DriverNames(&v1alpha1.DriverSpec{Name: "x.example.com", Profile: "unknown"}); len(got) != 1 || got[0] != "x.example.com" {
		t.Errorf("an unknown profile still names its driver: %v", got)
	}
}

// TestPatchesCannotMoveObjects: the namespace is set after the patches, so
// a patch cannot place a driver's objects outside spec.namespace.
func TestPatchesCannotMoveObjects(t *testing.T) {
	r, err := Render(input(func(d *v1alpha1.DriverSpec) {
		d.Patches = []v1alpha1.Patch{{Patch: `[{"op": "add", "path": "/metadata/namespace", "value": "kube-system"}]`, Target: &v1alpha1.PatchTarget{Kind: "ServiceAccount"}}}
	}))
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range r.Objects {
		if u.GetKind() == "ServiceAccount" && u.GetNamespace() != "drastack-drivers" {
			t.Errorf("patched ServiceAccount landed in %q", u.GetNamespace())
		}
	}
}

// fixedNames are "Kind name" of the objects in a profile's fixed/ folder:
// the only objects that keep their names without the driver's prefix.
func fixedNames(t *testing.T, p v1alpha1.DriverProfile) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	dir := path.Join(profilesRoot, string(p), fixedDir)
	entries, err := fs.ReadDir(profileFiles, dir)
	if err != nil {
		return out
	}
	for _, e := range entries {
		if e.Name() == "kustomization.yaml" {
			continue
		}
		raw, err := profileFiles.ReadFile(path.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(raw, &head); err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		out[head.Kind+" "+head.Metadata.Name] = true
	}
	return out
}
