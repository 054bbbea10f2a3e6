//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/claimwebhook"
	"github.com/drastack/drastack/internal/operator"
	"github.com/drastack/drastack/internal/webhookcert"
	"github.com/drastack/drastack/test/cluster"
)

// The webhooks as OLM installs them: from the CSV's webhookdefinitions,
// which carry no namespaceSelector and no matchConditions, so their
// objectSelector is all that keeps requests away. The test registers the
// bundle's definitions as OLM would (every namespace: an AllNamespaces
// OperatorGroup), calling the in-process operator by URL, and counts the
// requests that reach each webhook. It also checks the operator's
// readiness: ready only once the webhook serves with a certificate the API
// server trusts.

const (
	olmNamespace = "olm-scope"
	olmDriver    = "olm.example.com"
	olmClass     = "olm-central"
	// csvPath is the committed bundle's ClusterServiceVersion.
	csvPath = "../../bundle/manifests/drastack.clusterserviceversion.yaml"
)

type olmKey struct{}

type olmState struct {
	c       *cluster.Cluster
	crc     client.Client
	stop    func()
	restore func()
	probe   string
}

// olmWebhookConfiguration turns the CSV's webhookdefinitions into the
// MutatingWebhookConfiguration OLM would create for an AllNamespaces
// install (no namespaceSelector), calling url+webhookPath, under the name
// whose caBundle the operator sets.
func olmWebhookConfiguration(t *testing.T, url string) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	data, err := os.ReadFile(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	var csv unstructured.Unstructured
	if err := yaml.Unmarshal(data, &csv.Object); err != nil {
		t.Fatal(err)
	}
	defs, _, err := unstructured.NestedSlice(csv.Object, "spec", "webhookdefinitions")
	if err != nil || len(defs) == 0 {
		t.Fatalf("the CSV has no webhookdefinitions: %v", err)
	}
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: webhookcert.DefaultWebhookConfigName}}
	for _, d := range defs {
		var def struct {
			admissionregistrationv1.MutatingWebhook `json:",inline"`
			GenerateName                            string `json:"generateName"`
			WebhookPath                             string `json:"webhookPath"`
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(d.(map[string]any), &def); err != nil {
			t.Fatal(err)
		}
		w := def.MutatingWebhook
		w.Name = def.GenerateName
		w.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: ptr.To(url + def.WebhookPath)}
		if w.NamespaceSelector != nil || len(w.MatchConditions) > 0 {
			t.Fatalf("webhook definition %s carries fields OLM does not have", w.Name)
		}
		cfg.Webhooks = append(cfg.Webhooks, w)
	}
	return cfg
}

// webhookCalls is how many requests reached the webhook served at path.
func webhookCalls(t *testing.T, path string) float64 {
	return clMetric(t, "controller_runtime_webhook_requests_total", map[string]string{"webhook": path})
}

// webhookSeconds is the total time the webhook served at path spent.
func webhookSeconds(t *testing.T, path string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != "controller_runtime_webhook_latency_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "webhook" && lp.GetValue() == path {
					sum += m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	return sum
}

func TestWebhookScopeUnderOLM(t *testing.T) {
	feature := features.New("webhooks under OLM").
		Setup(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			crc := prepareFeature(ctx, t, c, olmNamespace)
			s := &olmState{c: c, crc: crc}
			if _, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, deviceClass(olmClass, olmDriver, ""), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			s.restore = clApplyClaimsSpec(ctx, t, crc, v1alpha1.ClaimsSpec{Engine: v1alpha1.EngineNative, GatePods: ptr.To(true),
				Central: []v1alpha1.CentralDevices{{Driver: olmDriver, Classes: []string{olmClass}}}})
			clCreateTemplate(ctx, t, c, olmNamespace, "cel", nil, clCEL("true"), clClaimSpec(olmClass, 1, ""))
			ports, err := cluster.FreePorts(2)
			if err != nil {
				t.Fatal(err)
			}
			port, probePort := ports[0], ports[1]
			s.probe = fmt.Sprintf("127.0.0.1:%d", probePort)
			if _, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx,
				olmWebhookConfiguration(t, fmt.Sprintf("https://127.0.0.1:%d", port)), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			s.stop = startOperator(ctx, t, c, operator.Options{
				MetricsAddr: "0", ProbeAddr: s.probe, ProbeNamespace: olmNamespace,
				WebhookPort: port, WebhookHost: "127.0.0.1", ShutdownTimeout: 10 * time.Second,
			})
			return context.WithValue(ctx, olmKey{}, s)
		}).
		Assess("readyz waits until the webhook serves with a certificate the API server trusts", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := ctx.Value(olmKey{}).(*olmState)
			begin := time.Now()
			notReady := 0
			err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, clTimeout, true, func(ctx context.Context) (bool, error) {
				resp, err := http.Get("http://" + s.probe + "/readyz")
				if err != nil {
					return false, nil //nolint:nilerr // not listening yet
				}
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					notReady++
				}
				return resp.StatusCode == http.StatusOK, nil
			})
			if err != nil {
				t.Fatalf("the operator never became ready: %v", err)
			}
			t.Logf("timing: operator started -> ready in %s (%d not-ready answers before)", since(begin), notReady)
			// Ready means: the caBundle holds this replica's CA, and the API
			// server calls the webhook with it. So the first pod created
			// now is gated, with no retry.
			cfg, err := s.c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, webhookcert.DefaultWebhookConfigName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range cfg.Webhooks {
				if len(w.ClientConfig.CABundle) == 0 {
					t.Errorf("ready, but webhook %s has no caBundle", w.Name)
				}
			}
			pod, err := s.c.Client.CoreV1().Pods(olmNamespace).Create(ctx, claimPod(olmNamespace, "first", "cel"), metav1.CreateOptions{DryRun: dry})
			if err != nil {
				t.Fatal(err)
			}
			if !claimpolicy.HasGate(pod) {
				t.Errorf("ready, but the first pod with an operator claim is not gated: the webhook was not called or not trusted")
			}
			return ctx
		}).
		Assess("what reaches the webhooks", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := ctx.Value(olmKey{}).(*olmState)
			pod := func(ns, name string, labels map[string]string, template string) *corev1.Pod {
				p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
				if template != "" {
					p = claimPod(ns, name, template)
					p.Labels = labels
				}
				return p
			}
			for _, c := range []struct {
				what    string
				pod     *corev1.Pod
				reaches bool
			}{
				{"a tenant's pod without claims", pod(olmNamespace, "plain", map[string]string{"app": "web"}, ""), true},
				{"a pod in kube-system (no namespaceSelector under OLM)", pod("kube-system", "system", nil, ""), true},
				{"a pod with an operator claim", pod(olmNamespace, "cel", nil, "cel"), true},
				{"the operator's own pod", pod(olmNamespace, "operator", map[string]string{"app.kubernetes.io/name": "drastack", "control-plane": "controller-manager"}, ""), false},
				{"a driver's kubelet plugin", pod(olmNamespace, "plugin", map[string]string{"drastack.io/component": "kubelet-plugin"}, ""), false},
				{"a static control-plane pod", pod("kube-system", "kube-apiserver-x", map[string]string{"tier": "control-plane", "component": "kube-apiserver"}, ""), false},
			} {
				before := webhookCalls(t, claimwebhook.WebhookPath)
				seconds := webhookSeconds(t, claimwebhook.WebhookPath)
				if _, err := s.c.Client.CoreV1().Pods(c.pod.Namespace).Create(ctx, c.pod, metav1.CreateOptions{DryRun: dry}); err != nil {
					t.Fatalf("%s: %v", c.what, err)
				}
				calls := webhookCalls(t, claimwebhook.WebhookPath) - before
				if (calls > 0) != c.reaches {
					t.Errorf("%s: %v calls of the pod webhook, want it reached: %v", c.what, calls, c.reaches)
				}
				if calls > 0 {
					t.Logf("measure: %s reaches the pod webhook, answered in %.1f ms", c.what, 1000*(webhookSeconds(t, claimwebhook.WebhookPath)-seconds)/calls)
				}
			}
			claim := func(name string, labels, annotations map[string]string) *resourceapi.ResourceClaim {
				return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: olmNamespace, Name: name, Labels: labels, Annotations: annotations},
					Spec: clClaimSpec(olmClass, 1, "")}
			}
			for _, c := range []struct {
				what    string
				claim   *resourceapi.ResourceClaim
				reaches bool
			}{
				{"an Immediate claim", claim("imm", map[string]string{claimpolicy.AllocationLabel: claimpolicy.AllocationImmediate}, nil), true},
				{"a CEL claim (gets its finalizer before its allocation instead)", claim("cel", nil, clCEL("true")), false},
				{"a plain claim", claim("plain", nil, nil), false},
			} {
				before := webhookCalls(t, claimwebhook.ClaimWebhookPath)
				got, err := s.c.Client.ResourceV1().ResourceClaims(olmNamespace).Create(ctx, c.claim, metav1.CreateOptions{DryRun: dry})
				if err != nil {
					t.Fatalf("%s: %v", c.what, err)
				}
				calls := webhookCalls(t, claimwebhook.ClaimWebhookPath) - before
				if (calls > 0) != c.reaches {
					t.Errorf("%s: %v calls of the claim webhook, want it reached: %v", c.what, calls, c.reaches)
				}
				if c.reaches && !claimpolicy.HasFinalizer(got) {
					t.Errorf("%s reached the claim webhook but has no finalizer", c.what)
				}
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s, ok := ctx.Value(olmKey{}).(*olmState)
			if !ok {
				return ctx
			}
			clRemoveWebhook(ctx, t, s.c)
			s.restore()
			s.stop()
			_ = s.c.Client.ResourceV1().DeviceClasses().Delete(ctx, olmClass, metav1.DeleteOptions{})
			clDeleteNamespace(ctx, t, s.c, olmNamespace)
			return ctx
		}).
		Feature()
	testenv.Test(t, feature)
}
