package admissionpolicy

import (
	"bytes"
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/drastack/drastack/internal/bundle"
)

// TestCommittedManifest keeps config/admission/policies.yaml what the
// generator writes (make manifests).
func TestCommittedManifest(t *testing.T) {
	want, err := Manifest(DefaultIdentity)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../config/admission/policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("config/admission/policies.yaml is stale: run make manifests (go run ./hack/admissionpolicies)")
	}
}

// TestConfigDefaultInstallsTheSet builds config/default as `make deploy`
// does and checks it installs exactly the set the operator applies at
// start for the ServiceAccount config/default creates: same names (the
// namePrefix reaches the bindings' policyName), same content.
func TestConfigDefaultInstallsTheSet(t *testing.T) {
	objs, err := bundle.Build("../../config/default")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]any{}
	var account string
	for _, o := range objs {
		switch o.GetKind() {
		case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			got[o.GetKind()+"/"+o.GetName()] = o.Object
		case "ServiceAccount":
			account = o.GetNamespace() + "/" + o.GetName()
		}
	}
	if want := DefaultIdentity.Namespace + "/" + DefaultIdentity.ServiceAccount; account != want {
		t.Fatalf("config/default creates ServiceAccount %s, the policies fence %s", account, want)
	}
	want := Objects(Set(DefaultIdentity))
	if len(got) != len(want) {
		t.Errorf("config/default installs %d policies and bindings, the set has %d", len(got), len(want))
	}
	for _, obj := range want {
		u, err := Unstructured(obj)
		if err != nil {
			t.Fatal(err)
		}
		key := u.GetKind() + "/" + u.GetName()
		g, ok := got[key]
		if !ok {
			t.Errorf("config/default lacks %s", key)
			continue
		}
		if !equality.Semantic.DeepEqual(g, u.Object) {
			t.Errorf("config/default's %s differs from the operator's:\n%v\n%v", key, g, u.Object)
		}
	}
}
