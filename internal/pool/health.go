package pool

import (
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Report is everything DevicePool status, `kubectl dra validate` and the
// metrics say about one pool.
type Report struct {
	ID
	// Node is set for node-local pools (Pool.Node).
	Node           string
	Generation     int64
	Slices         int
	ExpectedSlices int64
	StaleSlices    int
	Health         Health
	Devices        DeviceCounts
	// CounterSets sorted by name, each with its counters sorted by name.
	CounterSets []CounterSetReport
	// Problems: the pool's structural problems, IncompletePool after the
	// grace period, and allocation problems; sorted with CompareProblems.
	Problems []Problem
	// IncompleteFor is how long the pool has been incomplete (0 if complete).
	IncompleteFor time.Duration
}

// DeviceCounts summarises a pool's devices.
type DeviceCounts struct {
	// Total devices of the current generation.
	Total int
	// Allocated devices: named by at least one allocation without
	// adminAccess.
	Allocated int
	// AdminAccess devices: named by at least one allocation with
	// adminAccess (they may be Allocated too).
	AdminAccess int
	// Tainted devices: with a NoSchedule or NoExecute taint in the slice
	// (DeviceTaintRules are not seen here).
	Tainted int
	// Free devices: what a request without tolerations or admin access
	// could get right now: the pool is allocatable, the device is not in
	// use, not tainted, and its counters fit. 0 when the pool is not
	// allocatable.
	Free int
}

// CounterSetReport is one counter set with capacity and consumption.
type CounterSetReport struct {
	Name     string
	Slice    string
	Counters []CounterReport
}

// CounterReport is one counter: its capacity and what allocated devices
// consume (exact quantities).
type CounterReport struct {
	Name     string
	Capacity resource.Quantity
	Consumed resource.Quantity
}

// Assess computes a pool's health from its structure (p), the allocations
// in l (nil means none) and how long it has been incomplete.
//
// Health, first match wins:
//   - Invalid: a structural Error problem (the allocator skips the pool);
//   - Incomplete: slices of the current generation are missing (after the
//     grace period there is also an IncompletePool error; see
//     IncompleteProblem);
//   - Degraded: allocations disagree with the slices: AllocatedDeviceMissing,
//     CounterOverconsumed or DeviceDoubleAllocated (Errors);
//   - Healthy.
//
// Consumption here is recomputed with exact quantity arithmetic from the
// ledger's recorded allocations (not from tentative Takes), so Assess does
// not depend on PoolUsage being up to date with p.
func Assess(p *Pool, l *Ledger, now, incompleteSince time.Time, grace time.Duration) Report {
	r := Report{
		ID:             p.ID,
		Node:           p.Node,
		Generation:     p.Generation,
		Slices:         len(p.Slices),
		ExpectedSlices: p.ExpectedSlices,
		StaleSlices:    len(p.StaleSlices),
	}
	r.Devices.Total = len(p.Devices)
	problems := slices.Clone(p.Problems)

	if !p.Complete() {
		since := incompleteSince
		if since.IsZero() {
			since = now
		}
		r.IncompleteFor = max(now.Sub(since), 0)
		if pr, ok := IncompleteProblem(p, since, now, grace); ok {
			problems = append(problems, pr)
		}
	}

	var held map[string]*holding
	if l != nil {
		if ps := l.pools[p.ID]; ps != nil {
			held = ps.held
		}
	}
	a := newAllocView(p, held)
	allocProblems := a.problems()
	problems = append(problems, allocProblems...)

	for i := range p.Devices {
		d := &p.Devices[i]
		tainted := hasBlockingTaint(d.Device)
		if tainted {
			r.Devices.Tainted++
		}
		if a.exclusive[i] > 0 {
			r.Devices.Allocated++
		}
		if a.admin[i] > 0 {
			r.Devices.AdminAccess++
		}
		if p.Allocatable() && !tainted && a.canAllocate(i) {
			r.Devices.Free++
		}
	}
	r.CounterSets = a.counterReports()

	SortProblems(problems)
	r.Problems = problems
	switch {
	case !p.Valid():
		r.Health = HealthInvalid
	case !p.Complete():
		r.Health = HealthIncomplete
	case len(allocProblems) > 0:
		r.Health = HealthDegraded
	default:
		r.Health = HealthHealthy
	}
	return r
}

// hasBlockingTaint reports a taint that keeps requests without a matching
// toleration away (NoSchedule or NoExecute; None is informational).
func hasBlockingTaint(d *resourceapi.Device) bool {
	for _, t := range d.Taints {
		if t.Effect == resourceapi.DeviceTaintEffectNoSchedule || t.Effect == resourceapi.DeviceTaintEffectNoExecute {
			return true
		}
	}
	return false
}
