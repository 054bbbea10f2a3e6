package handover

import (
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/ledger"
)

// Refusal is kube-scheduler's report that the canary pod of a round is
// unschedulable because no node could get it the canary device.
type Refusal struct {
	// Version is the resourceVersion of the canary pod's state that
	// carries the refusal: kube-scheduler wrote it at or before Version.
	Version ledger.Version
	// At is when kube-scheduler wrote the pod's status, as its entry in
	// the pod's managedFields tells (whole seconds).
	At time.Time
}

// CanaryState is what kube-scheduler made of a canary pod so far.
type CanaryState int

const (
	// CanaryWaiting: no verdict yet, or one that proves nothing (the claim
	// or class not in kube-scheduler's view yet, no node fits).
	CanaryWaiting CanaryState = iota
	// CanaryRefused: kube-scheduler's device allocation failed on some
	// node for the canary claim: its only device is tainted by the round's
	// rule (once the round's clearance pod was bound, nothing else can
	// keep it away).
	CanaryRefused
	// CanaryBound: kube-scheduler bound the pod: it allocated the device,
	// so its view did not hold the round's rule at that moment.
	CanaryBound
)

// allocationFailed matches kube-scheduler's FitError message when the
// DynamicResources filter failed on at least one node for want of devices
// ("0/3 nodes are available: 3 cannot allocate all claims. ..."). Other
// refusals (the claim or class not in its view yet, every node failing an
// earlier filter) say something else and prove nothing about the rule.
var allocationFailed = regexp.MustCompile(`(?:: |, )[1-9][0-9]* cannot allocate all claims[,.]`)

// Canary reads a canary pod's state, and for a refusal, what it proves.
func Canary(pod *corev1.Pod) (CanaryState, Refusal) {
	if pod.Spec.NodeName != "" {
		return CanaryBound, Refusal{}
	}
	cond := podScheduled(pod)
	if cond == nil || cond.Status != corev1.ConditionFalse || cond.Reason != corev1.PodReasonUnschedulable ||
		!strings.HasPrefix(cond.Message, "0/") || !allocationFailed.MatchString(cond.Message) {
		return CanaryWaiting, Refusal{}
	}
	return CanaryRefused, Refusal{Version: ledger.ParseVersion(pod.ResourceVersion), At: SchedulerStatusTime(pod)}
}

func podScheduled(pod *corev1.Pod) *corev1.PodCondition {
	i := slices.IndexFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodScheduled })
	if i < 0 {
		return nil
	}
	return &pod.Status.Conditions[i]
}

// SchedulerStatusTime is when kube-scheduler last wrote the pod's status,
// from its managedFields entry (zero when unknown). The API server stamps
// it, in whole seconds.
func SchedulerStatusTime(pod *corev1.Pod) time.Time {
	var at time.Time
	for _, mf := range pod.ManagedFields {
		if mf.Manager == claimpolicy.SchedulerName && mf.Subresource == "status" && mf.Time != nil && mf.Time.After(at) {
			at = mf.Time.Time
		}
	}
	return at
}

// VerdictKey is what kube-scheduler last reported about an unbound pod:
// its PodScheduled condition and its nominated node. Kube-scheduler writes
// a verdict only when this changes.
func VerdictKey(pod *corev1.Pod) string {
	var b strings.Builder
	if c := podScheduled(pod); c != nil {
		b.WriteString(string(c.Status) + "\x00" + c.Reason + "\x00" + c.Message)
	}
	b.WriteString("\x00" + pod.Status.NominatedNodeName)
	return b.String()
}

// Refused says whether kube-scheduler's last verdict on the pod is a
// failure with no binding under way: unbound, PodScheduled False for a
// scheduling failure, and no nominated node. Kube-scheduler (v1.35+,
// NominatedNodeNameForExpectation) writes the nominated node at the start
// of a binding cycle that will allocate claims, and clears it when that
// cycle fails; a nomination by preemption also leaves the pod waiting.
func Refused(pod *corev1.Pod) bool {
	if pod.Spec.NodeName != "" || pod.Status.NominatedNodeName != "" {
		return false
	}
	c := podScheduled(pod)
	return c != nil && c.Status == corev1.ConditionFalse &&
		(c.Reason == corev1.PodReasonUnschedulable || c.Reason == corev1.PodReasonSchedulerError)
}

// VerdictChanged says whether the update of an unbound pod from old to cur
// is kube-scheduler writing a new refusal, and returns cur's version: a
// pod watch delivers each write of the pod, so the refusal was written at
// that version.
func VerdictChanged(old, cur *corev1.Pod) (ledger.Version, bool) {
	if old == nil || cur == nil || old.UID != cur.UID || !Refused(cur) || VerdictKey(old) == VerdictKey(cur) {
		return 0, false
	}
	v := ledger.ParseVersion(cur.ResourceVersion)
	return v, v != 0
}
