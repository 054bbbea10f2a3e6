package admissionpolicy

import (
	"fmt"
	"strings"
)

// Identity is the operator's identity as the API server sees it: a
// ServiceAccount. The fence matches requests of exactly this user.
type Identity struct {
	// Namespace and ServiceAccount name the operator's ServiceAccount.
	Namespace      string
	ServiceAccount string
}

// DefaultIdentity is the ServiceAccount config/default installs.
var DefaultIdentity = Identity{Namespace: "drastack-system", ServiceAccount: "drastack-controller-manager"}

// serviceAccountPrefix starts the user name of every ServiceAccount.
const serviceAccountPrefix = "system:serviceaccount:"

// Username is the user name the API server gives the ServiceAccount's
// tokens.
func (i Identity) Username() string {
	return serviceAccountPrefix + i.Namespace + ":" + i.ServiceAccount
}

// IdentityFromUsername parses a ServiceAccount's user name
// (system:serviceaccount:NAMESPACE:NAME). Any other user is an error: the
// fence would then restrict a person or a component, not the operator.
func IdentityFromUsername(username string) (Identity, error) {
	rest, ok := strings.CutPrefix(username, serviceAccountPrefix)
	ns, name, found := strings.Cut(rest, ":")
	if !ok || !found || ns == "" || name == "" || strings.Contains(name, ":") {
		return Identity{}, fmt.Errorf("user %q is not a ServiceAccount (system:serviceaccount:NAMESPACE:NAME): the admission policies fence the operator's own ServiceAccount", username)
	}
	return Identity{Namespace: ns, ServiceAccount: name}, nil
}

// Names of the policies; each binding has its policy's name.
const (
	// PodGates: the operator's pod writes only lift its scheduling gate.
	PodGates = "drastack-operator-pod-gates"
	// OwnedObjects: the operator writes only objects carrying its
	// ownership labels, namespaced ones only in its own namespaces.
	OwnedObjects = "drastack-operator-owned-objects"
	// DriverNamespace: the only namespace the operator creates or takes
	// in is the DRAStack's spec.namespace.
	DriverNamespace = "drastack-operator-driver-namespace"
	// RoleBindings: the operator's bindings bind the role of their own
	// name to ServiceAccounts only.
	RoleBindings = "drastack-operator-role-bindings"
	// HeldToGrant: permissions the operator holds only to grant them to
	// drivers are never used by it.
	HeldToGrant = "drastack-operator-held-to-grant"
	// ClaimsAndSlices: the operator creates claims only as dry runs,
	// changes only their delete-protection finalizer, and publishes only
	// node-less ResourceSlices.
	ClaimsAndSlices = "drastack-operator-claims-and-slices"
	// StackFinalizers: the operator changes only its own finalizers of the
	// DRAStack (the status is a subresource the policy does not match).
	StackFinalizers = "drastack-operator-stack-finalizers"
	// WebhookCABundle: the operator changes only the caBundle of its
	// webhook configuration.
	WebhookCABundle = "drastack-operator-webhook-cabundle"

	// TaintRules: nobody but the operator writes the operator's
	// DeviceTaintRules.
	TaintRules = "drastack-taint-rules"
	// ClaimTolerations: no claim or claim template tolerates the central
	// taint.
	ClaimTolerations = "drastack-claim-tolerations"
	// CentralClasses: a claim that asks for the operator's allocation
	// names only classes of spec.claims.central.
	CentralClasses = "drastack-claim-central-classes"

	// Probe is the policy the Installer waits for (see the package doc).
	Probe = "drastack-admission-probe"
)

// Keys, labels and names the policies check; each is defined by the code
// that sets it (named in the comment), and a test of this package checks
// they agree.
const (
	// labelStack marks every object of the driver lifecycle
	// (internal/driver LabelStack).
	labelStack = "drastack.io/stack"
	// labelComponent and labelManagedBy mark central DeviceTaintRules
	// (internal/central RuleLabels) and removal rules (internal/driver).
	labelComponent = "drastack.io/component"
	labelManagedBy = "app.kubernetes.io/managed-by"
	// componentCanary is the component label of the join barrier's canary
	// objects (internal/handover ComponentCanary).
	componentCanary = "canary"
	// fenceAnnotation is what a new allocation term's sweep writes on
	// unallocated operator claims and the DRAStack
	// (internal/controller/claims FenceAnnotation).
	fenceAnnotation = "resource.drastack.io/fence"
	managedByValue  = "drastack"
	// schedulingGate is the operator's pod scheduling gate
	// (internal/claimpolicy SchedulingGate).
	schedulingGate = "resource.drastack.io/allocation"
	// claimFinalizer is the delete-protection finalizer the operator puts
	// on its claims (internal/claimpolicy Finalizer).
	claimFinalizer = "resource.kubernetes.io/delete-protection"
	// stackFinalizerPrefix starts the DRAStack finalizers of the operator
	// (drastack.io/driver-cleanup, drastack.io/claims-cleanup).
	stackFinalizerPrefix = "drastack.io/"
	// centralTaintKey and removalTaintKey are the taint keys of the
	// operator's DeviceTaintRules (internal/central TaintKey,
	// internal/driver TaintKey).
	centralTaintKey = "resource.drastack.io/central"
	removalTaintKey = "drastack.io/driver-removal"
	// annotationRemovalPolicy is internal/driver's AnnotationRemovalPolicy.
	annotationRemovalPolicy = "drastack.io/removal-policy"
	// celAnnotation and allocationLabel ask for the operator's allocation
	// (internal/allocator CELConstraintsAnnotation, internal/claimpolicy
	// AllocationLabel with the value Immediate).
	celAnnotation   = "resource.drastack.io/cel-constraints"
	allocationLabel = "resource.drastack.io/allocation"
	immediateValue  = "Immediate"
	// probeObjectPrefix starts the names of the objects the cluster probe
	// creates as dry runs (internal/clusterprobe).
	probeObjectPrefix = "drastack-probe-"
	// defaultDriverNamespace is the DRAStack's spec.namespace default.
	defaultDriverNamespace = "drastack-drivers"
	// stackName is the DRAStack the parameterized policies read.
	stackName = "default"
)

// garbageCollectors are the identities of kube-controller-manager's garbage
// collector (with and without --use-service-account-credentials): a
// DeviceTaintRule is owned by its DRAStack and goes with it.
var garbageCollectors = []string{"system:serviceaccount:kube-system:generic-garbage-collector", "system:kube-controller-manager"}

// Labels on every object of the set: how an administrator finds them
// (kubectl get validatingadmissionpolicies -l app.kubernetes.io/part-of=drastack).
// They carry no drastack.io/stack label: they are not a driver's objects,
// and the driver lifecycle prunes what carries it.
func setLabels() map[string]string {
	return map[string]string{
		"app.kubernetes.io/part-of":   "drastack",
		"app.kubernetes.io/component": "admission-policy",
	}
}
