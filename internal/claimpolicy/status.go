package claimpolicy

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// Reasons of the ClaimsReady condition.
const (
	// ReasonKeepingUp: every claim the operator allocates is allocated, or
	// waits for a change of the cluster or of the claim itself (those are
	// the users' problems, counted in status.claims and reported on the
	// claims; the operator itself works).
	ReasonKeepingUp = "KeepingUp"
	// ReasonBacklog: some claim has waited longer than BacklogAfter for an
	// allocation attempt to succeed for reasons other than the cluster's
	// capacity: the controller does not keep up (API errors, overload).
	ReasonBacklog = "Backlog"
	// ReasonEngineNotSupported: the configured engine cannot allocate some
	// claims (CEL constraints with engine upstream): the DRAStack's
	// configuration and its users disagree.
	ReasonEngineNotSupported = "EngineNotSupported"
)

// BacklogAfter is how long a claim may wait for a successful attempt
// before ClaimsReady turns False. Allocation takes milliseconds; a minute
// covers a restart of the operator and a burst of thousands of claims.
const BacklogAfter = time.Minute

// Entry is what the status needs to know about one of the operator's
// claims.
type Entry struct {
	// Key is namespace/name.
	Key string
	// Allocated: status.allocation is set.
	Allocated bool
	// Outcome of the last failed attempt ("" if none since the claim
	// last changed).
	Outcome Outcome
	// Since is when the claim started to wait (its creation, or when it
	// was deallocated).
	Since time.Time
}

// Summarize counts the operator's claims for DRAStack status.claims and
// decides ClaimsReady. Each claim is counted once: allocated, or
// unsatisfiable (also when the search bound was hit), or invalid (also
// when the engine does not support it), or pending.
func Summarize(entries []Entry, now time.Time, generation int64) (v1alpha1.ClaimCounts, metav1.Condition) {
	var counts v1alpha1.ClaimCounts
	var notSupported, backlog []Entry
	for _, e := range entries {
		if e.Allocated {
			counts.Allocated++
			continue
		}
		switch PendingOf(e.Outcome).State {
		case PendingUnsatisfiable:
			counts.Unsatisfiable++
		case PendingInvalid:
			counts.Invalid++
			if e.Outcome == OutcomeNotSupported {
				notSupported = append(notSupported, e)
			}
		default:
			counts.Pending++
			if !e.Since.IsZero() && now.Sub(e.Since) > BacklogAfter {
				backlog = append(backlog, e)
			}
		}
	}
	cond := metav1.Condition{
		Type:               v1alpha1.ConditionClaimsReady,
		Status:             metav1.ConditionTrue,
		Reason:             ReasonKeepingUp,
		ObservedGeneration: generation,
		Message: fmt.Sprintf("%d allocated, %d pending, %d unsatisfiable, %d invalid",
			counts.Allocated, counts.Pending, counts.Unsatisfiable, counts.Invalid),
	}
	switch {
	case len(notSupported) > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, ReasonEngineNotSupported
		// Counts only: the DRAStack is cluster-wide, the claims are the
		// tenants'. Their own Events name them, in their namespaces.
		cond.Message = fmt.Sprintf("%d claims use features the configured engine does not support (each has a %s Event): set spec.claims.engine to native",
			len(notSupported), OutcomeNotSupported)
	case len(backlog) > 0:
		slices.SortFunc(backlog, func(a, b Entry) int { return cmp.Or(a.Since.Compare(b.Since), cmp.Compare(a.Key, b.Key)) })
		cond.Status, cond.Reason = metav1.ConditionFalse, ReasonBacklog
		// The start time, not the age, so that the message (and the
		// status write) does not change every second.
		cond.Message = fmt.Sprintf("%d claims have waited more than %s for allocation (the oldest since %s)",
			len(backlog), BacklogAfter, backlog[0].Since.UTC().Format(time.RFC3339))
	}
	return counts, cond
}
