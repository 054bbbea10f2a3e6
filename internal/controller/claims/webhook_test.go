package claims

import (
	"crypto/tls"
	"crypto/x509"
	"net"
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
)

// buildDefault is `kustomize build config/default`: what `make deploy`
// installs.
func buildDefault(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	objs, err := bundle.Build("../../../config/default")
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

// TestWebhookConfigurationsAgree keeps the places the pod webhook is
// defined one webhook: the +kubebuilder:webhook marker (controller-gen's
// config/webhook/manifests.yaml), what `make deploy` installs
// (config/default, with its Service, the names the operator looks for and
// the RBAC that lets it set the caBundle), what a self-signed operator
// registers (GateWebhook) and the bundle's webhook definition (which
// cannot carry matchConditions and namespaceSelector, see
// internal/bundle/webhooks.go).
func TestWebhookConfigurationsAgree(t *testing.T) {
	data, err := os.ReadFile("../../../config/webhook/manifests.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var generated admissionregistrationv1.MutatingWebhookConfiguration
	if err := yaml.Unmarshal(data, &generated); err != nil {
		t.Fatal(err)
	}
	if len(generated.Webhooks) != 1 {
		t.Fatalf("config/webhook/manifests.yaml has %d webhooks, want 1", len(generated.Webhooks))
	}
	want := GateWebhook(admissionregistrationv1.WebhookClientConfig{}, "")

	t.Run("the marker is GateWebhook", func(t *testing.T) {
		got := generated.Webhooks[0]
		if got.ClientConfig.Service == nil || got.ClientConfig.Service.Path == nil || *got.ClientConfig.Service.Path != WebhookPath {
			t.Errorf("generated webhook path = %+v, want %s", got.ClientConfig.Service, WebhookPath)
		}
		got.ClientConfig = admissionregistrationv1.WebhookClientConfig{}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("marker-generated webhook\n%+v\ndiffers from GateWebhook\n%+v\n(run make manifests after changing either)", got, want)
		}
		if *want.FailurePolicy != admissionregistrationv1.Ignore {
			t.Error("the pod webhook must fail open (see the comment in webhook.go)")
		}
	})

	objs := buildDefault(t)
	var deployment appsv1.Deployment
	findObject(t, objs, "Deployment", "", &deployment)
	namespace := deployment.Namespace

	t.Run("make deploy installs GateWebhook behind its Service, under the names the operator uses", func(t *testing.T) {
		var cfg admissionregistrationv1.MutatingWebhookConfiguration
		findObject(t, objs, "MutatingWebhookConfiguration", DefaultWebhookConfigName, &cfg)
		if len(cfg.Webhooks) != 1 {
			t.Fatalf("%d webhooks, want 1", len(cfg.Webhooks))
		}
		got := cfg.Webhooks[0]
		svc := got.ClientConfig.Service
		if svc == nil || svc.Name != DefaultWebhookServiceName || svc.Namespace != namespace || svc.Path == nil || *svc.Path != WebhookPath {
			t.Errorf("clientConfig.service = %+v, want %s/%s%s", svc, namespace, DefaultWebhookServiceName, WebhookPath)
		}
		got.ClientConfig = admissionregistrationv1.WebhookClientConfig{}
		if w := GateWebhook(admissionregistrationv1.WebhookClientConfig{}, namespace); !reflect.DeepEqual(got, w) {
			t.Errorf("config/default's webhook\n%+v\ndiffers from GateWebhook for namespace %s\n%+v", got, namespace, w)
		}
		if namespace != DefaultNamespace {
			t.Errorf("config/default installs into %s, DefaultNamespace is %s", namespace, DefaultNamespace)
		}

		var service corev1.Service
		findObject(t, objs, "Service", DefaultWebhookServiceName, &service)
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
			if !reflect.DeepEqual(r.ResourceNames, []string{DefaultWebhookConfigName}) || !reflect.DeepEqual(r.Verbs, []string{"get", "list", "patch", "watch"}) {
				t.Errorf("rule %+v, want get, list, watch and patch on %s only", r, DefaultWebhookConfigName)
			}
		}
		if !found {
			t.Error("no rule lets the operator set the caBundle")
		}
	})

	t.Run("the bundle's definition carries every field OLM has", func(t *testing.T) {
		data, err := os.ReadFile("../../../bundle/manifests/drastack.clusterserviceversion.yaml")
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
		if len(csv.Spec.WebhookDefinitions) != 1 {
			t.Fatalf("%d webhook definitions, want 1", len(csv.Spec.WebhookDefinitions))
		}
		d := csv.Spec.WebhookDefinitions[0]
		got := admissionregistrationv1.MutatingWebhook{
			Name: d.GenerateName, Rules: d.Rules, FailurePolicy: d.FailurePolicy, MatchPolicy: d.MatchPolicy,
			SideEffects: d.SideEffects, TimeoutSeconds: d.TimeoutSeconds, AdmissionReviewVersions: d.AdmissionReviewVersions,
			ReinvocationPolicy: d.ReinvocationPolicy,
			// Not carried by OLM: the OperatorGroup decides the namespaces
			// and the handler checks spec.resourceClaims itself.
			MatchConditions: want.MatchConditions, NamespaceSelector: want.NamespaceSelector,
		}
		if !reflect.DeepEqual(got, want) || d.WebhookPath != WebhookPath {
			t.Errorf("bundle webhook definition\n%+v (path %s)\ndiffers from GateWebhook\n%+v", got, d.WebhookPath, want)
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

// TestSelfSignedHandshake: a client that trusts only CABundle completes a
// TLS handshake with a server using the serving certificate for 127.0.0.1,
// which is what the API server does when it calls the webhook URL.
func TestSelfSignedHandshake(t *testing.T) {
	ss, err := NewSelfSigned("127.0.0.1", 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{}
	ss.TLSOption(cfg)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_ = conn.(*tls.Conn).Handshake()
			_ = conn.Close()
		}
	}()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ss.CABundle) {
		t.Fatal("CABundle holds no certificate")
	}
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatalf("handshake with the self-signed webhook failed: %v", err)
	}
	_ = conn.Close()
	// And one that does not trust it fails.
	if conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{ServerName: "127.0.0.1"}); err == nil {
		_ = conn.Close()
		t.Error("a client without the CA must not trust the certificate")
	}
	ss.Port = 9443
	if got, want := ss.URL(), "https://"+net.JoinHostPort("127.0.0.1", "9443")+WebhookPath; got != want {
		t.Errorf("URL = %s, want %s", got, want)
	}
}
