package bundle

import (
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
)

// TestOLMWebhookScope checks what reaches the webhooks under OLM, where the
// definitions carry no namespaceSelector and no matchConditions: their
// objectSelector (config/manifests) keeps the pod webhook away from the
// operator's own pods, the drivers' and the control plane's static pods,
// and the claim webhook sees only claims labelled for immediate
// allocation. The operator's pod labels are read from the CSV, a driver's
// from internal/driver's golden render.
func TestOLMWebhookScope(t *testing.T) {
	c := loadCommitted(t)
	defs, _, err := unstructured.NestedSlice(c.csv.Object, "spec", "webhookdefinitions")
	if err != nil {
		t.Fatal(err)
	}
	selectors := map[string]labels.Selector{}
	for _, d := range defs {
		def, _ := d.(map[string]any)
		name, _ := def["generateName"].(string)
		var ls metav1.LabelSelector
		typed(t, def["objectSelector"], &ls)
		sel, err := metav1.LabelSelectorAsSelector(&ls)
		if err != nil {
			t.Fatalf("webhook %s: objectSelector: %v", name, err)
		}
		if sel.Empty() {
			t.Errorf("webhook %s has no objectSelector: under OLM it would see every object of its kind", name)
		}
		selectors[name] = sel
	}
	operatorPod := managerDeployment(t, c.csv).Template.Labels
	var driverPod map[string]string
	for _, o := range readObjects(t, filepath.Join(repoRoot, "internal", "driver", "testdata", "example.yaml")) {
		if o.GetKind() == "DaemonSet" {
			driverPod, _, _ = unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "labels")
		}
	}
	if len(operatorPod) == 0 || len(driverPod) == 0 {
		t.Fatalf("pod labels of the operator (%v) or of a driver (%v) not found", operatorPod, driverPod)
	}
	for _, c := range []struct {
		webhook, what string
		labels        map[string]string
		reaches       bool
	}{
		{"claim-gate.drastack.io", "the operator's pod", operatorPod, false},
		{"claim-gate.drastack.io", "a driver's kubelet plugin", driverPod, false},
		{"claim-gate.drastack.io", "a kubeadm static pod", map[string]string{"tier": "control-plane", "component": "kube-apiserver"}, false},
		{"claim-gate.drastack.io", "a tenant's pod", map[string]string{"app": "trainer"}, true},
		{"claim-gate.drastack.io", "an unlabelled pod", nil, true},
		{"claim-finalizer.drastack.io", "an immediate claim", map[string]string{"resource.drastack.io/allocation": "Immediate"}, true},
		{"claim-finalizer.drastack.io", "any other claim", map[string]string{"app": "trainer"}, false},
	} {
		sel, ok := selectors[c.webhook]
		if !ok {
			t.Fatalf("no webhook definition %s", c.webhook)
		}
		if got := sel.Matches(labels.Set(c.labels)); got != c.reaches {
			t.Errorf("under OLM, %s reaches %s: %v, want %v", c.what, c.webhook, got, c.reaches)
		}
	}
}
