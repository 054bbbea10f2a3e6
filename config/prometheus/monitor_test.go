package prometheus

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/drastack/drastack/internal/bundle"
)

// TestServiceMonitorFindsTheOperator checks the ServiceMonitor against
// what `make deploy` installs (config/default): its selector picks the
// metrics Service alone, that Service has the port it names and selects
// the manager's pod, whose container serves HTTPS there; and the binding
// of this folder grants a ClusterRole of config/default that allows GET
// /metrics.
func TestServiceMonitorFindsTheOperator(t *testing.T) {
	mon, err := ServiceMonitor()
	if err != nil {
		t.Fatal(err)
	}
	if mon.Endpoint.Scheme != "https" || mon.Endpoint.Path != "/metrics" || mon.Endpoint.BearerTokenFile == "" {
		t.Errorf("endpoint %+v: want https, /metrics and the ServiceAccount token", mon.Endpoint)
	}
	deployed, err := bundle.Build("../default")
	if err != nil {
		t.Fatal(err)
	}
	sel := labels.SelectorFromSet(mon.Selector)
	var services []*unstructured.Unstructured
	var deployment *unstructured.Unstructured
	for _, o := range deployed {
		switch o.GetKind() {
		case "Service":
			if sel.Matches(labels.Set(o.GetLabels())) {
				services = append(services, o)
			}
		case "Deployment":
			deployment = o
		}
	}
	if len(services) != 1 || deployment == nil {
		t.Fatalf("the ServiceMonitor selects %d Services of config/default (want the metrics Service alone); Deployment %v", len(services), deployment != nil)
	}
	svc := services[0]
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	var target any
	for _, p := range ports {
		if p, ok := p.(map[string]any); ok && p["name"] == mon.Endpoint.Port {
			target = p["targetPort"]
		}
	}
	if target == nil {
		t.Fatalf("Service %s has no port %q", svc.GetName(), mon.Endpoint.Port)
	}
	podLabels, _, _ := unstructured.NestedStringMap(deployment.Object, "spec", "template", "metadata", "labels")
	svcSelector, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
	if !labels.SelectorFromSet(svcSelector).Matches(labels.Set(podLabels)) {
		t.Errorf("Service %s selects %v, the manager's pod has %v", svc.GetName(), svcSelector, podLabels)
	}
	containers, _, _ := unstructured.NestedSlice(deployment.Object, "spec", "template", "spec", "containers")
	found := false
	for _, c := range containers {
		c, _ := c.(map[string]any)
		cps, _ := c["ports"].([]any)
		args, _ := c["args"].([]any)
		for _, p := range cps {
			p, _ := p.(map[string]any)
			if p["name"] == target && slices.Contains(args, any("--metrics-bind-address=:8443")) && p["containerPort"] == int64(8443) {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("the manager has no container port %v serving the metrics (--metrics-bind-address=:8443)", target)
	}

	own, err := bundle.Build(".")
	if err != nil {
		t.Fatal(err)
	}
	var role string
	for _, o := range own {
		if o.GetKind() == "ClusterRoleBinding" {
			role, _, _ = unstructured.NestedString(o.Object, "roleRef", "name")
		}
	}
	granted := false
	for _, o := range deployed {
		if o.GetKind() != "ClusterRole" || o.GetName() != role {
			continue
		}
		rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
		for _, r := range rules {
			r, _ := r.(map[string]any)
			urls, _ := r["nonResourceURLs"].([]any)
			verbs, _ := r["verbs"].([]any)
			granted = granted || (slices.Contains(urls, any(mon.Endpoint.Path)) && slices.Contains(verbs, any("get")))
		}
	}
	if !granted {
		t.Errorf("the binding of config/prometheus grants ClusterRole %q, which config/default does not render with GET %s", role, mon.Endpoint.Path)
	}
}
