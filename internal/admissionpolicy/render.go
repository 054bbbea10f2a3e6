package admissionpolicy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// Pair is a policy and its binding, which has the policy's name.
type Pair struct {
	Policy  *admissionregistrationv1.ValidatingAdmissionPolicy
	Binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
}

// Set is every policy of drastack, for the operator identity id, in the
// order they are applied: the fence first (it must hold before the
// operator writes), then the partition.
func Set(id Identity) []Pair {
	return append(Fence(id), Partition(id)...)
}

// Fence are the policies on the operator's own requests.
func Fence(id Identity) []Pair {
	u := id.Username()
	return []Pair{
		podGates(u, id.Namespace),
		ownedObjects(u),
		driverNamespace(u),
		roleBindings(u),
		heldToGrant(u),
		claimsAndSlices(u, id.Namespace),
		stackFinalizers(u),
		webhookCABundle(u),
	}
}

// Partition are the policies on everyone else's requests that keep the
// central devices the operator's.
func Partition(id Identity) []Pair {
	u := id.Username()
	return []Pair{
		taintRules(u),
		claimTolerations(),
		centralClasses(),
	}
}

// newPair builds a policy that fails closed (an expression that cannot be
// evaluated refuses the request: a fence that fails open is none) and its
// binding, which denies.
func newPair(name string, spec admissionregistrationv1.ValidatingAdmissionPolicySpec, paramRef *admissionregistrationv1.ParamRef) Pair {
	spec.FailurePolicy = ptr.To(admissionregistrationv1.Fail)
	return Pair{
		Policy: &admissionregistrationv1.ValidatingAdmissionPolicy{
			TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicy"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: setLabels()},
			Spec:       spec,
		},
		Binding: &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicyBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: setLabels()},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName:        name,
				ParamRef:          paramRef,
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			},
		},
	}
}

// rules matches operations on resources of one API group, every version
// (the API server converts the object to the version the policy is written
// against: resource.k8s.io objects written as v1beta2 are still matched).
func rules(group string, resources []string, ops ...admissionregistrationv1.OperationType) admissionregistrationv1.NamedRuleWithOperations {
	return admissionregistrationv1.NamedRuleWithOperations{
		RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: ops,
			Rule: admissionregistrationv1.Rule{
				APIGroups:   []string{group},
				APIVersions: []string{"*"},
				Resources:   resources,
			},
		},
	}
}

// matching is matchConstraints of the given rules, with the API server's
// own default matchPolicy (Equivalent) spelled out.
func matching(r ...admissionregistrationv1.NamedRuleWithOperations) *admissionregistrationv1.MatchResources {
	return &admissionregistrationv1.MatchResources{
		ResourceRules: r,
		MatchPolicy:   ptr.To(admissionregistrationv1.Equivalent),
	}
}

// Operations, for brevity.
const (
	opCreate = admissionregistrationv1.Create
	opUpdate = admissionregistrationv1.Update
	opDelete = admissionregistrationv1.Delete
)

// writes are the operations that change objects.
var writes = []admissionregistrationv1.OperationType{opCreate, opUpdate, opDelete}

// operatorOnly matches only the operator's requests.
func operatorOnly(username string) admissionregistrationv1.MatchCondition {
	return admissionregistrationv1.MatchCondition{Name: "is-drastack-operator", Expression: isUser(username)}
}

// Objects returns the set's objects in apply order: every policy, then
// every binding, so that a binding never names a policy the API server has
// not seen yet.
func Objects(pairs []Pair) []runtime.Object {
	out := make([]runtime.Object, 0, 2*len(pairs))
	for _, p := range pairs {
		out = append(out, p.Policy)
	}
	for _, p := range pairs {
		out = append(out, p.Binding)
	}
	return out
}

// Unstructured converts an object of the set for a server-side apply.
func Unstructured(obj runtime.Object) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	// The converter writes the zero creationTimestamp as null, which an
	// apply would then try to own.
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u.Object, "status")
	return u, nil
}

// Hash identifies the content of a set: the first 12 hex digits of the
// SHA-256 of its JSON. Every replica of one release computes the same.
func Hash(pairs []Pair) string {
	h := sha256.New()
	for _, obj := range Objects(pairs) {
		data, err := json.Marshal(obj)
		if err != nil {
			// The objects are built here from Go types: they always encode.
			panic(err)
		}
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}
