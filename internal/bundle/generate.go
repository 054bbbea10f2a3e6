package bundle

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Bundle is a generated bundle before it is rendered to files. Keeping the
// objects lets tests look at the result without parsing YAML back.
type Bundle struct {
	// CSV is the completed ClusterServiceVersion.
	CSV *unstructured.Unstructured
	// CRDs are written one per file, in input order.
	CRDs []*unstructured.Unstructured
	// Others are the objects OLM creates from bundle files besides CRDs
	// (Services, ConfigMaps, RBAC not bound to the manager, ...).
	Others []*unstructured.Unstructured
	// Annotations are bundle/metadata/annotations.yaml and, identically,
	// the labels of bundle.Dockerfile.
	Annotations map[string]string
	// Notes say what of the input the bundle format could not carry (see
	// olmUncarriedWebhookFields and operatorAppliedKinds); hack/bundlegen
	// prints them.
	Notes []string

	opts Options
}

// Kinds the generator treats specially.
var (
	csvKind        = schema.GroupKind{Group: "operators.coreos.com", Kind: "ClusterServiceVersion"}
	crdKind        = schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}
	deploymentKind = schema.GroupKind{Group: "apps", Kind: "Deployment"}
	namespaceKind  = schema.GroupKind{Kind: "Namespace"}
)

// bundleFileKinds are the kinds OLM's registry+v1 format installs from
// files next to the CSV. Anything else must either be folded into the CSV or
// is an error, so that an object added to config/default never silently
// disappears from the bundle.
var bundleFileKinds = map[schema.GroupKind]bool{
	{Kind: "ConfigMap"}:      true,
	{Kind: "Secret"}:         true,
	{Kind: "Service"}:        true,
	{Kind: "ServiceAccount"}: true,
	{Group: "rbac.authorization.k8s.io", Kind: "Role"}:               true,
	{Group: "rbac.authorization.k8s.io", Kind: "RoleBinding"}:        true,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}:        true,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}: true,
	{Group: "monitoring.coreos.com", Kind: "PrometheusRule"}:         true,
	{Group: "monitoring.coreos.com", Kind: "ServiceMonitor"}:         true,
	{Group: "policy", Kind: "PodDisruptionBudget"}:                   true,
	{Group: "scheduling.k8s.io", Kind: "PriorityClass"}:              true,
	{Group: "networking.k8s.io", Kind: "NetworkPolicy"}:              true,
	{Group: "autoscaling.k8s.io", Kind: "VerticalPodAutoscaler"}:     true,
	{Group: "console.openshift.io", Kind: "ConsoleYAMLSample"}:       true,
	{Group: "console.openshift.io", Kind: "ConsoleQuickStart"}:       true,
	{Group: "console.openshift.io", Kind: "ConsoleCLIDownload"}:      true,
	{Group: "console.openshift.io", Kind: "ConsoleLink"}:             true,
}

// operatorAppliedKinds are kinds config/default installs that a registry+v1
// bundle cannot carry and that the operator itself applies at start
// (internal/admissionpolicy): they are left out of the bundle, each with a
// note.
var operatorAppliedKinds = map[schema.GroupKind]bool{
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicy"}:        true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicyBinding"}: true,
}

// Generate builds the bundle from the objects of `kustomize build
// config/manifests`: exactly one base CSV, the CRDs, the manager
// Deployment(s) with their RBAC, admission webhook configurations (which
// become the CSV's webhookdefinitions, see webhooks.go), samples of the
// CRDs (which become alm-examples) and other objects OLM can carry. Namespaces are dropped: OLM
// installs into the namespace of the OperatorGroup. The input is not
// modified.
func Generate(objs []*unstructured.Unstructured, opts Options) (*Bundle, error) {
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("bundle options: %w", err)
	}

	var (
		base        *unstructured.Unstructured
		crds        []*unstructured.Unstructured
		deployments []*unstructured.Unstructured
		rest        []*unstructured.Unstructured
	)
	for _, obj := range objs {
		switch obj.GroupVersionKind().GroupKind() {
		case csvKind:
			if base != nil {
				return nil, fmt.Errorf("two ClusterServiceVersions in the input: %s and %s", base.GetName(), obj.GetName())
			}
			base = obj
		case crdKind:
			crds = append(crds, obj)
		case deploymentKind:
			deployments = append(deployments, obj)
		case namespaceKind:
		default:
			rest = append(rest, obj)
		}
	}
	if base == nil {
		return nil, fmt.Errorf("no ClusterServiceVersion in the input: config/manifests must include the base CSV")
	}

	defined, err := definedKinds(crds)
	if err != nil {
		return nil, err
	}
	var examples, candidates []*unstructured.Unstructured
	for _, obj := range rest {
		if _, ok := defined[obj.GroupVersionKind().GroupKind()]; ok {
			examples = append(examples, obj)
		} else {
			candidates = append(candidates, obj)
		}
	}

	install, err := planInstall(deployments, candidates, opts.Image)
	if err != nil {
		return nil, err
	}
	webhooks, err := planWebhooks(candidates, deployments)
	if err != nil {
		return nil, err
	}
	var others []*unstructured.Unstructured
	notes := webhooks.notes
	for _, obj := range candidates {
		if install.folded[obj] || webhooks.folded[obj] {
			continue
		}
		gk := obj.GroupVersionKind().GroupKind()
		if operatorAppliedKinds[gk] {
			notes = append(notes, fmt.Sprintf("%s %s is left out: OLM cannot install it; the operator applies it at start and acts only once it is in force", gk.Kind, obj.GetName()))
			continue
		}
		if !bundleFileKinds[gk] {
			return nil, fmt.Errorf("%s %q cannot be carried by a registry+v1 bundle: remove it from config/manifests or teach hack/bundlegen about it", gk, obj.GetName())
		}
		others = append(others, withoutNamespace(obj))
	}

	csv, err := completeCSV(base, examples, install, defined, opts)
	if err != nil {
		return nil, fmt.Errorf("cluster service version: %w", err)
	}
	if len(webhooks.definitions) > 0 {
		if err := unstructured.SetNestedSlice(csv.Object, webhooks.definitions, "spec", "webhookdefinitions"); err != nil {
			return nil, fmt.Errorf("cluster service version: spec.webhookdefinitions: %w", err)
		}
	}
	annotations, err := bundleAnnotations(csv, opts)
	if err != nil {
		return nil, err
	}
	copied := make([]*unstructured.Unstructured, 0, len(crds))
	for _, crd := range crds {
		copied = append(copied, crd.DeepCopy())
	}
	return &Bundle{CSV: csv, CRDs: copied, Others: others, Annotations: annotations, Notes: notes, opts: opts}, nil
}

// withoutNamespace returns a copy of obj without metadata.namespace: OLM
// creates bundle objects in the namespace the operator is installed into,
// which the bundle cannot know.
func withoutNamespace(obj *unstructured.Unstructured) *unstructured.Unstructured {
	out := obj.DeepCopy()
	out.SetNamespace("")
	return out
}
