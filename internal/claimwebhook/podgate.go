package claimwebhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"gomodules.xyz/jsonpatch/v2"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/webhookcert"
)

// The pod admission webhook. The marker below makes controller-gen write
// config/webhook/manifests.yaml, which `make deploy` (config/default)
// installs and the bundle generator turns into the CSV's
// webhookdefinitions; GateWebhook builds the same definition for the
// self-signed registration of local runs (a test keeps the three equal).
//
// failurePolicy is Ignore, deliberately. The webhook sees pod creations
// across the cluster; with Fail, an operator that is down or unreachable
// would stop every Deployment, Job and DaemonSet of every team that uses
// claims for the sake of a few pods with CEL-constrained claims. With
// Ignore the cost of an outage is bounded and visible: pods created while
// the webhook is unreachable are not gated, so kube-scheduler may allocate
// their operator-allocated claims itself (without the CEL constraints;
// immediate claims are still allocated by the operator first in the usual
// case, since they exist before their pods). This webhook never touches
// claims (the claim webhook of finalizer.go only adds the
// delete-protection finalizer to new ones). timeoutSeconds is short for the same
// reason: a slow operator must not slow every pod creation.
//
// Only pods that can need the gate reach the webhook at all:
//   - matchConditions: the API server sends only pods with
//     spec.resourceClaims (the handler checks the same first, for API
//     servers or bundles that cannot carry matchConditions). In a webhook
//     match condition `object` is the object of the request, null only for
//     DELETE, which the rules leave out;
//   - namespaceSelector: never kube-system, nor the operator's own
//     namespace, so the operator's replacement pod and the control plane
//     never wait for it. The namespace label kubernetes.io/metadata.name is
//     set by the API server on every namespace. config/default rewrites the
//     operator namespace here when its `namespace:` changes.
//
// OLM's WebhookDescription carries neither field: under OLM the namespaces
// are the OperatorGroup's and every pod creation in them reaches the
// webhook (internal/bundle/webhooks.go).
//
// +kubebuilder:webhook:path=/mutate-pods-claim-gate,mutating=true,failurePolicy=ignore,sideEffects=None,groups="",resources=pods,verbs=create,versions=v1,name=claim-gate.drastack.io,admissionReviewVersions=v1,timeoutSeconds=5,matchPolicy=Equivalent,reinvocationPolicy=Never,patch=`{"matchConditions":[{"name":"has-resource-claims","expression":"has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0"}],"namespaceSelector":{"matchExpressions":[{"key":"kubernetes.io/metadata.name","operator":"NotIn","values":["kube-system","drastack-system"]}]}}`

// Webhook wiring.
const (
	// WebhookPath is where the webhook is served.
	WebhookPath = "/mutate-pods-claim-gate"
	// WebhookName is the webhook's name in the MutatingWebhookConfiguration.
	WebhookName = "claim-gate.drastack.io"
	// DefaultNamespace is the operator's namespace in config/default; the
	// marker above names it in the namespace selector.
	DefaultNamespace = "drastack-system"
	// webhookTimeoutSeconds bounds each call (see the comment above).
	webhookTimeoutSeconds = 5
	// matchConditionName names the resourceClaims match condition.
	matchConditionName = "has-resource-claims"
	// matchConditionExpression lets only pods with claims reach the webhook.
	matchConditionExpression = "has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0"
)

// GateWebhook is the webhook definition, with clientConfig left to the
// caller (a URL for local runs; a Service in config/default and under
// OLM). operatorNamespace is left out of the namespaceSelector with
// kube-system; empty means DefaultNamespace.
func GateWebhook(cc admissionregistrationv1.WebhookClientConfig, operatorNamespace string) admissionregistrationv1.MutatingWebhook {
	if operatorNamespace == "" {
		operatorNamespace = DefaultNamespace
	}
	excluded := []string{metav1.NamespaceSystem}
	if operatorNamespace != metav1.NamespaceSystem {
		excluded = append(excluded, operatorNamespace)
	}
	return admissionregistrationv1.MutatingWebhook{
		Name:                    WebhookName,
		ClientConfig:            cc,
		AdmissionReviewVersions: []string{"v1"},
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
		FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
		MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
		ReinvocationPolicy:      ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
		TimeoutSeconds:          ptr.To[int32](webhookTimeoutSeconds),
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule: admissionregistrationv1.Rule{
				APIGroups:   []string{""},
				APIVersions: []string{"v1"},
				Resources:   []string{"pods"},
			},
		}},
		MatchConditions: []admissionregistrationv1.MatchCondition{{
			Name:       matchConditionName,
			Expression: matchConditionExpression,
		}},
		NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key:      corev1.LabelMetadataName,
			Operator: metav1.LabelSelectorOpNotIn,
			Values:   excluded,
		}}},
	}
}

// PodGate is the admission handler: it adds the scheduling gate
// resource.drastack.io/allocation to a new pod when one of its claims is,
// or will be, allocated by the operator (claims.NeedsGate), so that
// kube-scheduler leaves the pod alone until then. It never rejects a pod.
type PodGate struct {
	// Client reads the DRAStack, claims and templates from the cache.
	Client client.Reader
	// APIReader reads from the API server what the cache does not know
	// yet (a claim created just before its pod) or cannot serve yet.
	APIReader client.Reader
	// Decoder decodes pods; default admission.NewDecoder of the client-go
	// scheme.
	Decoder admission.Decoder
}

// Handle implements admission.Handler.
func (g *PodGate) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create {
		return admission.Allowed("")
	}
	var pod corev1.Pod
	if err := g.Decoder.Decode(req, &pod); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if len(pod.Spec.ResourceClaims) == 0 {
		return admission.Allowed("")
	}
	ns := req.Namespace
	if ns == "" {
		ns = pod.Namespace
	}
	cfg, ok := admissionConfig(ctx, g.Client, g.APIReader, "pod admitted without a gate")
	if !ok {
		return admission.Allowed("")
	}
	claimLookup := func(name string) (*resourceapi.ResourceClaim, bool) {
		var c resourceapi.ResourceClaim
		found, err := g.get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &c)
		return &c, found && err == nil
	}
	templateLookup := func(name string) (*resourceapi.ResourceClaimTemplate, bool) {
		var t resourceapi.ResourceClaimTemplate
		found, err := g.get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &t)
		return &t, found && err == nil
	}
	need, why := claimpolicy.NeedsGate(cfg, &pod, claimLookup, templateLookup)
	if !need {
		return admission.Allowed("")
	}
	log.FromContext(ctx).V(1).Info("Gated pod", "namespace", ns, "pod", pod.Name, "generateName", pod.GenerateName, "why", why)
	return admission.Patched("", gatePatch(&pod))
}

// gatePatch adds the gate with one JSON patch operation, rather than a
// diff of the re-encoded pod, which could touch fields this operator's
// API version does not know.
func gatePatch(pod *corev1.Pod) jsonpatch.JsonPatchOperation {
	gate := map[string]any{"name": claimpolicy.SchedulingGate}
	if len(pod.Spec.SchedulingGates) == 0 {
		return jsonpatch.NewOperation("add", "/spec/schedulingGates", []any{gate})
	}
	return jsonpatch.NewOperation("add", "/spec/schedulingGates/-", gate)
}

// get reads from the cache, and from the API server when the cache does
// not have the object or cannot answer (not started yet).
func (g *PodGate) get(ctx context.Context, key types.NamespacedName, obj client.Object) (bool, error) {
	return readThrough(ctx, g.Client, g.APIReader, key, obj)
}

// admissionConfig reads the claim configuration for an admission handler.
// Without it nothing can be decided: it logs the error with what the
// handler does instead (Ignore semantics, the object is let through
// unchanged) and reports false.
func admissionConfig(ctx context.Context, cache, api client.Reader, instead string) (claimpolicy.Config, bool) {
	var st v1alpha1.DRAStack
	found, err := readThrough(ctx, cache, api, types.NamespacedName{Name: v1alpha1.DRAStackName}, &st)
	if err != nil {
		log.FromContext(ctx).Error(err, "Reading the DRAStack failed; "+instead)
		return claimpolicy.Config{}, false
	}
	if !found {
		return claimpolicy.ConfigFrom(nil), true
	}
	return claimpolicy.ConfigFrom(&st), true
}

// readThrough reads obj from cache, and from api (when set) if the cache
// does not have it or cannot answer; it reports whether obj was found.
func readThrough(ctx context.Context, cache, api client.Reader, key types.NamespacedName, obj client.Object) (bool, error) {
	err := cache.Get(ctx, key, obj)
	if err == nil {
		return true, nil
	}
	if api == nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	err = api.Get(ctx, key, obj)
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	}
	return false, err
}

// SelfRegistration says how an operator that made its own certificate
// (no OLM) makes the API server call its webhook.
type SelfRegistration struct {
	// SelfSigned is the certificate the webhook server presents.
	SelfSigned *webhookcert.SelfSigned
	// ConfigName, in the cluster (`make deploy`), is the existing
	// MutatingWebhookConfiguration whose caBundle is set
	// (CABundleInjector). Empty, outside the cluster (tests, `make demo`),
	// the Registrar registers webhookcert.SelfSignedWebhookConfigName with a URL to
	// SelfSigned.Host:Port.
	ConfigName string
	// Namespace is the operator's namespace, which a URL registration
	// leaves out of the webhook's namespaceSelector.
	Namespace string
}

// SetupWebhook serves PodGate and ClaimFinalizer on the manager's webhook
// server. With reg it also points the API server at it: it registers the
// webhook (outside the cluster) or sets the caBundle of config/default's
// configuration; without, OLM registers it from the bundle. The checker it
// returns is the replica's readiness: the webhook server serves, and the
// API server trusts this replica's certificate (its CA is in the
// configuration, or the configuration it registered is written; under OLM
// the mounted certificate is the one OLM put in the configuration).
func SetupWebhook(mgr ctrl.Manager, reg *SelfRegistration) (healthz.Checker, error) {
	srv := mgr.GetWebhookServer()
	srv.Register(WebhookPath, &admission.Webhook{Handler: &PodGate{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Decoder:   admission.NewDecoder(mgr.GetScheme()),
	}})
	srv.Register(ClaimWebhookPath, &admission.Webhook{Handler: &ClaimFinalizer{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Decoder:   admission.NewDecoder(mgr.GetScheme()),
	}})
	serving := srv.StartedChecker()
	if reg == nil {
		return serving, nil
	}
	var runnable manager.Runnable
	var trusted func() bool
	if reg.ConfigName != "" {
		cs, err := kubernetes.NewForConfig(mgr.GetConfig())
		if err != nil {
			return nil, fmt.Errorf("client for the webhook configuration: %w", err)
		}
		inj := &webhookcert.CABundleInjector{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ConfigName: reg.ConfigName,
			Webhooks: webhookNames, CABundle: reg.SelfSigned.CABundle, Watch: webhookcert.WatchConfiguration(cs, reg.ConfigName)}
		runnable, trusted = inj, inj.Injected
	} else {
		r := &webhookcert.Registrar{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), SelfSigned: reg.SelfSigned,
			Webhooks: func(clientFor func(path string) admissionregistrationv1.WebhookClientConfig) []admissionregistrationv1.MutatingWebhook {
				return Webhooks(clientFor, reg.Namespace)
			}}
		runnable, trusted = r, r.Registered
	}
	if err := mgr.Add(runnable); err != nil {
		return nil, fmt.Errorf("add the webhook registration: %w", err)
	}
	return func(req *http.Request) error {
		if err := serving(req); err != nil {
			return err
		}
		if !trusted() {
			return errors.New("the API server does not trust this replica's webhook certificate yet")
		}
		return nil
	}, nil
}
