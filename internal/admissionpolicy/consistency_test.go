package admissionpolicy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/central"
	"github.com/drastack/drastack/internal/claimpolicy"
	claimsctrl "github.com/drastack/drastack/internal/controller/claims"
	driverctrl "github.com/drastack/drastack/internal/controller/driver"
	"github.com/drastack/drastack/internal/driver"
)

// TestNamesAgree checks that the keys, labels and names the policies look
// for are the ones the code that sets them uses.
func TestNamesAgree(t *testing.T) {
	for _, c := range []struct{ what, here, there string }{
		{"stack label", labelStack, driver.LabelStack},
		{"component label", labelComponent, driver.LabelComponent},
		{"managed-by label", labelManagedBy, driver.LabelManagedBy},
		{"managed-by value", managedByValue, driver.ManagedByValue},
		{"central component", "central", central.ComponentCentral},
		{"removal component", "removal", driver.ComponentRemoval},
		{"central taint key", centralTaintKey, central.TaintKey},
		{"removal taint key", removalTaintKey, driver.TaintKey},
		{"removal policy annotation", annotationRemovalPolicy, driver.AnnotationRemovalPolicy},
		{"scheduling gate", schedulingGate, claimpolicy.SchedulingGate},
		{"claim finalizer", claimFinalizer, claimpolicy.Finalizer},
		{"CEL annotation", celAnnotation, allocator.CELConstraintsAnnotation},
		{"allocation label", allocationLabel, claimpolicy.AllocationLabel},
		{"Immediate", immediateValue, claimpolicy.AllocationImmediate},
		{"default driver namespace", defaultDriverNamespace, driverctrl.DefaultNamespace},
		{"DRAStack name", stackName, v1alpha1.DRAStackName},
	} {
		if c.here != c.there {
			t.Errorf("%s: the policies use %q, the code %q", c.what, c.here, c.there)
		}
	}
	for _, f := range []string{driverctrl.Finalizer, claimsctrl.CleanupFinalizer} {
		if !strings.HasPrefix(f, stackFinalizerPrefix) {
			t.Errorf("DRAStack finalizer %s does not start with %s: the operator could not remove it", f, stackFinalizerPrefix)
		}
	}
	rule := central.RuleLabels()
	if rule[labelComponent] != "central" || rule[labelManagedBy] != managedByValue {
		t.Errorf("central rules are labelled %v: the fence would not recognize them", rule)
	}
}

// TestEveryProfileRenderPassesTheFence runs every object of every driver
// render the driver package reviews byte by byte (its golden files) through
// the fence as the operator's creation, in the namespace the render
// creates: a profile that breaks the fence's conventions (ownership labels,
// bindings named after their role, ServiceAccount subjects) fails here, not
// on a cluster.
func TestEveryProfileRenderPassesTheFence(t *testing.T) {
	files, err := filepath.Glob("../driver/testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden renders of internal/driver: %v", err)
	}
	fence := Fence(DefaultIdentity)
	stack := obj("default", "", nil, m{"spec": m{}})
	checked := 0
	for _, f := range files {
		objs := readObjects(t, f)
		var nsLabels map[string]string
		for _, o := range objs {
			if o.GetKind() == "Namespace" {
				nsLabels = o.GetLabels()
				stack["spec"].(m)["namespace"] = o.GetName()
			}
		}
		for _, o := range objs {
			gvr := resourceOf(o.GroupVersionKind().Group, o.GetKind())
			r := inNamespace(withParams(create(operator, gvr[0], gvr[1], o.GetNamespace(), o.Object), stack), nsLabels)
			for _, p := range fence {
				if v := decide(t, p, r); v.denied {
					t.Errorf("%s: %s %s/%s is refused by %s: %s", filepath.Base(f), o.GetKind(), o.GetNamespace(), o.GetName(), p.Policy.Name, v.message)
				}
			}
			checked++
		}
	}
	// The removal's DeviceTaintRules (internal/driver) and the central ones
	// (internal/central) are not part of a render.
	rules := driver.TaintRules("default", "gpu.example.com", []string{"gpu.example.com", "compute.example.com"},
		[]driver.TaintTarget{{Driver: "gpu.example.com"}, {Driver: "compute.example.com", Pool: "node-1"}}, v1alpha1.RemovalPolicyDrain, "resource.k8s.io/v1")
	rules = append(rules, &unstructured.Unstructured{Object: obj(central.RuleName("gpu.example.com", ""), "", central.RuleLabels(), nil)})
	for _, o := range rules {
		r := create(operator, "resource.k8s.io", "devicetaintrules", "", o.Object)
		for _, p := range fence {
			if v := decide(t, p, r); v.denied {
				t.Errorf("DeviceTaintRule %s is refused by %s: %s", o.GetName(), p.Policy.Name, v.message)
			}
		}
		checked++
	}
	t.Logf("%d rendered objects of %d renders pass the fence", checked, len(files))
}

// resourceOf maps the kinds a render produces to their group and resource.
func resourceOf(group, kind string) [2]string {
	r := strings.ToLower(kind) + "s"
	switch kind {
	case "ValidatingAdmissionPolicy":
		r = "validatingadmissionpolicies"
	}
	return [2]string{group, r}
}

func readObjects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(u.Object) > 0 {
			out = append(out, &u)
		}
	}
	return out
}
