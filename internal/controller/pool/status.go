package pool

import (
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/controller/statusapply"
	poolpkg "github.com/drastack/drastack/internal/pool"
	"github.com/drastack/drastack/internal/topology"
)

// DevicePool condition types. Health summarises them; the conditions say
// which part is wrong, with the reason code of the first problem of that
// part.
const (
	// ConditionValid is false when a validation rule is broken.
	ConditionValid = "Valid"
	// ConditionComplete is false while slices of the current generation
	// are missing.
	ConditionComplete = "Complete"
	// ConditionConsistent is false when allocations disagree with the
	// slices.
	ConditionConsistent = "Consistent"
	// ConditionNodePresent, only on node-local pools, is false when the
	// pool's node does not exist: its slices are left over from a deleted
	// node and no pod can ever use them. It does not change health.
	ConditionNodePresent = "NodePresent"
)

// Condition reasons that are not problem reason codes.
const (
	ReasonValid              = "Valid"
	ReasonAllSlicesPublished = "AllSlicesPublished"
	ReasonSlicesMissing      = "SlicesMissing"
	ReasonNoSlices           = "NoSlices"
	ReasonConsistent         = "AllocationsConsistent"
	ReasonNodeFound          = "NodeFound"
	ReasonNodeNotFound       = "NodeNotFound"
)

// problemClass sorts reason codes by the part of the pool they concern.
type problemClass int

const (
	classStructure  problemClass = iota // the slices break a rule: Invalid
	classIncomplete                     // IncompletePool
	classAllocation                     // allocations disagree: Degraded
)

// ReasonPoolWithheld leads the problems of a DevicePool whose multi-host
// pool the central publisher withholds (its slices are gone on purpose).
const ReasonPoolWithheld = poolpkg.Reason(topology.ReasonPoolWithheld)

// withheldFirst puts the publisher's reason for withholding a pool first.
func withheldFirst(problems []poolpkg.Problem, why string) []poolpkg.Problem {
	out := make([]poolpkg.Problem, 0, len(problems)+1)
	out = append(out, poolpkg.Problem{Reason: ReasonPoolWithheld, Severity: poolpkg.SeverityError, Message: why})
	return append(out, problems...)
}

func classOf(r poolpkg.Reason) problemClass {
	switch r {
	case poolpkg.ReasonIncompletePool, ReasonPoolWithheld:
		return classIncomplete
	case poolpkg.ReasonAllocatedDeviceMissing, poolpkg.ReasonCounterOverconsumed, poolpkg.ReasonDeviceDoubleAllocated:
		return classAllocation
	}
	return classStructure
}

// firstError returns the first Error problem of a class (problems are
// sorted, most important first) and how many more there are.
func firstError(problems []poolpkg.Problem, class problemClass) (first *poolpkg.Problem, more int) {
	for i := range problems {
		p := &problems[i]
		if p.Severity != poolpkg.SeverityError || classOf(p.Reason) != class {
			continue
		}
		if first == nil {
			first = p
		} else {
			more++
		}
	}
	return first, more
}

// primaryReason is the reason code the REASON column shows: the problem
// that explains the health (the first structural error of an Invalid
// pool, the first allocation error of a Degraded one, IncompletePool once
// an incomplete pool is past its grace period), or for a Healthy pool its
// first warning. Problems alone would not do: they sort by severity and
// reason, so an Invalid pool could lead with an allocation problem.
func primaryReason(r *poolpkg.Report) string {
	var p *poolpkg.Problem
	switch r.Health {
	case poolpkg.HealthInvalid:
		p, _ = firstError(r.Problems, classStructure)
	case poolpkg.HealthDegraded:
		p, _ = firstError(r.Problems, classAllocation)
	case poolpkg.HealthIncomplete:
		// Before the grace period ends an incomplete pool has no
		// IncompletePool error; a gone pool whose devices claims still
		// hold says that instead of nothing.
		if p, _ = firstError(r.Problems, classIncomplete); p == nil {
			p, _ = firstError(r.Problems, classAllocation)
		}
	default:
		if len(r.Problems) > 0 {
			p = &r.Problems[0]
		}
	}
	if p == nil {
		return ""
	}
	return string(p.Reason)
}

// statusInput is everything a DevicePool status is computed from.
type statusInput struct {
	report poolpkg.Report
	// prev is the status the DevicePool has now (nil before it exists);
	// transition times are kept from it.
	prev *v1alpha1.DevicePoolStatus
	now  time.Time
	// since is when the pool was first seen incomplete (zero if complete).
	since       time.Time
	maxProblems int
	// gone: the pool has no slices left; the DevicePool waits out the
	// grace period before it is deleted.
	gone bool
	// nodePresent is nil for pools that are not node-local.
	nodePresent *bool
}

// buildStatus maps a pool.Report onto DevicePool status. It is pure: the
// same input gives the same status, and a status computed again for an
// unchanged pool equals the one written before (times are kept from prev
// and rounded to seconds, as the API server stores them), so the
// controller can skip writes by comparing.
func buildStatus(in statusInput) v1alpha1.DevicePoolStatus {
	r := &in.report
	now := metav1.NewTime(in.now).Rfc3339Copy()
	st := v1alpha1.DevicePoolStatus{
		Driver:     r.Driver,
		Pool:       r.Pool,
		Node:       r.Node,
		Generation: r.Generation,
		Slices: v1alpha1.SliceCounts{
			Current:  int32(r.Slices),
			Expected: int32(r.ExpectedSlices),
			Stale:    int32(r.StaleSlices),
		},
		Devices: v1alpha1.DeviceCounts{
			Total:     int32(r.Devices.Total),
			Allocated: int32(r.Devices.Allocated),
			Tainted:   int32(r.Devices.Tainted),
			Free:      int32(r.Devices.Free),
			Available: int32(r.Availability.Available),
			Shared:    int32(r.Availability.Shared),
			Unavailable: v1alpha1.UnavailableDevices{
				PoolUnusable:      int32(r.Availability.PoolUnusable),
				Allocated:         int32(r.Availability.Allocated),
				Tainted:           int32(r.Availability.Tainted),
				BlockedByCounters: int32(r.Availability.BlockedByCounters),
			},
		},
		Health: v1alpha1.PoolHealth(r.Health),
		Reason: primaryReason(r),
	}
	st.PartitionSummary = partitionSummary(r.Partitions, in.prev)
	st.Fragmentation = fragmentation(r.Fragmentation, in.prev)
	st.CounterSets = counterSets(r.CounterSets, in.prev)

	st.HealthTransitionTime = &now
	if in.prev != nil && in.prev.Health == st.Health && in.prev.HealthTransitionTime != nil {
		st.HealthTransitionTime = in.prev.HealthTransitionTime.DeepCopy()
	}
	if !in.since.IsZero() {
		since := metav1.NewTime(in.since).Rfc3339Copy()
		st.IncompleteSince = &since
	}

	kept, omitted := poolpkg.CapProblems(r.Problems, in.maxProblems)
	if len(kept) > 0 {
		st.Problems = make([]v1alpha1.PoolProblem, 0, len(kept))
	}
	for _, p := range kept {
		st.Problems = append(st.Problems, v1alpha1.PoolProblem{
			Reason:   string(p.Reason),
			Severity: string(p.Severity),
			Slice:    p.Slice,
			Device:   p.Device,
			Message:  p.Message,
		})
	}
	st.MoreProblems = int32(omitted)

	var prevConds []metav1.Condition
	if in.prev != nil {
		prevConds = in.prev.Conditions
	}
	st.Conditions = statusapply.KeepTransitionTimes(prevConds, conditions(in), now)
	return st
}

// partitionSummary maps the report's partitions; the previous status's
// list is reused when it says the same, so that validating an unchanged
// pool allocates nothing for it (statuses are never modified once built).
func partitionSummary(parts []poolpkg.PartitionReport, prev *v1alpha1.DevicePoolStatus) []v1alpha1.PartitionTypeStatus {
	if len(parts) == 0 {
		return nil
	}
	same := prev != nil && len(prev.PartitionSummary) == len(parts)
	for i := 0; same && i < len(parts); i++ {
		p, q := &parts[i], &prev.PartitionSummary[i]
		same = p.Attribute == q.Attribute && p.Type == q.Type && int32(p.Total) == q.Total && int32(p.Allocatable) == q.Allocatable
	}
	if same {
		return prev.PartitionSummary
	}
	out := make([]v1alpha1.PartitionTypeStatus, len(parts))
	for i, p := range parts {
		out[i] = v1alpha1.PartitionTypeStatus{Attribute: p.Attribute, Type: p.Type, Total: int32(p.Total), Allocatable: int32(p.Allocatable)}
	}
	return out
}

// counterSets maps the report's counter sets, reusing the previous
// status's list when it says the same (as partitionSummary does; a MIG
// node's counters are most of its status).
func counterSets(sets []poolpkg.CounterSetReport, prev *v1alpha1.DevicePoolStatus) []v1alpha1.CounterSetStatus {
	if len(sets) == 0 {
		return nil
	}
	if prev != nil && sameCounterSets(sets, prev.CounterSets) {
		return prev.CounterSets
	}
	n := 0
	for _, cs := range sets {
		n += len(cs.Counters)
	}
	out := make([]v1alpha1.CounterSetStatus, len(sets))
	all := make([]v1alpha1.CounterStatus, 0, n)
	for i, cs := range sets {
		start := len(all)
		for _, c := range cs.Counters {
			all = append(all, v1alpha1.CounterStatus{Name: c.Name, Capacity: c.Capacity, Consumed: c.Consumed})
		}
		out[i] = v1alpha1.CounterSetStatus{Name: cs.Name, Counters: all[start:len(all):len(all)]}
	}
	return out
}

// sameCounterSets compares by value, as statusEqual does, and formats too:
// a reused quantity must print as a new one would.
func sameCounterSets(sets []poolpkg.CounterSetReport, prev []v1alpha1.CounterSetStatus) bool {
	if len(sets) != len(prev) {
		return false
	}
	for i := range sets {
		x, y := &sets[i], &prev[i]
		if x.Name != y.Name || len(x.Counters) != len(y.Counters) {
			return false
		}
		for j := range x.Counters {
			a, b := &x.Counters[j], &y.Counters[j]
			if a.Name != b.Name || a.Capacity.Format != b.Capacity.Format || a.Consumed.Format != b.Consumed.Format ||
				a.Capacity.Cmp(b.Capacity) != 0 || a.Consumed.Cmp(b.Consumed) != 0 {
				return false
			}
		}
	}
	return true
}

// conditions derives Valid, Complete, Consistent and (for node-local
// pools) NodePresent.
func conditions(in statusInput) []metav1.Condition {
	r := &in.report
	out := make([]metav1.Condition, 0, 4)

	valid := metav1.Condition{Type: ConditionValid, Status: metav1.ConditionTrue, Reason: ReasonValid,
		Message: "no validation rule is broken"}
	if p, more := firstError(r.Problems, classStructure); p != nil {
		valid.Status, valid.Reason, valid.Message = metav1.ConditionFalse, string(p.Reason), withMore(p.Message, more)
	}
	out = append(out, valid)

	complete := metav1.Condition{Type: ConditionComplete, Status: metav1.ConditionTrue, Reason: ReasonAllSlicesPublished,
		Message: fmt.Sprintf("all %d slices of generation %d are published", r.Slices, r.Generation)}
	switch {
	case in.gone:
		complete.Status, complete.Reason = metav1.ConditionFalse, ReasonNoSlices
		complete.Message = "the pool has no slices any more; this DevicePool is deleted after the grace period unless they come back"
	case int64(r.Slices) != r.ExpectedSlices:
		complete.Status, complete.Reason = metav1.ConditionFalse, ReasonSlicesMissing
		complete.Message = fmt.Sprintf("%d of %d slices of generation %d are published", r.Slices, r.ExpectedSlices, r.Generation)
		if p, _ := firstError(r.Problems, classIncomplete); p != nil {
			complete.Reason, complete.Message = string(p.Reason), p.Message
		}
	}
	out = append(out, complete)

	consistent := metav1.Condition{Type: ConditionConsistent, Status: metav1.ConditionTrue, Reason: ReasonConsistent,
		Message: "every allocated device exists, no counter is over-consumed, no device is allocated twice"}
	if p, more := firstError(r.Problems, classAllocation); p != nil {
		consistent.Status, consistent.Reason, consistent.Message = metav1.ConditionFalse, string(p.Reason), withMore(p.Message, more)
	}
	out = append(out, consistent)

	if in.nodePresent != nil {
		node := metav1.Condition{Type: ConditionNodePresent, Status: metav1.ConditionTrue, Reason: ReasonNodeFound,
			Message: fmt.Sprintf("node %s exists", r.Node)}
		if !*in.nodePresent {
			node.Status, node.Reason = metav1.ConditionFalse, ReasonNodeNotFound
			node.Message = fmt.Sprintf("node %s does not exist; the slices are left over and no pod can use them", r.Node)
		}
		out = append(out, node)
	}
	return out
}

func withMore(msg string, more int) string {
	if more == 0 {
		return msg
	}
	return fmt.Sprintf("%s (and %d more)", msg, more)
}

// statusEqual compares two statuses the way the API server would store
// them: quantities by value, times by instant, nil and empty lists alike.
// It is written out instead of using equality.Semantic because it runs for
// every pool on every resync, and reflection made it the most expensive
// step of validating a MIG pool; TestStatusEqualSeesEveryField keeps it
// complete when DevicePoolStatus grows.
func statusEqual(a, b *v1alpha1.DevicePoolStatus) bool {
	if a.Driver != b.Driver || a.Pool != b.Pool || a.Node != b.Node || a.Generation != b.Generation ||
		a.Slices != b.Slices || a.Devices != b.Devices || a.Health != b.Health || a.Reason != b.Reason ||
		a.MoreProblems != b.MoreProblems ||
		!timeEqual(a.HealthTransitionTime, b.HealthTransitionTime) || !timeEqual(a.IncompleteSince, b.IncompleteSince) ||
		!slices.Equal(a.Problems, b.Problems) || !slices.Equal(a.PartitionSummary, b.PartitionSummary) ||
		!fragmentationEqual(a.Fragmentation, b.Fragmentation) ||
		len(a.CounterSets) != len(b.CounterSets) || len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for i := range a.CounterSets {
		x, y := &a.CounterSets[i], &b.CounterSets[i]
		if x.Name != y.Name || len(x.Counters) != len(y.Counters) {
			return false
		}
		for j := range x.Counters {
			cx, cy := &x.Counters[j], &y.Counters[j]
			if cx.Name != cy.Name || cx.Capacity.Cmp(cy.Capacity) != 0 || cx.Consumed.Cmp(cy.Consumed) != 0 {
				return false
			}
		}
	}
	for i := range a.Conditions {
		x, y := &a.Conditions[i], &b.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message ||
			x.ObservedGeneration != y.ObservedGeneration || !x.LastTransitionTime.Equal(&y.LastTransitionTime) {
			return false
		}
	}
	return true
}

func timeEqual(a, b *metav1.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(b)
}
