package stack

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/note"
)

// Reasons of the conditions this package decides.
const (
	ReasonSpecValid   = "SpecValid"
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonSpecValidWithWarnings: SpecValid is True, and its message
	// lists what is allowed but most likely a mistake.
	ReasonSpecValidWithWarnings = "SpecValidWithWarnings"
	ReasonCompatible            = "Compatible"
	ReasonResourceAPIAbsent     = "ResourceAPINotServed"
	ReasonFeatureMissing        = "FeatureMissing"
	ReasonProbeFailed           = "ProbeFailed"
	ReasonStackReady            = "StackReady"
	ReasonWaiting               = "Waiting"
)

// readyInputs are the conditions Ready follows, in the order their failure
// is reported. PoolsHealthy is deliberately absent: a vendor's broken pool
// is data-plane health, shown by PoolsHealthy and DevicePools, and must not
// make the operator itself look broken.
var readyInputs = []string{
	v1alpha1.ConditionSpecValid,
	v1alpha1.ConditionClusterCompatible,
	v1alpha1.ConditionDriversReady,
	v1alpha1.ConditionClaimsReady,
}

// ReadyCondition derives Ready from the other conditions: the first input
// condition that is not True decides the reason; a Degraded=True condition
// makes it False too. SpecValid and ClusterCompatible must be reported.
// DriversReady must be reported whenever the spec declares drivers
// (drivers > 0), and every declared driver must have its status.drivers
// entry (unreported lists those that do not): until the driver controller
// has looked at a driver nobody knows whether it serves, and a Ready that
// is True before anything is installed would let `kubectl wait` pass too
// early. A driver that is reported but whose spec just changed (an
// upgrade) keeps its last judgement until the next one, so a routine
// change does not flip Ready. Other absent inputs (ClaimsReady before the
// claim controller's first report, DriversReady without drivers) do not
// block Ready.
func ReadyCondition(conds []metav1.Condition, drivers int, unreported []string, generation int64) metav1.Condition {
	ready := metav1.Condition{
		Type:               v1alpha1.ConditionReady,
		Status:             metav1.ConditionTrue,
		Reason:             ReasonStackReady,
		Message:            "the DRA stack is ready",
		ObservedGeneration: generation,
	}
	for _, t := range readyInputs {
		c := meta.FindStatusCondition(conds, t)
		required := t == v1alpha1.ConditionSpecValid || t == v1alpha1.ConditionClusterCompatible ||
			(t == v1alpha1.ConditionDriversReady && drivers > 0)
		if c == nil {
			if required {
				ready.Status, ready.Reason, ready.Message = metav1.ConditionUnknown, ReasonWaiting, fmt.Sprintf("%s not reported yet", t)
				return ready
			}
			continue
		}
		if t == v1alpha1.ConditionDriversReady && len(unreported) > 0 {
			ready.Status, ready.Reason = metav1.ConditionUnknown, ReasonWaiting
			ready.Message = fmt.Sprintf("%s: not reported yet for driver %s", t, strings.Join(unreported, ", "))
			return ready
		}
		if c.Status != metav1.ConditionTrue {
			ready.Status = metav1.ConditionFalse
			if c.Status == metav1.ConditionUnknown {
				ready.Status = metav1.ConditionUnknown
			}
			ready.Reason, ready.Message = c.Reason, fmt.Sprintf("%s: %s", t, c.Message)
			return ready
		}
	}
	if c := meta.FindStatusCondition(conds, v1alpha1.ConditionDegraded); c != nil && c.Status == metav1.ConditionTrue {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, c.Reason, "Degraded: "+c.Message
	}
	return ready
}

// UnreportedDrivers are the drivers of the spec without an entry in
// status.drivers: the driver controller has not judged them yet.
func UnreportedDrivers(spec *v1alpha1.DRAStackSpec, drivers []v1alpha1.DriverStatus) []string {
	var out []string
	for _, d := range spec.Drivers {
		if !slices.ContainsFunc(drivers, func(s v1alpha1.DriverStatus) bool { return s.Name == d.Name && s.Removal == nil }) {
			out = append(out, d.Name)
		}
	}
	return out
}

// CompatibleCondition decides ClusterCompatible from what the cluster
// supports and what the spec needs. probeErr is a failed probe: the
// condition is then Unknown and the last known cluster status is kept.
func CompatibleCondition(spec *v1alpha1.DRAStackSpec, cluster *v1alpha1.ClusterStatus, probeErr error, generation int64) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionClusterCompatible, ObservedGeneration: generation}
	switch {
	case probeErr != nil:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, ReasonProbeFailed, probeErr.Error()
		return c
	case cluster == nil || !slices.Contains(cluster.ResourceAPIVersions, "v1"):
		c.Status, c.Reason = metav1.ConditionFalse, ReasonResourceAPIAbsent
		c.Message = "resource.k8s.io/v1 is not served; drastack needs Kubernetes 1.34 or newer with DRA enabled"
		return c
	}
	var missing []string
	for _, r := range Requirements(spec) {
		if !HasFeature(&cluster.Features, r.Feature) {
			missing = append(missing, r.String())
		}
	}
	if len(missing) > 0 {
		c.Status, c.Reason = metav1.ConditionFalse, ReasonFeatureMissing
		c.Message = fmt.Sprintf("Kubernetes %s lacks what the spec needs: %s; enable the feature gates on kube-apiserver and kube-scheduler, and an API that is not served with --runtime-config",
			cluster.KubernetesVersion, strings.Join(missing, "; "))
		return c
	}
	c.Status, c.Reason = metav1.ConditionTrue, ReasonCompatible
	c.Message = fmt.Sprintf("Kubernetes %s serves resource.k8s.io %s", cluster.KubernetesVersion, strings.Join(cluster.ResourceAPIVersions, ", "))
	return c
}

// SpecReport is what SpecValid says.
type SpecReport struct {
	// Errors make the whole spec invalid (Check, and a DRAStack not named
	// default): nothing that runs changes until they are fixed.
	Errors []string
	// DriverProblems are what only rendering or applying one driver found
	// (DriverSpecProblems): that driver is not changed, the others are.
	DriverProblems []string
	// Warnings leave the spec valid.
	Warnings []string
}

// Frozen is the end of a SpecValid message for an invalid spec: what the
// operator does about it.
const Frozen = "nothing that runs changes until the spec is valid: the drivers, published devices and central taints of the last valid spec stay as they are"

// maxConditionMessage stays under the API's 32768 characters.
const maxConditionMessage = 32000

// SpecCondition turns a SpecReport into SpecValid: False with reason
// InvalidSpec when there are errors (whole-spec errors first, then what
// says what the operator does about them), True with reason
// SpecValidWithWarnings when only warnings are left, True otherwise.
func SpecCondition(r SpecReport, generation int64) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionSpecValid, ObservedGeneration: generation}
	switch {
	case len(r.Errors) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, ReasonInvalidSpec
		c.Message = strings.Join(append(slices.Clone(r.Errors), r.DriverProblems...), "; ") + "; " + Frozen
	case len(r.DriverProblems) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, ReasonInvalidSpec
		c.Message = strings.Join(r.DriverProblems, "; ")
	case len(r.Warnings) > 0:
		c.Status, c.Reason = metav1.ConditionTrue, ReasonSpecValidWithWarnings
		c.Message = "the spec is valid, with warnings: " + strings.Join(r.Warnings, "; ")
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, ReasonSpecValid, "the spec is valid"
	}
	c.Message = note.Shorten(c.Message, maxConditionMessage)
	return c
}

// PoolSummary is "healthy/total" for the printer column.
func PoolSummary(p *v1alpha1.PoolCounts) string {
	if p == nil {
		return ""
	}
	return fmt.Sprintf("%d/%d healthy", p.Healthy, p.Total)
}

// DriverSummary is "ready/total" for the printer column.
func DriverSummary(drivers []v1alpha1.DriverStatus, declared int) string {
	ready := 0
	for _, d := range drivers {
		if d.Ready {
			ready++
		}
	}
	return fmt.Sprintf("%d/%d ready", ready, declared)
}
