package pool

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	poolpkg "github.com/drastack/drastack/internal/pool"
)

// Reasons of the DRAStack PoolsHealthy condition, most severe first: when
// pools are wrong in several ways, the reason names the worst.
const (
	ReasonPoolsInvalid    = "PoolsInvalid"
	ReasonPoolsDegraded   = "PoolsDegraded"
	ReasonPoolsIncomplete = "PoolsIncomplete"
	ReasonPoolsHealthy    = "PoolsHealthy"
	ReasonNoPools         = "NoPools"
)

// namedPools is how many pools the PoolsHealthy message names per kind of
// trouble; the rest are counted, so the message stays readable with
// thousands of broken pools.
const namedPools = 3

// poolSummary is one pool as the aggregation sees it.
type poolSummary struct {
	id     poolpkg.ID
	health v1alpha1.PoolHealth
	reason string
	alarm  bool
}

// aggregate counts pools by health and decides PoolsHealthy. pools must
// be sorted (the message names the first few of each kind).
//
// PoolsHealthy is False when a pool is Invalid, Degraded, or Incomplete
// past its grace period; a pool that is incomplete within the grace period
// (a driver republishing) is counted but keeps the condition True, like it
// raises no Event or alert.
func aggregate(pools []poolSummary, generation int64) (v1alpha1.PoolCounts, metav1.Condition) {
	var counts v1alpha1.PoolCounts
	var invalid, degraded, incomplete []poolSummary
	settling := 0
	for _, p := range pools {
		counts.Total++
		switch p.health {
		case v1alpha1.PoolHealthy:
			counts.Healthy++
		case v1alpha1.PoolInvalid:
			counts.Invalid++
			invalid = append(invalid, p)
		case v1alpha1.PoolDegraded:
			counts.Degraded++
			degraded = append(degraded, p)
		case v1alpha1.PoolIncomplete:
			counts.Incomplete++
			if p.alarm {
				incomplete = append(incomplete, p)
			} else {
				settling++
			}
		}
	}

	cond := metav1.Condition{Type: v1alpha1.ConditionPoolsHealthy, ObservedGeneration: generation}
	var parts []string
	if len(invalid) > 0 {
		parts = append(parts, describe(len(invalid), "invalid", invalid))
	}
	if len(degraded) > 0 {
		parts = append(parts, describe(len(degraded), "degraded", degraded))
	}
	if len(incomplete) > 0 {
		parts = append(parts, describe(len(incomplete), "incomplete past the grace period", incomplete))
	}
	switch {
	case len(invalid) > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, ReasonPoolsInvalid
	case len(degraded) > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, ReasonPoolsDegraded
	case len(incomplete) > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, ReasonPoolsIncomplete
	case counts.Total == 0:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, ReasonNoPools, "no driver publishes device pools"
		return counts, cond
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, ReasonPoolsHealthy
	}
	msg := fmt.Sprintf("%d/%d pools healthy", counts.Healthy, counts.Total)
	if len(parts) > 0 {
		msg += "; " + strings.Join(parts, "; ")
	}
	if settling > 0 {
		msg += fmt.Sprintf("; %d incomplete within the grace period", settling)
	}
	cond.Message = msg
	return counts, cond
}

// describe is "2 invalid: gpu.example.com/node-1 (MissingCounter), ...".
func describe(n int, what string, pools []poolSummary) string {
	names := make([]string, 0, namedPools)
	for _, p := range pools[:min(len(pools), namedPools)] {
		name := p.id.String()
		if p.reason != "" {
			name += " (" + p.reason + ")"
		}
		names = append(names, name)
	}
	s := fmt.Sprintf("%d %s: %s", n, what, strings.Join(names, ", "))
	if rest := n - len(names); rest > 0 {
		s += fmt.Sprintf(" and %d more", rest)
	}
	return s
}
