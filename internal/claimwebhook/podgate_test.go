package claimwebhook

import (
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/drastack/drastack/internal/bundle"
	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/webhookcert"
)

// buildDefault is `kustomize build config/default`: what `make deploy`
// installs.
func buildDefault(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	objs, err := bundle.Build("../../config/default")
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func findObject(t *testing.T, objs []*unstructured.Unstructured, kind, name string, out any) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no %s %q in the build", kind, name)
}

// TestWebhookConfigurationsAgree keeps the places the operator's webhooks
// (the pod gate and the claim finalizer) are defined the same webhooks: the
// +kubebuilder:webhook markers (controller-gen's
// config/webhook/manifests.yaml), what `make deploy` installs
// (config/default, with its Service, the names the operator looks for and
// the RBAC that lets it set the caBundle), what a self-signed operator
// registers (Webhooks) and the bundle's webhook definitions (which cannot
// carry matchConditions and namespaceSelector, see
// internal/bundle/webhooks.go).
func TestWebhookConfigurationsAgree(t *testing.T) {
	data, err := os.ReadFile("../../config/webhook/manifests.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var generated admissionregistrationv1.MutatingWebhookConfiguration
	if err := yaml.Unmarshal(data, &generated); err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{WebhookName: WebhookPath, ClaimWebhookName: ClaimWebhookPath}
	none := func(string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{}
	}
	wants := Webhooks(none, "")
	// byName checks that hooks are the operator's webhooks, one each,
	// and returns them by name with their clientConfig path and the
	// clientConfig cleared.
	byName := func(t *testing.T, hooks []admissionregistrationv1.MutatingWebhook) (map[string]admissionregistrationv1.MutatingWebhook, map[string]*admissionregistrationv1.ServiceReference) {
		t.Helper()
		out := map[string]admissionregistrationv1.MutatingWebhook{}
		svcs := map[string]*admissionregistrationv1.ServiceReference{}
		for _, h := range hooks {
			if _, ok := paths[h.Name]; !ok {
				t.Errorf("webhook %s is not one of the operator's %v", h.Name, webhookNames)
			}
			svcs[h.Name] = h.ClientConfig.Service
			h.ClientConfig = admissionregistrationv1.WebhookClientConfig{}
			out[h.Name] = h
		}
		if len(out) != len(webhookNames) || len(hooks) != len(webhookNames) {
			t.Fatalf("webhooks %v, want one each of %v", slices.Collect(maps.Keys(out)), webhookNames)
		}
		return out, svcs
	}

	t.Run("the markers are Webhooks", func(t *testing.T) {
		got, svcs := byName(t, generated.Webhooks)
		for _, want := range wants {
			if svc := svcs[want.Name]; svc == nil || svc.Path == nil || *svc.Path != paths[want.Name] {
				t.Errorf("generated webhook %s path = %+v, want %s", want.Name, svc, paths[want.Name])
			}
			if !reflect.DeepEqual(got[want.Name], want) {
				t.Errorf("marker-generated webhook\n%+v\ndiffers from Webhooks\n%+v\n(run make manifests after changing either)", got[want.Name], want)
			}
			if *want.FailurePolicy != admissionregistrationv1.Ignore {
				t.Errorf("webhook %s must fail open (see the comment in podgate.go)", want.Name)
			}
		}
	})

	objs := buildDefault(t)
	var deployment appsv1.Deployment
	findObject(t, objs, "Deployment", "", &deployment)
	namespace := deployment.Namespace

	t.Run("make deploy installs Webhooks behind their Service, under the names the operator uses", func(t *testing.T) {
		var cfg admissionregistrationv1.MutatingWebhookConfiguration
		findObject(t, objs, "MutatingWebhookConfiguration", webhookcert.DefaultWebhookConfigName, &cfg)
		got, svcs := byName(t, cfg.Webhooks)
		for _, w := range Webhooks(none, namespace) {
			svc := svcs[w.Name]
			if svc == nil || svc.Name != webhookcert.DefaultWebhookServiceName || svc.Namespace != namespace || svc.Path == nil || *svc.Path != paths[w.Name] {
				t.Errorf("webhook %s: clientConfig.service = %+v, want %s/%s%s", w.Name, svc, namespace, webhookcert.DefaultWebhookServiceName, paths[w.Name])
			}
			if !reflect.DeepEqual(got[w.Name], w) {
				t.Errorf("config/default's webhook\n%+v\ndiffers from Webhooks for namespace %s\n%+v", got[w.Name], namespace, w)
			}
		}
		if namespace != DefaultNamespace {
			t.Errorf("config/default installs into %s, DefaultNamespace is %s", namespace, DefaultNamespace)
		}

		var service corev1.Service
		findObject(t, objs, "Service", webhookcert.DefaultWebhookServiceName, &service)
		for k, v := range service.Spec.Selector {
			if deployment.Spec.Template.Labels[k] != v {
				t.Errorf("Service selects %s=%s, the manager's pods have %q", k, v, deployment.Spec.Template.Labels[k])
			}
		}
		port := "--webhook-port=" + service.Spec.Ports[0].TargetPort.String()
		if args := deployment.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, port) {
			t.Errorf("the Service targets port %s, the manager's args are %v", service.Spec.Ports[0].TargetPort.String(), args)
		}
	})

	t.Run("the operator may read, watch and patch that one configuration, nothing more", func(t *testing.T) {
		var role rbacv1.ClusterRole
		findObject(t, objs, "ClusterRole", "drastack-manager-role", &role)
		found := false
		for _, r := range role.Rules {
			if !slices.Contains(r.Resources, "mutatingwebhookconfigurations") {
				continue
			}
			found = true
			slices.Sort(r.Verbs)
			if !reflect.DeepEqual(r.ResourceNames, []string{webhookcert.DefaultWebhookConfigName}) || !reflect.DeepEqual(r.Verbs, []string{"get", "patch", "watch"}) {
				t.Errorf("rule %+v, want get, watch (by name: no list) and patch on %s only", r, webhookcert.DefaultWebhookConfigName)
			}
		}
		if !found {
			t.Error("no rule lets the operator set the caBundle")
		}
	})

	t.Run("the bundle's definitions carry every field OLM has", func(t *testing.T) {
		data, err := os.ReadFile("../../bundle/manifests/drastack.clusterserviceversion.yaml")
		if err != nil {
			t.Fatal(err)
		}
		var csv struct {
			Spec struct {
				WebhookDefinitions []struct {
					GenerateName            string                                          `json:"generateName"`
					WebhookPath             string                                          `json:"webhookPath"`
					Rules                   []admissionregistrationv1.RuleWithOperations    `json:"rules"`
					FailurePolicy           *admissionregistrationv1.FailurePolicyType      `json:"failurePolicy"`
					MatchPolicy             *admissionregistrationv1.MatchPolicyType        `json:"matchPolicy"`
					SideEffects             *admissionregistrationv1.SideEffectClass        `json:"sideEffects"`
					TimeoutSeconds          *int32                                          `json:"timeoutSeconds"`
					AdmissionReviewVersions []string                                        `json:"admissionReviewVersions"`
					ReinvocationPolicy      *admissionregistrationv1.ReinvocationPolicyType `json:"reinvocationPolicy"`
				} `json:"webhookdefinitions"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(data, &csv); err != nil {
			t.Fatal(err)
		}
		var hooks []admissionregistrationv1.MutatingWebhook
		for _, d := range csv.Spec.WebhookDefinitions {
			if d.WebhookPath != paths[d.GenerateName] {
				t.Errorf("bundle webhook definition %s has path %s, want %s", d.GenerateName, d.WebhookPath, paths[d.GenerateName])
			}
			hooks = append(hooks, admissionregistrationv1.MutatingWebhook{
				Name: d.GenerateName, Rules: d.Rules, FailurePolicy: d.FailurePolicy, MatchPolicy: d.MatchPolicy,
				SideEffects: d.SideEffects, TimeoutSeconds: d.TimeoutSeconds, AdmissionReviewVersions: d.AdmissionReviewVersions,
				ReinvocationPolicy: d.ReinvocationPolicy,
			})
		}
		got, _ := byName(t, hooks)
		for _, want := range wants {
			g := got[want.Name]
			// Not carried by OLM: the OperatorGroup decides the namespaces
			// and the handlers check their conditions themselves.
			g.MatchConditions, g.NamespaceSelector = want.MatchConditions, want.NamespaceSelector
			if !reflect.DeepEqual(g, want) {
				t.Errorf("bundle webhook definition\n%+v\ndiffers from Webhooks\n%+v", g, want)
			}
		}
	})
}

func TestGatePatch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		gates []corev1.PodSchedulingGate
		op    string
		path  string
	}{
		{"no gates yet: the list is created", nil, "add", "/spec/schedulingGates"},
		{"other gates: ours is appended", []corev1.PodSchedulingGate{{Name: "other"}}, "add", "/spec/schedulingGates/-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := gatePatch(&corev1.Pod{Spec: corev1.PodSpec{SchedulingGates: tc.gates}})
			if p.Operation != tc.op || p.Path != tc.path {
				t.Errorf("patch = %s %s, want %s %s", p.Operation, p.Path, tc.op, tc.path)
			}
			raw, err := p.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(raw), claimpolicy.SchedulingGate) {
				t.Errorf("patch %s does not add %s", raw, claimpolicy.SchedulingGate)
			}
		})
	}
}
