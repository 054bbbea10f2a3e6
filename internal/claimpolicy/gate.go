package claimpolicy

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
)

// PodClaim is one entry of a pod's spec.resourceClaims, resolved as far as
// the pod itself tells.
type PodClaim struct {
	// Name is the entry's name in the pod.
	Name string
	// ClaimName is the ResourceClaim's name: given directly, or, for a
	// template, what kube-controller-manager recorded in
	// status.resourceClaimStatuses. Empty while that is not known.
	ClaimName string
	// Template is the ResourceClaimTemplate's name ("" for a direct claim).
	Template string
	// NotNeeded: kube-controller-manager recorded that no claim was
	// created for this entry.
	NotNeeded bool
}

// PodClaims lists a pod's claims.
func PodClaims(pod *corev1.Pod) []PodClaim {
	out := make([]PodClaim, 0, len(pod.Spec.ResourceClaims))
	for _, rc := range pod.Spec.ResourceClaims {
		pc := PodClaim{Name: rc.Name}
		switch {
		case rc.ResourceClaimName != nil:
			pc.ClaimName = *rc.ResourceClaimName
		case rc.ResourceClaimTemplateName != nil:
			pc.Template = *rc.ResourceClaimTemplateName
			for _, st := range pod.Status.ResourceClaimStatuses {
				if st.Name != rc.Name {
					continue
				}
				if st.ResourceClaimName == nil {
					pc.NotNeeded = true
				} else {
					pc.ClaimName = *st.ResourceClaimName
				}
			}
		default:
			// Neither is set: the API server rejects such pods.
			continue
		}
		out = append(out, pc)
	}
	return out
}

// HasGate reports whether the pod carries the operator's scheduling gate.
func HasGate(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == SchedulingGate })
}

// ClaimLookup finds a claim of the pod's namespace by name; ok is false
// when it does not exist or cannot be read.
type ClaimLookup func(name string) (claim *resourceapi.ResourceClaim, ok bool)

// TemplateLookup finds a ResourceClaimTemplate of the pod's namespace.
type TemplateLookup func(name string) (template *resourceapi.ResourceClaimTemplate, ok bool)

// NeedsGate tells whether the admission webhook must add the scheduling
// gate to a new pod, and why. A pod is gated when one of its claims is,
// or will be, the operator's, allocated or not: the operator places the
// pod's operator claims together on a node where the pod fits, and even
// a claim allocated at once (immediate) must not meet a pod that cannot
// run where its devices are. Gates can only be removed after creation,
// never added, so admission is the only chance.
//
// Only what the webhook can see counts: a claim or template that does not
// exist (yet) does not gate the pod, so plain kube-scheduler workloads
// created before their claims never wait for the operator. A claim that
// appears later and is the operator's cannot be allocated by
// kube-scheduler anyway (its classes match only central devices, which no
// claim may tolerate: the admission policies of internal/admissionpolicy),
// and the operator places such an ungated pod's claims like a gated
// pod's.
func NeedsGate(cfg Config, pod *corev1.Pod, claim ClaimLookup, template TemplateLookup) (bool, string) {
	if !cfg.Active || !cfg.GatePods || HasGate(pod) {
		return false, ""
	}
	for _, pc := range PodClaims(pod) {
		if pc.Template == "" {
			c, ok := claim(pc.ClaimName)
			if !ok {
				continue
			}
			if why := SelectClaim(cfg, c); why != WhyNone && c.DeletionTimestamp == nil {
				return true, fmt.Sprintf("claim %s is allocated by the operator (%s)", pc.ClaimName, why)
			}
			continue
		}
		t, ok := template(pc.Template)
		if !ok {
			continue
		}
		if why := SelectTemplate(cfg, t); why != WhyNone {
			return true, fmt.Sprintf("claims from template %s are allocated by the operator (%s)", pc.Template, why)
		}
	}
	return false, ""
}

// Verdict is Release's answer for a gated pod.
type Verdict struct {
	// Release: remove the scheduling gate now.
	Release bool
	// Waiting says what the pod waits for, one entry per claim.
	Waiting []string
}

// Release tells whether a pod that carries the scheduling gate may go:
// every claim it uses exists and none of them waits for the operator.
// When gating is off (no DRAStack, or gatePods false) every gate goes, so
// that turning the feature off never strands pods.
func Release(cfg Config, pod *corev1.Pod, claim ClaimLookup) Verdict {
	if !HasGate(pod) {
		return Verdict{}
	}
	if !cfg.Active || !cfg.GatePods {
		return Verdict{Release: true}
	}
	var waiting []string
	for _, pc := range PodClaims(pod) {
		switch {
		case pc.NotNeeded:
			continue
		case pc.ClaimName == "":
			waiting = append(waiting, fmt.Sprintf("claim %s: kube-controller-manager has not created it from template %s yet", pc.Name, pc.Template))
			continue
		}
		c, ok := claim(pc.ClaimName)
		if !ok {
			waiting = append(waiting, fmt.Sprintf("claim %s does not exist", pc.ClaimName))
			continue
		}
		if Decide(cfg, c).Action == ActionAllocate {
			waiting = append(waiting, fmt.Sprintf("claim %s is not allocated yet", pc.ClaimName))
		}
	}
	return Verdict{Release: len(waiting) == 0, Waiting: waiting}
}

// WithoutGate returns the pod's scheduling gates without the operator's.
func WithoutGate(gates []corev1.PodSchedulingGate) []corev1.PodSchedulingGate {
	return slices.DeleteFunc(slices.Clone(gates), func(g corev1.PodSchedulingGate) bool { return g.Name == SchedulingGate })
}

// SchedulerName is the field manager of kube-scheduler's writes.
const SchedulerName = "kube-scheduler"

// Unschedulable reports whether kube-scheduler reports the pod as
// unschedulable (its PodScheduled condition False with reason
// Unschedulable) and when it last wrote the pod's status, as its entry in
// the pod's managedFields tells (zero when that is not known). The
// condition's lastTransitionTime cannot tell: it moves only when the
// status flips, so for a pod that waited behind a gate it is its creation.
func Unschedulable(pod *corev1.Pod) (time.Time, bool) {
	if pod.Spec.NodeName != "" {
		return time.Time{}, false
	}
	unschedulable := slices.ContainsFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
	})
	if !unschedulable {
		return time.Time{}, false
	}
	var at time.Time
	for _, mf := range pod.ManagedFields {
		if mf.Manager == SchedulerName && mf.Subresource == "status" && mf.Time != nil && mf.Time.After(at) {
			at = mf.Time.Time
		}
	}
	return at, true
}

// Replacement is Replace's answer for one claim.
type Replacement struct {
	// Now: take the allocation back now, so the claim is placed again.
	Now bool
	// After: look again after this long (0: nothing to wait for).
	After time.Duration
	// Reason says why, for the Event.
	Reason string
}

// Replace decides whether an allocated claim of the operator's must be
// placed again because its pod cannot run where the allocation put it:
// the operator allocated it (fieldManager), nobody reserved it, it is not
// immediate (an immediate claim has no pod to follow, so it is never
// moved), kube-scheduler reported the pod unschedulable after the claim
// was allocated (its status write is not older than the claim's
// allocationTimestamp), and cfg.PlacementTimeout has passed since that
// timestamp. A pod that is gated, bound, or not judged since keeps its
// claims. Counting from the allocation, not from the pod's condition,
// means a placement is never taken back for a verdict about an earlier
// one, and each new placement gets the whole timeout.
func Replace(cfg Config, c *resourceapi.ResourceClaim, pod *corev1.Pod, fieldManager string, now time.Time) Replacement {
	if SelectClaim(cfg, c) == WhyNone || IsImmediate(cfg, c) || !Movable(c, fieldManager) || pod == nil || HasGate(pod) || pod.DeletionTimestamp != nil {
		return Replacement{}
	}
	judged, ok := Unschedulable(pod)
	ts := c.Status.Allocation.AllocationTimestamp
	if !ok || ts == nil || judged.Before(ts.Time) {
		return Replacement{}
	}
	if waited := now.Sub(ts.Time); waited < cfg.PlacementTimeout {
		return Replacement{After: cfg.PlacementTimeout - waited}
	}
	return Replacement{Now: true, Reason: fmt.Sprintf("kube-scheduler reported pod %s unschedulable at %s, after the claim was allocated at %s, and spec.claims.placementTimeout (%s) has passed",
		pod.Name, judged.UTC().Format(time.RFC3339), ts.UTC().Format(time.RFC3339), cfg.PlacementTimeout)}
}
