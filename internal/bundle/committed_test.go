package bundle

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/blang/semver/v4"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// repoRoot is the repository root seen from this package's directory.
var repoRoot = filepath.Join("..", "..")

// committed is the bundle under bundle/ as checked in, parsed.
type committed struct {
	csv         *unstructured.Unstructured
	crds        map[string]*unstructured.Unstructured // by CRD name
	annotations map[string]string
	dockerfile  string
}

func loadCommitted(t *testing.T) committed {
	t.Helper()
	c := committed{crds: map[string]*unstructured.Unstructured{}}
	dir := filepath.Join(repoRoot, "bundle", "manifests")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("read committed bundle (run make bundle): %v", err)
	}
	for _, e := range entries {
		for _, obj := range readObjects(t, filepath.Join(dir, e.Name())) {
			switch obj.GetKind() {
			case "ClusterServiceVersion":
				if c.csv != nil {
					t.Fatalf("two CSVs in %s", dir)
				}
				c.csv = obj
			case "CustomResourceDefinition":
				c.crds[obj.GetName()] = obj
			}
		}
	}
	if c.csv == nil {
		t.Fatalf("no CSV in %s", dir)
	}
	if c.annotations, err = readAnnotations(repoRoot); err != nil {
		t.Fatal(err)
	}
	df, err := os.ReadFile(filepath.Join(repoRoot, DockerfileName))
	if err != nil {
		t.Fatal(err)
	}
	c.dockerfile = string(df)
	return c
}

func readObjects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return decodeAll(t, string(data))
}

// typed converts a JSON-like value into a typed API value.
func typed(t *testing.T, in interface{}, out interface{}) {
	t.Helper()
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatal(err)
	}
}

// rulesOfRole reads the rules of the one role of kind (Role or
// ClusterRole) in a config/rbac file.
func rulesOfRole(t *testing.T, rel, kind string) []rbacv1.PolicyRule {
	t.Helper()
	var rules []rbacv1.PolicyRule
	found := 0
	for _, o := range readObjects(t, filepath.Join(repoRoot, filepath.FromSlash(rel))) {
		if o.GetKind() == kind {
			found++
			typed(t, o.Object["rules"], &rules)
		}
	}
	if found != 1 {
		t.Fatalf("%s: want one %s, got %d", rel, kind, found)
	}
	return rules
}

// csvRules returns the rules the CSV grants the manager's account in the
// given permissions field, and how many accounts that field names.
func csvRules(t *testing.T, csv *unstructured.Unstructured, field, account string) ([]rbacv1.PolicyRule, int) {
	t.Helper()
	list, _, err := unstructured.NestedSlice(csv.Object, "spec", "install", "spec", field)
	if err != nil {
		t.Fatal(err)
	}
	var entries []struct {
		ServiceAccountName string              `json:"serviceAccountName"`
		Rules              []rbacv1.PolicyRule `json:"rules"`
	}
	typed(t, list, &entries)
	for _, e := range entries {
		if e.ServiceAccountName == account {
			return e.Rules, len(entries)
		}
	}
	t.Fatalf("%s has no entry for service account %q", field, account)
	return nil, 0
}

// managerDeployment returns the CSV's only deployment, typed.
func managerDeployment(t *testing.T, csv *unstructured.Unstructured) appsv1.DeploymentSpec {
	t.Helper()
	list, _, err := unstructured.NestedSlice(csv.Object, "spec", "install", "spec", "deployments")
	if err != nil || len(list) != 1 {
		t.Fatalf("want exactly one deployment in the CSV, got %d (%v)", len(list), err)
	}
	var d struct {
		Spec appsv1.DeploymentSpec `json:"spec"`
	}
	typed(t, list[0], &d)
	return d.Spec
}

// TestCommittedBundleStructure checks the invariants OLM and our users rely
// on in the bundle that is checked in, against the sources it came from.
func TestCommittedBundleStructure(t *testing.T) {
	c := loadCommitted(t)
	csv := c.csv
	owned := map[ownedKey]string{} // -> kind
	list, _, _ := unstructured.NestedSlice(csv.Object, "spec", "customresourcedefinitions", "owned")
	for _, e := range list {
		m, _ := e.(map[string]interface{})
		name, _, _ := unstructured.NestedString(m, "name")
		version, _, _ := unstructured.NestedString(m, "version")
		kind, _, _ := unstructured.NestedString(m, "kind")
		owned[ownedKey{name, version}] = kind
	}

	t.Run("every CRD of config/crd/bases is in the bundle, unchanged, and owned by the CSV", func(t *testing.T) {
		paths, err := filepath.Glob(filepath.Join(repoRoot, "config", "crd", "bases", "*.yaml"))
		if err != nil || len(paths) == 0 {
			t.Fatalf("no CRDs in config/crd/bases (%v)", err)
		}
		for _, p := range paths {
			for _, src := range readObjects(t, p) {
				info, err := readCRD(src)
				if err != nil {
					t.Fatal(err)
				}
				got, ok := c.crds[info.name]
				if !ok {
					t.Errorf("CRD %s is not in bundle/manifests", info.name)
					continue
				}
				if !reflect.DeepEqual(got.Object["spec"], src.Object["spec"]) {
					t.Errorf("CRD %s in the bundle differs from %s", info.name, p)
				}
				if _, err := os.Stat(filepath.Join(repoRoot, "bundle", "manifests", info.group+"_"+info.plural+".yaml")); err != nil {
					t.Errorf("CRD %s not in its operator-sdk file name: %v", info.name, err)
				}
				for _, v := range info.versions {
					if kind, ok := owned[ownedKey{info.name, v}]; !ok || kind != info.kind {
						t.Errorf("CSV does not own %s %s as kind %s (owned: %v)", info.name, v, info.kind, owned)
					}
				}
			}
		}
		if len(owned) == 0 {
			t.Errorf("CSV owns no CRD")
		}
	})

	spec := managerDeployment(t, csv)
	account := spec.Template.Spec.ServiceAccountName

	t.Run("cluster permissions are the rules of config/rbac/role.yaml and metrics_auth_role.yaml", func(t *testing.T) {
		got, n := csvRules(t, csv, "clusterPermissions", account)
		// The manager role (controller-gen's), then the metrics endpoint's
		// TokenReviews and SubjectAccessReviews.
		want := append(rulesOfRole(t, "config/rbac/role.yaml", "ClusterRole"), rulesOfRole(t, "config/rbac/metrics_auth_role.yaml", "ClusterRole")...)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("clusterPermissions of %s =\n%v\nwant\n%v", account, got, want)
		}
		if n != 1 {
			t.Errorf("clusterPermissions name %d accounts, want 1", n)
		}
	})

	t.Run("namespaced permissions are the rules of the Role in config/rbac/role.yaml", func(t *testing.T) {
		got, n := csvRules(t, csv, "permissions", account)
		if want := rulesOfRole(t, "config/rbac/role.yaml", "Role"); !reflect.DeepEqual(got, want) {
			t.Errorf("permissions of %s =\n%v\nwant\n%v", account, got, want)
		}
		if n != 1 {
			t.Errorf("permissions name %d accounts, want 1", n)
		}
	})

	t.Run("the manager runs the bundle's image", func(t *testing.T) {
		image := csv.GetAnnotations()[annotationImage]
		if image == "" || strings.Contains(image, "controller:latest") {
			t.Fatalf("containerImage annotation = %q", image)
		}
		found := false
		for _, ctr := range spec.Template.Spec.Containers {
			if ctr.Name == managerContainer {
				found = true
				if ctr.Image != image {
					t.Errorf("manager image %q != containerImage %q", ctr.Image, image)
				}
			}
		}
		if !found {
			t.Errorf("no %q container in the deployment", managerContainer)
		}
		if account == "" {
			t.Errorf("deployment has no serviceAccountName")
		}
	})

	t.Run("alm-examples parse and each is an owned kind", func(t *testing.T) {
		var examples []map[string]interface{}
		if err := json.Unmarshal([]byte(csv.GetAnnotations()[annotationExamples]), &examples); err != nil {
			t.Fatalf("alm-examples: %v", err)
		}
		if len(examples) == 0 {
			t.Fatalf("no alm-examples")
		}
		ownedGVK := map[schema.GroupVersionKind]bool{}
		for k, kind := range owned {
			group := k.name[strings.Index(k.name, ".")+1:]
			ownedGVK[schema.GroupVersionKind{Group: group, Version: k.version, Kind: kind}] = true
		}
		for _, ex := range examples {
			u := &unstructured.Unstructured{Object: ex}
			if !ownedGVK[u.GroupVersionKind()] {
				t.Errorf("example %s %q is not of an owned CRD version", u.GroupVersionKind(), u.GetName())
			}
		}
		// The examples are the samples, so `kubectl apply -k config/samples`
		// and the OLM console offer the same objects, and the examples of
		// what only the operator writes (config/manifests/examples).
		var want int
		for _, dir := range []string{"config/samples", "config/manifests/examples"} {
			objs, err := Build(filepath.Join(repoRoot, filepath.FromSlash(dir)))
			if err != nil {
				t.Fatal(err)
			}
			want += len(objs)
		}
		if want != len(examples) {
			t.Errorf("%d alm-examples, %d samples and examples", len(examples), want)
		}
	})

	t.Run("annotations.yaml is complete and the Dockerfile labels repeat it", func(t *testing.T) {
		for _, k := range requiredAnnotationKeys {
			if c.annotations[k] == "" {
				t.Errorf("annotations.yaml lacks %s", k)
			}
		}
		if c.annotations[keyMediaType] != "registry+v1" || c.annotations[keyManifests] != "manifests/" || c.annotations[keyMetadata] != "metadata/" {
			t.Errorf("core annotations = %v", c.annotations)
		}
		channels := strings.Split(c.annotations[keyChannels], ",")
		if !contains(channels, c.annotations[keyDefaultChannel]) {
			t.Errorf("default channel %q not among %v", c.annotations[keyDefaultChannel], channels)
		}
		labels := map[string]string{}
		for _, line := range strings.Split(c.dockerfile, "\n") {
			if kv, ok := strings.CutPrefix(line, "LABEL "); ok {
				k, v, _ := strings.Cut(kv, "=")
				labels[k] = v
			}
		}
		if !reflect.DeepEqual(labels, c.annotations) {
			t.Errorf("Dockerfile labels %v != annotations %v", labels, c.annotations)
		}
		for _, line := range []string{"FROM scratch", "COPY bundle/manifests /manifests/", "COPY bundle/metadata /metadata/"} {
			if !strings.Contains(c.dockerfile, line+"\n") {
				t.Errorf("Dockerfile lacks %q", line)
			}
		}
	})

	t.Run("metadata.name is package.vVERSION and the version is semver", func(t *testing.T) {
		version, _, _ := unstructured.NestedString(csv.Object, "spec", "version")
		if _, err := semver.Parse(version); err != nil {
			t.Errorf("spec.version %q: %v", version, err)
		}
		if want := c.annotations[keyPackage] + ".v" + version; csv.GetName() != want {
			t.Errorf("metadata.name = %q, want %q", csv.GetName(), want)
		}
		if _, ok := csv.GetAnnotations()[annotationCreatedAt]; ok {
			t.Errorf("createdAt makes every regeneration a diff")
		}
	})
}

// TestCommittedBundleIsCurrent regenerates the committed release from
// config/ and fails when bundle/ or bundle.Dockerfile differ.
func TestCommittedBundleIsCurrent(t *testing.T) {
	opts, err := ReadOptions(repoRoot)
	if err != nil {
		t.Fatalf("%v (run make bundle)", err)
	}
	objs, err := Build(filepath.Join(repoRoot, "config", "manifests"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Generate(objs, opts)
	if err != nil {
		t.Fatal(err)
	}
	files, err := b.Files()
	if err != nil {
		t.Fatal(err)
	}
	stale, err := Compare(repoRoot, files)
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) > 0 {
		t.Errorf("bundle is stale, run make bundle VERSION=%s:\n  %s", opts.Version, strings.Join(stale, "\n  "))
	}
}
