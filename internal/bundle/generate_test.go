package bundle

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// nested reads a field of the CSV for assertions; missing fields are nil.
func nested(t *testing.T, obj *unstructured.Unstructured, fields ...string) interface{} {
	t.Helper()
	v, _, err := unstructured.NestedFieldNoCopy(obj.Object, fields...)
	if err != nil {
		t.Fatalf("%s: %v", dotted(fields), err)
	}
	return v
}

// permissionsOf returns serviceAccountName -> rules of a permissions list.
func permissionsOf(t *testing.T, csv *unstructured.Unstructured, field string) map[string][]interface{} {
	t.Helper()
	out := map[string][]interface{}{}
	list, _ := nested(t, csv, "spec", "install", "spec", field).([]interface{})
	for _, e := range list {
		m := e.(map[string]interface{})
		out[m["serviceAccountName"].(string)] = m["rules"].([]interface{})
	}
	return out
}

// ruleResources flattens rules to "group/resource" strings, enough to tell
// which role the rules came from.
func ruleResources(rules []interface{}) []string {
	var out []string
	for _, r := range rules {
		m := r.(map[string]interface{})
		groups, _ := m["apiGroups"].([]interface{})
		resources, _ := m["resources"].([]interface{})
		urls, _ := m["nonResourceURLs"].([]interface{})
		for _, g := range groups {
			for _, res := range resources {
				out = append(out, g.(string)+"/"+res.(string))
			}
		}
		for _, u := range urls {
			out = append(out, u.(string))
		}
	}
	return out
}

func containerImages(t *testing.T, csv *unstructured.Unstructured) map[string]string {
	t.Helper()
	out := map[string]string{}
	deps := nested(t, csv, "spec", "install", "spec", "deployments").([]interface{})
	for _, d := range deps {
		spec := d.(map[string]interface{})["spec"].(map[string]interface{})
		cs, _, _ := unstructured.NestedSlice(spec, "template", "spec", "containers")
		for _, c := range cs {
			cm := c.(map[string]interface{})
			out[cm["name"].(string)] = cm["image"].(string)
		}
	}
	return out
}

func TestGenerate(t *testing.T) {
	cases := []struct {
		name  string
		docs  []string
		opts  func(*Options)
		check func(t *testing.T, b *Bundle, files Files)
	}{{
		name: "the CSV is named and versioned by the options, and createdAt is dropped for determinism",
		docs: fxAll,
		check: func(t *testing.T, b *Bundle, _ Files) {
			if got := b.CSV.GetName(); got != "widget.v1.2.3" {
				t.Errorf("name = %q", got)
			}
			if got := nested(t, b.CSV, "spec", "version"); got != "1.2.3" {
				t.Errorf("spec.version = %v", got)
			}
			a := b.CSV.GetAnnotations()
			if _, ok := a["createdAt"]; ok {
				t.Errorf("createdAt kept: %q", a["createdAt"])
			}
			if a["containerImage"] != "example.io/widget:v1.2.3" {
				t.Errorf("containerImage = %q", a["containerImage"])
			}
			if b.CSV.GetNamespace() != "placeholder" || nested(t, b.CSV, "spec", "displayName") != "Widget" {
				t.Errorf("hand-written base fields not kept")
			}
		},
	}, {
		name: "admission policies, which OLM cannot install, are left out with a note each (the operator applies them)",
		docs: with(`apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: widget-fence
spec:
  validations:
  - expression: "true"`, `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: widget-fence
spec:
  policyName: widget-fence
  validationActions: [Deny]`),
		check: func(t *testing.T, b *Bundle, files Files) {
			for name := range files {
				if strings.Contains(name, "validatingadmissionpolic") {
					t.Errorf("bundle file %s: OLM refuses the kind", name)
				}
			}
			for _, kind := range []string{"ValidatingAdmissionPolicy widget-fence", "ValidatingAdmissionPolicyBinding widget-fence"} {
				if !slices.ContainsFunc(b.Notes, func(n string) bool { return strings.Contains(n, kind+" is left out") }) {
					t.Errorf("no note for %s in %v", kind, b.Notes)
				}
			}
		},
	}, {
		name: "only the manager container gets the image; sidecars keep theirs",
		docs: fxAll,
		check: func(t *testing.T, b *Bundle, _ Files) {
			want := map[string]string{"manager": "example.io/widget:v1.2.3", "proxy": "example.io/proxy:v1"}
			if got := containerImages(t, b.CSV); !reflect.DeepEqual(got, want) {
				t.Errorf("images = %v, want %v", got, want)
			}
		},
	}, {
		name: "the default-container annotation names the container that gets the image",
		docs: replaced(fxDeployment, strings.Replace(fxDeployment, "    metadata:\n      labels:", "    metadata:\n      annotations:\n        kubectl.kubernetes.io/default-container: proxy\n      labels:", 1)),
		check: func(t *testing.T, b *Bundle, _ Files) {
			want := map[string]string{"manager": "example.io/widget:kustomized", "proxy": "example.io/widget:v1.2.3"}
			if got := containerImages(t, b.CSV); !reflect.DeepEqual(got, want) {
				t.Errorf("images = %v, want %v", got, want)
			}
		},
	}, {
		name: "deployments carry name, labels and spec",
		docs: fxAll,
		check: func(t *testing.T, b *Bundle, _ Files) {
			deps := nested(t, b.CSV, "spec", "install", "spec", "deployments").([]interface{})
			if len(deps) != 1 {
				t.Fatalf("%d deployments", len(deps))
			}
			d := deps[0].(map[string]interface{})
			if d["name"] != "widget-manager" || !reflect.DeepEqual(d["label"], map[string]interface{}{"control-plane": "manager"}) {
				t.Errorf("deployment entry = name %v label %v", d["name"], d["label"])
			}
			if sa, _, _ := unstructured.NestedString(d, "spec", "template", "spec", "serviceAccountName"); sa != "widget-sa" {
				t.Errorf("serviceAccountName = %q", sa)
			}
		},
	}, {
		name: "a ClusterRoleBinding to the manager account becomes clusterPermissions, a RoleBinding becomes permissions",
		docs: fxAll,
		check: func(t *testing.T, b *Bundle, _ Files) {
			cluster := permissionsOf(t, b.CSV, "clusterPermissions")
			ns := permissionsOf(t, b.CSV, "permissions")
			if got := ruleResources(cluster["widget-sa"]); !reflect.DeepEqual(got, []string{"example.io/widgets"}) || len(cluster) != 1 {
				t.Errorf("clusterPermissions = %v", cluster)
			}
			if got := ruleResources(ns["widget-sa"]); !reflect.DeepEqual(got, []string{"coordination.k8s.io/leases"}) || len(ns) != 1 {
				t.Errorf("permissions = %v", ns)
			}
		},
	}, {
		name: "a RoleBinding to a ClusterRole grants namespaced permissions",
		docs: with(`
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: widget-reader
  namespace: widget-system
roleRef:
  kind: ClusterRole
  name: widget-metrics-reader
subjects:
- kind: ServiceAccount
  name: widget-sa
  namespace: widget-system
`),
		check: func(t *testing.T, b *Bundle, files Files) {
			ns := permissionsOf(t, b.CSV, "permissions")
			want := []string{"coordination.k8s.io/leases", "/metrics"}
			if got := ruleResources(ns["widget-sa"]); !reflect.DeepEqual(got, want) {
				t.Errorf("permissions = %v, want %v", got, want)
			}
			if _, ok := files["bundle/manifests/widget-metrics-reader_rbac.authorization.k8s.io_v1_clusterrole.yaml"]; ok {
				t.Errorf("ClusterRole folded into the CSV is also written as a file")
			}
		},
	}, {
		name: "objects the CSV absorbs are not files; others are, without namespace",
		docs: fxAll,
		check: func(t *testing.T, b *Bundle, files Files) {
			want := []string{
				"bundle.Dockerfile",
				"bundle/manifests/example.io_widgets.yaml",
				"bundle/manifests/widget-metrics-reader_rbac.authorization.k8s.io_v1_clusterrole.yaml",
				"bundle/manifests/widget-metrics_v1_service.yaml",
				"bundle/manifests/widget.clusterserviceversion.yaml",
				"bundle/metadata/annotations.yaml",
			}
			if got := files.Paths(); !reflect.DeepEqual(got, want) {
				t.Errorf("files =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			for _, o := range b.Others {
				if o.GetNamespace() != "" {
					t.Errorf("%s %s keeps namespace %q", o.GetKind(), o.GetName(), o.GetNamespace())
				}
			}
		},
	}, {
		name: "a binding whose role is not in the input stays a file",
		docs: with(`
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: widget-auth-delegator
roleRef:
  kind: ClusterRole
  name: system:auth-delegator
subjects:
- kind: ServiceAccount
  name: widget-sa
  namespace: widget-system
`),
		check: func(t *testing.T, b *Bundle, files Files) {
			if _, ok := files["bundle/manifests/widget-auth-delegator_rbac.authorization.k8s.io_v1_clusterrolebinding.yaml"]; !ok {
				t.Errorf("binding to a built-in role dropped; files: %v", files.Paths())
			}
			if got := ruleResources(permissionsOf(t, b.CSV, "clusterPermissions")["widget-sa"]); len(got) != 1 {
				t.Errorf("clusterPermissions = %v", got)
			}
		},
	}, {
		name: "owned CRDs keep the base's text and gain missing versions and CRDs",
		docs: with(fxGadgetCRD),
		check: func(t *testing.T, b *Bundle, _ Files) {
			owned := nested(t, b.CSV, "spec", "customresourcedefinitions", "owned").([]interface{})
			want := []map[string]interface{}{
				{"name": "widgets.example.io", "version": "v1", "kind": "Widget", "displayName": "Hand Written Widget", "description": "Hand-written description."},
				{"name": "gadgets.example.io", "version": "v1alpha1", "kind": "HTTPGadget", "displayName": "HTTP Gadget"},
				{"name": "widgets.example.io", "version": "v2", "kind": "Widget", "displayName": "Widget", "description": "Widget is a thing spread over two lines."},
			}
			if len(owned) != len(want) {
				t.Fatalf("owned = %v", owned)
			}
			for i := range want {
				if !reflect.DeepEqual(owned[i], want[i]) {
					t.Errorf("owned[%d] = %v, want %v", i, owned[i], want[i])
				}
			}
		},
	}, {
		name: "samples become alm-examples and are not written as files",
		docs: with(strings.Replace(fxSample, "name: sample", "name: second", 1)),
		check: func(t *testing.T, b *Bundle, files Files) {
			var examples []map[string]interface{}
			if err := json.Unmarshal([]byte(b.CSV.GetAnnotations()["alm-examples"]), &examples); err != nil {
				t.Fatalf("alm-examples: %v", err)
			}
			if len(examples) != 2 || examples[0]["kind"] != "Widget" {
				t.Fatalf("alm-examples = %v", examples)
			}
			names := []interface{}{examples[0]["metadata"].(map[string]interface{})["name"], examples[1]["metadata"].(map[string]interface{})["name"]}
			if !reflect.DeepEqual(names, []interface{}{"sample", "second"}) {
				t.Errorf("examples not in input order: %v", names)
			}
			for p := range files {
				if strings.Contains(p, "_widget.yaml") {
					t.Errorf("sample written as %s", p)
				}
			}
		},
	}, {
		name: "without samples alm-examples is an empty array",
		docs: without(fxSample),
		check: func(t *testing.T, b *Bundle, _ Files) {
			if got := b.CSV.GetAnnotations()["alm-examples"]; got != "[]" {
				t.Errorf("alm-examples = %q", got)
			}
		},
	}, {
		name: "annotations and Dockerfile labels name the package and channels",
		docs: fxAll,
		check: func(t *testing.T, b *Bundle, files Files) {
			want := map[string]string{
				keyMediaType: "registry+v1", keyManifests: "manifests/", keyMetadata: "metadata/",
				keyPackage: "widget", keyChannels: "alpha,stable", keyDefaultChannel: "stable",
				keyMetricsBuilder: "test-builder", keyMetricsMedia: "metrics+v1", keyMetricsLayout: "go.kubebuilder.io/v4",
			}
			if !reflect.DeepEqual(b.Annotations, want) {
				t.Errorf("annotations = %v", b.Annotations)
			}
			df := string(files[DockerfileName])
			for k, v := range want {
				if !strings.Contains(df, "\nLABEL "+k+"="+v+"\n") {
					t.Errorf("Dockerfile lacks label %s=%s", k, v)
				}
			}
			for _, line := range []string{"FROM scratch\n", "COPY bundle/manifests /manifests/\n", "COPY bundle/metadata /metadata/\n"} {
				if !strings.Contains(df, line) {
					t.Errorf("Dockerfile lacks %q:\n%s", line, df)
				}
			}
		},
	}, {
		name: "the default channel defaults to the first channel",
		docs: fxAll,
		opts: func(o *Options) { o.DefaultChannel = "" },
		check: func(t *testing.T, b *Bundle, _ Files) {
			if got := b.Annotations[keyDefaultChannel]; got != "alpha" {
				t.Errorf("default channel = %q", got)
			}
		},
	}, {
		name: "a deployment without serviceAccountName runs as default and gets no permissions",
		docs: replaced(fxDeployment, strings.Replace(fxDeployment, "      serviceAccountName: widget-sa\n", "", 1)),
		check: func(t *testing.T, b *Bundle, files Files) {
			if got := permissionsOf(t, b.CSV, "clusterPermissions"); len(got) != 0 {
				t.Errorf("clusterPermissions = %v", got)
			}
			for _, want := range []string{
				"bundle/manifests/widget-sa_v1_serviceaccount.yaml",
				"bundle/manifests/widget-manager-rolebinding_rbac.authorization.k8s.io_v1_clusterrolebinding.yaml",
				"bundle/manifests/widget-manager-role_rbac.authorization.k8s.io_v1_clusterrole.yaml",
			} {
				if _, ok := files[want]; !ok {
					t.Errorf("missing %s", want)
				}
			}
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs := decodeAll(t, stream(tc.docs...))
			opts := fxOptions()
			if tc.opts != nil {
				tc.opts(&opts)
			}
			b, err := Generate(objs, opts)
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			files, err := b.Files()
			if err != nil {
				t.Fatalf("Files: %v", err)
			}
			tc.check(t, b, files)
		})
	}
}

func TestGenerateRejects(t *testing.T) {
	cases := []struct {
		name    string
		docs    []string
		opts    func(*Options)
		wantErr string
	}{
		{"no base CSV", without(fxCSV), nil, "no ClusterServiceVersion"},
		{"two CSVs", with(strings.Replace(fxCSV, "widget.v0.0.0", "other.v0.0.0", 1)), nil, "two ClusterServiceVersions"},
		{"no Deployment", without(fxDeployment), nil, "no Deployment"},
		{"no manager container", replaced(fxDeployment, strings.Replace(fxDeployment, "name: manager\n", "name: main\n", 1)), nil, "cannot set the image"},
		{"base owns a CRD that does not exist", without(fxCRD, fxSample), nil, `no CRD named "widgets.example.io"`},
		{"base owns a version the CRD lacks", replaced(fxCSV, strings.Replace(fxCSV, "version: v1\n", "version: v9\n", 1)), nil, `has no version "v9"`},
		{"base owns the CRD under another kind", replaced(fxCSV, strings.Replace(fxCSV, "kind: Widget\n", "kind: Gizmo\n", 1)), nil, `defines kind "Widget", not "Gizmo"`},
		{"sample of a version the CRD lacks", replaced(fxSample, strings.Replace(fxSample, "example.io/v1", "example.io/v3", 1)), nil, `uses version "v3"`},
		{"kind OLM cannot carry", with("apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: fast\nprovisioner: example.io/disk\n"), nil, "cannot be carried by a registry+v1 bundle"},
		{"binding mixes the manager with a user", replaced(fxClusterRoleBinding, fxClusterRoleBinding+"- kind: User\n  name: alice\n"), nil, "together with other subjects"},
		{"CRD name not plural.group", replaced(fxCRD, strings.Replace(fxCRD, "name: widgets.example.io", "name: widget.example.io", 1)), nil, `name must be "widgets.example.io"`},
		{"base without builder annotation", replaced(fxCSV, strings.Replace(fxCSV, "    operators.operatorframework.io/builder: test-builder\n", "", 1)), nil, "must set the operators.operatorframework.io/builder"},
		{"version with a leading v", fxAll, func(o *Options) { o.Version = "v1.2.3" }, "without the leading v"},
		{"version not semver", fxAll, func(o *Options) { o.Version = "1.2" }, "not semver"},
		{"no image", fxAll, func(o *Options) { o.Image = "" }, "not an image reference"},
		{"no channel", fxAll, func(o *Options) { o.Channels = nil; o.DefaultChannel = "" }, "no channel"},
		{"default channel not a channel", fxAll, func(o *Options) { o.DefaultChannel = "beta" }, `default channel "beta"`},
		{"no package", fxAll, func(o *Options) { o.Package = "" }, "package name is empty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := fxOptions()
			if tc.opts != nil {
				tc.opts(&opts)
			}
			_, err := Generate(decodeAll(t, stream(tc.docs...)), opts)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

// TestGenerateIsDeterministicAndPure pins the two properties `make bundle`
// relies on: the same input gives the same bytes, and the caller's objects
// are left as they were.
func TestGenerateIsDeterministicAndPure(t *testing.T) {
	objs := decodeAll(t, stream(fxAll...))
	before := make([]*unstructured.Unstructured, len(objs))
	for i, o := range objs {
		before[i] = o.DeepCopy()
	}
	render := func() Files {
		b, err := Generate(objs, fxOptions())
		if err != nil {
			t.Fatal(err)
		}
		f, err := b.Files()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	first, second := render(), render()
	if !reflect.DeepEqual(first, second) {
		t.Errorf("two runs differ")
	}
	for i := range objs {
		if !reflect.DeepEqual(objs[i].Object, before[i].Object) {
			t.Errorf("input %s %s was modified", objs[i].GetKind(), objs[i].GetName())
		}
	}
}
