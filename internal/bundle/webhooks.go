package bundle

import (
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Admission webhook configurations cannot be bundle files: OLM creates
// them itself, with a Service in front of the Deployment and certificates
// it rotates, from spec.webhookdefinitions of the CSV. The generator folds
// each webhook of a MutatingWebhookConfiguration or
// ValidatingWebhookConfiguration into one definition, as operator-sdk's
// `generate bundle` does, and drops the Service the webhooks call (OLM
// makes its own).
var (
	mutatingWebhookKind   = schema.GroupKind{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"}
	validatingWebhookKind = schema.GroupKind{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"}
	serviceKind           = schema.GroupKind{Kind: "Service"}
)

// Ports of a webhook definition when no Service of the input says
// otherwise: OLM's service listens on 443 (its default containerPort) and
// forwards to 9443, controller-runtime's default webhook port.
const (
	defaultWebhookContainerPort = 443
	defaultWebhookTargetPort    = 9443
)

// webhookFields are copied from a webhook into its definition as they are:
// every field OLM's WebhookDescription has in common with
// admissionregistration/v1. clientConfig is OLM's to fill.
var webhookFields = []string{"admissionReviewVersions", "failurePolicy", "matchPolicy", "objectSelector", "rules", "sideEffects", "timeoutSeconds"}

// olmUncarriedWebhookFields are admissionregistration/v1 webhook fields
// that OLM's WebhookDescription (operator-framework/api
// pkg/operators/v1alpha1) does not have, with what OLM does instead. The
// CSV's schema would prune them, so they are left out of the definition
// and each omission is reported in Bundle.Notes rather than silently.
var olmUncarriedWebhookFields = []struct{ field, instead string }{
	{"namespaceSelector", "OLM sets it from the OperatorGroup's target namespaces (none for AllNamespaces)"},
	{"matchConditions", "OLM sends every request the rules match; the handler must check the condition itself"},
}

// webhookPlan is spec.webhookdefinitions plus the input objects it absorbed
// and what could not be carried.
type webhookPlan struct {
	definitions []interface{}
	folded      map[*unstructured.Unstructured]bool
	notes       []string
}

// planWebhooks turns the webhook configurations among objs into
// definitions served by one of deployments. A webhook's Deployment is the
// one its Service selects (and the ports are the Service's), or, without a
// Service in the input, the only Deployment (ports 443 and 9443). A
// webhook called by URL cannot be expressed and is an error rather than
// silently changed; the fields of olmUncarriedWebhookFields are left out
// with a note.
func planWebhooks(objs, deployments []*unstructured.Unstructured) (*webhookPlan, error) {
	plan := &webhookPlan{folded: map[*unstructured.Unstructured]bool{}}
	services := map[string]*unstructured.Unstructured{}
	for _, obj := range objs {
		if obj.GroupVersionKind().GroupKind() == serviceKind {
			services[obj.GetName()] = obj
		}
	}
	var configs []*unstructured.Unstructured
	for _, obj := range objs {
		switch obj.GroupVersionKind().GroupKind() {
		case mutatingWebhookKind, validatingWebhookKind:
			configs = append(configs, obj)
		}
	}
	sort.SliceStable(configs, func(i, j int) bool { return configs[i].GetName() < configs[j].GetName() })
	for _, cfg := range configs {
		plan.folded[cfg] = true
		typ := "ValidatingAdmissionWebhook"
		if cfg.GroupVersionKind().GroupKind() == mutatingWebhookKind {
			typ = "MutatingAdmissionWebhook"
		}
		hooks, _, err := unstructured.NestedSlice(cfg.Object, "webhooks")
		if err != nil {
			return nil, fmt.Errorf("%s %q: webhooks: %w", cfg.GetKind(), cfg.GetName(), err)
		}
		for i, h := range hooks {
			hook, ok := h.(map[string]interface{})
			if !ok {
				return nil, fmt.Errorf("%s %q: webhooks[%d] is not an object", cfg.GetKind(), cfg.GetName(), i)
			}
			def, svc, err := webhookDefinition(typ, hook, services, deployments)
			if err != nil {
				return nil, fmt.Errorf("%s %q: webhooks[%d]: %w", cfg.GetKind(), cfg.GetName(), i, err)
			}
			for _, u := range olmUncarriedWebhookFields {
				if _, found := hook[u.field]; found {
					plan.notes = append(plan.notes, fmt.Sprintf("webhook %s: %s is not part of OLM's webhook definition and is left out: %s", def["generateName"], u.field, u.instead))
				}
			}
			if svc != nil {
				plan.folded[svc] = true
			}
			plan.definitions = append(plan.definitions, def)
		}
	}
	return plan, nil
}

func webhookDefinition(typ string, hook map[string]interface{}, services map[string]*unstructured.Unstructured, deployments []*unstructured.Unstructured) (map[string]interface{}, *unstructured.Unstructured, error) {
	name, err := requiredString(hook, "name")
	if err != nil {
		return nil, nil, err
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(hook, "clientConfig", "url"); found {
		return nil, nil, fmt.Errorf("webhook %q: a URL clientConfig cannot be carried by a bundle: OLM calls webhooks through a Service", name)
	}
	svcName, err := requiredString(hook, "clientConfig", "service", "name")
	if err != nil {
		return nil, nil, fmt.Errorf("webhook %q: %w", name, err)
	}
	path, err := requiredString(hook, "clientConfig", "service", "path")
	if err != nil {
		return nil, nil, fmt.Errorf("webhook %q: %w", name, err)
	}
	def := map[string]interface{}{
		"generateName": name,
		"type":         typ,
		"webhookPath":  path,
	}
	for _, f := range webhookFields {
		if v, found := hook[f]; found {
			def[f] = runtimeCopyValue(v)
		}
	}
	if typ == "MutatingAdmissionWebhook" {
		if v, found := hook["reinvocationPolicy"]; found {
			def["reinvocationPolicy"] = v
		}
	}

	containerPort := int64(defaultWebhookContainerPort)
	if p, found, _ := unstructured.NestedInt64(hook, "clientConfig", "service", "port"); found {
		containerPort = p
	}
	var targetPort interface{} = int64(defaultWebhookTargetPort)
	svc := services[svcName]
	var deployment string
	if svc != nil {
		deployment, containerPort, targetPort, err = serviceTarget(svc, deployments, containerPort)
		if err != nil {
			return nil, nil, fmt.Errorf("webhook %q: %w", name, err)
		}
	} else {
		if len(deployments) != 1 {
			return nil, nil, fmt.Errorf("webhook %q: Service %q is not in the input and there are %d Deployments: add the Service so the serving Deployment is known", name, svcName, len(deployments))
		}
		deployment = deployments[0].GetName()
	}
	def["deploymentName"] = deployment
	def["containerPort"] = containerPort
	def["targetPort"] = targetPort
	return def, svc, nil
}

// serviceTarget finds the Deployment a Service selects and the port the
// webhook uses (the Service port named by the webhook, else its first).
func serviceTarget(svc *unstructured.Unstructured, deployments []*unstructured.Unstructured, port int64) (string, int64, interface{}, error) {
	what := fmt.Sprintf("Service %q", svc.GetName())
	selector, _, err := unstructured.NestedStringMap(svc.Object, "spec", "selector")
	if err != nil || len(selector) == 0 {
		return "", 0, nil, fmt.Errorf("%s has no selector", what)
	}
	var match []string
	for _, d := range deployments {
		labels, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "labels")
		if selects(selector, labels) {
			match = append(match, d.GetName())
		}
	}
	if len(match) != 1 {
		return "", 0, nil, fmt.Errorf("%s selects %d Deployments, want exactly one", what, len(match))
	}
	ports, _, err := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if err != nil || len(ports) == 0 {
		return "", 0, nil, fmt.Errorf("%s has no ports", what)
	}
	chosen, _ := ports[0].(map[string]interface{})
	for _, p := range ports {
		pm, _ := p.(map[string]interface{})
		if v, _, _ := unstructured.NestedInt64(pm, "port"); v == port {
			chosen = pm
		}
	}
	svcPort, _, _ := unstructured.NestedInt64(chosen, "port")
	var target interface{} = svcPort
	if t, found := chosen["targetPort"]; found {
		target = t
	}
	return match[0], svcPort, target, nil
}

func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// runtimeCopyValue deep-copies a JSON value of an unstructured object.
func runtimeCopyValue(v interface{}) interface{} {
	return runtimeCopy(map[string]interface{}{"v": v})["v"]
}
