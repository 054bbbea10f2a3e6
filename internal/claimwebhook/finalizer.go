package claimwebhook

import (
	"context"
	"net/http"

	"gomodules.xyz/jsonpatch/v2"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/drastack/drastack/internal/claimpolicy"
)

// The claim admission webhook puts the delete-protection finalizer
// (resource.kubernetes.io/delete-protection) on a new claim the operator
// will allocate, so that writing its allocation later takes one API
// request (status.allocation) instead of two (the finalizer first, then
// the allocation, as kube-scheduler writes them). The finalizer is the
// one kube-scheduler adds itself before it writes an allocation, and
// kube-controller-manager removes it from a deleted claim that nothing
// reserves, allocated or not, so a claim that is never allocated (or that
// kube-scheduler ends up allocating) is deleted as before.
//
// It is an optimization only. failurePolicy is Ignore, as for the pod
// webhook: a claim created while the operator is unreachable has no
// finalizer, and the operator adds it before the allocation as it always
// did (write: the finalizer is checked on every write). Which claims are
// the operator's is decided by claimpolicy.SelectClaim, the same function
// the claim loop uses, from the DRAStack at creation; a claim that stops
// being the operator's keeps a finalizer kube-scheduler would add anyway.
// It never rejects a claim.
//
// +kubebuilder:webhook:path=/mutate-claims-finalizer,mutating=true,failurePolicy=ignore,sideEffects=None,groups=resource.k8s.io,resources=resourceclaims,verbs=create,versions=v1,name=claim-finalizer.drastack.io,admissionReviewVersions=v1,timeoutSeconds=5,matchPolicy=Equivalent,reinvocationPolicy=Never,patch=`{"namespaceSelector":{"matchExpressions":[{"key":"kubernetes.io/metadata.name","operator":"NotIn","values":["kube-system","drastack-system"]}]}}`

// Claim webhook wiring.
const (
	// ClaimWebhookPath is where the claim webhook is served.
	ClaimWebhookPath = "/mutate-claims-finalizer"
	// ClaimWebhookName is its name in the MutatingWebhookConfiguration.
	ClaimWebhookName = "claim-finalizer.drastack.io"
)

// FinalizerWebhook is the claim webhook's definition, as GateWebhook is the
// pod webhook's: the same policies and namespaces, for ResourceClaim
// creations (matchPolicy Equivalent: also through the older API versions).
func FinalizerWebhook(cc admissionregistrationv1.WebhookClientConfig, operatorNamespace string) admissionregistrationv1.MutatingWebhook {
	w := GateWebhook(cc, operatorNamespace)
	w.Name = ClaimWebhookName
	w.Rules[0].Rule = admissionregistrationv1.Rule{
		APIGroups:   []string{resourceapi.GroupName},
		APIVersions: []string{resourceapi.SchemeGroupVersion.Version},
		Resources:   []string{"resourceclaims"},
	}
	w.MatchConditions = nil
	return w
}

// Webhooks are the operator's webhooks in the order every configuration
// lists them (the pod gate first), each with the client configuration
// clientFor returns for its path.
func Webhooks(clientFor func(path string) admissionregistrationv1.WebhookClientConfig, operatorNamespace string) []admissionregistrationv1.MutatingWebhook {
	return []admissionregistrationv1.MutatingWebhook{
		GateWebhook(clientFor(WebhookPath), operatorNamespace),
		FinalizerWebhook(clientFor(ClaimWebhookPath), operatorNamespace),
	}
}

// webhookNames are the names of Webhooks, in order.
var webhookNames = []string{WebhookName, ClaimWebhookName}

// ClaimFinalizer is the claim admission handler (see above).
type ClaimFinalizer struct {
	// Client reads the DRAStack from the cache; APIReader when the cache
	// cannot answer yet.
	Client    client.Reader
	APIReader client.Reader
	// Decoder decodes claims.
	Decoder admission.Decoder
}

// Handle implements admission.Handler.
func (f *ClaimFinalizer) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create {
		return admission.Allowed("")
	}
	var claim resourceapi.ResourceClaim
	if err := f.Decoder.Decode(req, &claim); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if claimpolicy.HasFinalizer(&claim) {
		return admission.Allowed("")
	}
	cfg, ok := admissionConfig(ctx, f.Client, f.APIReader, "claim admitted without the finalizer")
	if !ok || claimpolicy.SelectClaim(cfg, &claim) == claimpolicy.WhyNone {
		return admission.Allowed("")
	}
	return admission.Patched("", finalizerPatch(&claim))
}

// finalizerPatch adds the finalizer with one JSON patch operation (see
// gatePatch).
func finalizerPatch(c *resourceapi.ResourceClaim) jsonpatch.JsonPatchOperation {
	if len(c.Finalizers) == 0 {
		return jsonpatch.NewOperation("add", "/metadata/finalizers", []any{claimpolicy.Finalizer})
	}
	return jsonpatch.NewOperation("add", "/metadata/finalizers/-", claimpolicy.Finalizer)
}
