package admissionpolicy

import (
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The probe proves that the API server enforces a set (see the package
// doc): a policy and binding that refuse one dry-run request of the
// operator, an events.k8s.io Event named after the set's hash in the
// operator's namespace. The policy matches it by name, and so does the
// binding (by resourceNames), so that the refusal needs both the policy and
// the binding as last written.

// ProbeEventName is the name of the probe Event for a set's hash.
func ProbeEventName(hash string) string { return Probe + "-" + hash }

// probeMessage is the refusal the Installer waits for.
func probeMessage(hash string) string {
	return "drastack admission probe " + hash + ": the admission policies are in force"
}

// ProbePair is the probe policy and binding for a set's hash.
func ProbePair(id Identity, hash string) Pair {
	name := ProbeEventName(hash)
	p := newPair(Probe, admissionregistrationv1.ValidatingAdmissionPolicySpec{
		MatchConstraints: matching(rules("events.k8s.io", []string{"events"}, opCreate)),
		MatchConditions: []admissionregistrationv1.MatchCondition{
			operatorOnly(id.Username()),
			{Name: "is-the-probe", Expression: `object.metadata.name == ` + str(name)},
		},
		Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: probeMessage(hash)}},
	}, nil)
	r := rules("events.k8s.io", []string{"events"}, opCreate)
	r.ResourceNames = []string{name}
	p.Binding.Spec.MatchResources = &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{r}}
	return p
}

// ProbeEvent is the dry-run request the probe refuses, in the operator's
// namespace: a valid Event, so that the API server's validation, which
// runs before admission policies, lets it reach them.
func ProbeEvent(id Identity, hash, instance string, now time.Time) *eventsv1.Event {
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: ProbeEventName(hash), Namespace: id.Namespace},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: "drastack.io/admission-probe",
		ReportingInstance:   instance,
		Action:              "Probe",
		Reason:              "AdmissionProbe",
		Type:                corev1.EventTypeNormal,
		Regarding:           corev1.ObjectReference{APIVersion: "v1", Kind: "ServiceAccount", Namespace: id.Namespace, Name: id.ServiceAccount},
		Note:                "a server-side dry run that the drastack admission probe refuses",
	}
}

// IsProbeRefusal says whether a refusal of the probe Event is the probe's
// own for this hash (and not, say, a missing permission).
func IsProbeRefusal(err error, hash string) bool {
	return err != nil && strings.Contains(err.Error(), probeMessage(hash))
}
