package driver

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	rbacvalidation "k8s.io/component-helpers/auth/rbac/validation"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/driver"
)

// managerRole is the operator's ClusterRole, generated from the
// +kubebuilder:rbac markers (make manifests); the bundle's CSV carries the
// same rules.
var managerRole = filepath.Join("..", "..", "..", "config", "rbac", "role.yaml")

// profileInput is a valid driver entry of each profile.
func profileInput(p v1alpha1.DriverProfile) driver.Input {
	spec := v1alpha1.DriverSpec{Name: "gpu.example.com", Profile: p}
	switch p {
	case v1alpha1.DriverProfileNVIDIAGPU:
		spec.Name = driver.NVIDIAGPUDriver
		// Every rule the profile can grant: the MPSSupport gate adds one.
		spec.NVIDIA = &v1alpha1.NVIDIAOptions{FeatureGates: map[string]bool{"MPSSupport": true}}
	case v1alpha1.DriverProfileAMDGPU:
		spec.Name = driver.AMDDriver
	case v1alpha1.DriverProfileIntelGPU:
		spec.Name = driver.IntelDriver
	case v1alpha1.DriverProfileDRANET:
		spec.Name = driver.DRANETDriver
	case v1alpha1.DriverProfileCustom:
		spec.Name = "fpga.acme.io"
		spec.Image = "registry.acme.io/fpga-dra-plugin:1.4.2"
	}
	return driver.Input{Stack: v1alpha1.DRAStackName, Namespace: DefaultNamespace, Driver: spec}
}

// grantedRules renders one profile and returns the rules its Roles and
// ClusterRoles grant, by role ("Kind name"). Every binding must refer to a
// role of the same render: a binding to another role would grant rules
// this test cannot see.
func grantedRules(t *testing.T, p v1alpha1.DriverProfile) map[string][]rbacv1.PolicyRule {
	t.Helper()
	rd, err := driver.Render(profileInput(p))
	if err != nil {
		t.Fatalf("render profile %s: %v", p, err)
	}
	roles := map[string][]rbacv1.PolicyRule{}
	var refs []string
	for _, u := range rd.Objects {
		switch u.GetKind() {
		case "ClusterRole", "Role":
			var role rbacv1.ClusterRole
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &role); err != nil {
				t.Fatalf("profile %s: %s %s: %v", p, u.GetKind(), u.GetName(), err)
			}
			if role.AggregationRule != nil {
				t.Fatalf("profile %s: ClusterRole %s aggregates other roles; their rules cannot be checked here", p, u.GetName())
			}
			roles[u.GetKind()+" "+u.GetName()] = role.Rules
		case "ClusterRoleBinding", "RoleBinding":
			var b rbacv1.RoleBinding
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &b); err != nil {
				t.Fatalf("profile %s: %s %s: %v", p, u.GetKind(), u.GetName(), err)
			}
			refs = append(refs, b.RoleRef.Kind+" "+b.RoleRef.Name)
		}
	}
	for _, ref := range refs {
		if _, ok := roles[ref]; !ok {
			t.Errorf("profile %s: a binding refers to %s, which the profile does not render", p, ref)
		}
	}
	return roles
}

func readManagerRole(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	data, err := os.ReadFile(managerRole)
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(data, &role); err != nil {
		t.Fatalf("%s: %v", managerRole, err)
	}
	if role.Kind != "ClusterRole" || len(role.Rules) == 0 {
		t.Fatalf("%s: want a ClusterRole with rules, got kind %q with %d rules", managerRole, role.Kind, len(role.Rules))
	}
	return role.Rules
}

// TestProfileGrantsAreHeld: the API server refuses to create a Role,
// ClusterRole or binding that grants a rule its creator does not hold
// (RBAC privilege escalation prevention), and the operator holds neither
// escalate nor bind. So every rule a driver profile grants its kubelet
// plugin or controller must be covered by the operator's own ClusterRole,
// with the API server's own comparison: the group, resource and verb, and
// no resourceNames or the name. The operator's ClusterRole is bound
// cluster-wide, so it covers the profiles' namespaced Roles in any
// namespace too.
func TestProfileGrantsAreHeld(t *testing.T) {
	held := readManagerRole(t)
	for _, p := range driver.ProfileNames() {
		roles := grantedRules(t, p)
		if len(roles) == 0 {
			t.Errorf("profile %s renders no role; the kubelet plugin could not publish", p)
		}
		for _, id := range sortedKeys(roles) {
			if ok, missing := rbacvalidation.Covers(held, roles[id]); !ok {
				for _, r := range missing {
					t.Errorf("profile %s: %s grants %v %v %v (resourceNames %v), which %s does not hold: add it to the markers in setup.go (\"held only to grant it to the %s ...\") and run make manifests bundle",
						p, id, r.Verbs, r.APIGroups, r.Resources, r.ResourceNames, managerRole, p)
				}
			}
		}
	}
}

// TestProfileGrantsCheckCatchesGaps: the check above fails when the
// operator lacks a granted verb, so a passing test means something.
func TestProfileGrantsCheckCatchesGaps(t *testing.T) {
	var held []rbacv1.PolicyRule
	for _, r := range readManagerRole(t) {
		r = *r.DeepCopy()
		if slices.Contains(r.Resources, "resourceslices") {
			r.Verbs = slices.DeleteFunc(r.Verbs, func(v string) bool { return v == "patch" })
		}
		held = append(held, r)
	}
	roles := grantedRules(t, v1alpha1.DriverProfileExample)
	var all []rbacv1.PolicyRule
	for _, rules := range roles {
		all = append(all, rules...)
	}
	ok, missing := rbacvalidation.Covers(held, all)
	want := rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"patch"}}
	if ok || !slices.ContainsFunc(missing, func(r rbacv1.PolicyRule) bool {
		return slices.Equal(r.APIGroups, want.APIGroups) && slices.Equal(r.Resources, want.Resources) && slices.Equal(r.Verbs, want.Verbs)
	}) {
		t.Errorf("without patch on resourceslices: covered %v, missing %v; want the kubelet plugin's patch reported", ok, missing)
	}
	// A rule limited to names covers only those names.
	named := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}, ResourceNames: []string{"node-a"}}}
	if ok, _ := rbacvalidation.Covers(named, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}}}); ok {
		t.Error("a rule for node-a only covers a grant for every node")
	}
}

// TestProfileCRDsAreHeld: the operator holds, by name, what it needs for
// every CustomResourceDefinition a profile installs (apply: create and
// patch; removal: get, delete, and list of the custom resources).
func TestProfileCRDsAreHeld(t *testing.T) {
	held := readManagerRole(t)
	crds := 0
	for _, p := range driver.ProfileNames() {
		rd, err := driver.Render(profileInput(p))
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range rd.Objects {
			if u.GetKind() != "CustomResourceDefinition" {
				continue
			}
			crds++
			group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
			plural, _, _ := unstructured.NestedString(u.Object, "spec", "names", "plural")
			need := []rbacv1.PolicyRule{
				{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: []string{"create"}},
				{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: []string{"get", "patch", "delete"}, ResourceNames: []string{u.GetName()}},
				{APIGroups: []string{group}, Resources: []string{plural}, Verbs: []string{"list"}},
			}
			if ok, missing := rbacvalidation.Covers(held, need); !ok {
				t.Errorf("profile %s installs CustomResourceDefinition %s, but %s lacks %v: add its name to the resourceNames of the marker in setup.go", p, u.GetName(), managerRole, missing)
			}
		}
	}
	if crds == 0 {
		t.Error("no profile installs a CustomResourceDefinition; the test checks nothing")
	}
}
