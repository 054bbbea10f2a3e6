package claims

import (
	"context"
	"fmt"
	"net/http"

	"gomodules.xyz/jsonpatch/v2"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	claimspkg "github.com/drastack/drastack/internal/claims"
)

// The pod admission webhook. The marker below makes controller-gen write
// config/webhook/manifests.yaml, which the bundle generator turns into the
// CSV's webhookdefinitions; GateWebhook builds the same definition for the
// self-signed registration of local runs (a test keeps the two equal).
//
// failurePolicy is Ignore, deliberately. The webhook sees every pod
// creation in the cluster; with Fail, an operator that is down or
// unreachable would stop every Deployment, Job and DaemonSet of every team
// (its own replacement pod included, unless its namespace were excluded,
// and kube-system with it) for the sake of a few pods with CEL-constrained
// claims. With Ignore the cost of an outage is bounded and visible: pods
// created while the webhook is unreachable are not gated, so kube-scheduler
// may allocate their operator-allocated claims itself (without the CEL
// constraints; immediate claims are still allocated by the operator first
// in the usual case, since they exist before their pods). The claims
// themselves are never touched by the webhook. timeoutSeconds is short for
// the same reason: a slow operator must not slow every pod creation.
//
// +kubebuilder:webhook:path=/mutate-pods-claim-gate,mutating=true,failurePolicy=ignore,sideEffects=None,groups="",resources=pods,verbs=create,versions=v1,name=claim-gate.drastack.io,admissionReviewVersions=v1,timeoutSeconds=5,matchPolicy=Equivalent,reinvocationPolicy=Never

// Webhook wiring.
const (
	// WebhookPath is where the webhook is served.
	WebhookPath = "/mutate-pods-claim-gate"
	// WebhookName is the webhook's name in the MutatingWebhookConfiguration.
	WebhookName = "claim-gate.drastack.io"
	// webhookTimeoutSeconds bounds each call (see the comment above).
	webhookTimeoutSeconds = 5
)

// GateWebhook is the webhook definition, with clientConfig left to the
// caller (a URL for local runs; OLM fills in its service).
func GateWebhook(cc admissionregistrationv1.WebhookClientConfig) admissionregistrationv1.MutatingWebhook {
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
	var st v1alpha1.DRAStack
	var stack *v1alpha1.DRAStack
	if found, err := g.get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, &st); err != nil {
		// Without the configuration nothing can be decided; Ignore
		// semantics: let the pod through ungated.
		log.FromContext(ctx).Error(err, "Reading the DRAStack failed; pod admitted without a gate")
		return admission.Allowed("")
	} else if found {
		stack = &st
	}
	cfg := claimspkg.ConfigFrom(stack)
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
	need, why := claimspkg.NeedsGate(cfg, &pod, claimLookup, templateLookup)
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
	gate := map[string]any{"name": claimspkg.SchedulingGate}
	if len(pod.Spec.SchedulingGates) == 0 {
		return jsonpatch.NewOperation("add", "/spec/schedulingGates", []any{gate})
	}
	return jsonpatch.NewOperation("add", "/spec/schedulingGates/-", gate)
}

// get reads from the cache, and from the API server when the cache does
// not have the object or cannot answer (not started yet).
func (g *PodGate) get(ctx context.Context, key types.NamespacedName, obj client.Object) (bool, error) {
	err := g.Client.Get(ctx, key, obj)
	if err == nil {
		return true, nil
	}
	if g.APIReader == nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	err = g.APIReader.Get(ctx, key, obj)
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	}
	return false, err
}

// SetupWebhook serves PodGate on the manager's webhook server. With
// selfSigned it also registers the MutatingWebhookConfiguration that
// points the API server at it (local runs); otherwise OLM registers it
// from the bundle.
func SetupWebhook(mgr ctrl.Manager, selfSigned *SelfSigned) error {
	mgr.GetWebhookServer().Register(WebhookPath, &admission.Webhook{Handler: &PodGate{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Decoder:   admission.NewDecoder(mgr.GetScheme()),
	}})
	if selfSigned == nil {
		return nil
	}
	if err := mgr.Add(&Registrar{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), SelfSigned: selfSigned}); err != nil {
		return fmt.Errorf("add the webhook registrar: %w", err)
	}
	return nil
}
