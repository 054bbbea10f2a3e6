package pool

import (
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Availability says which devices a request without tolerations or admin
// access could be given right now, and why the others cannot. Every device
// is counted once: as available, or as unavailable for the first of
// PoolUnusable, Allocated, Tainted and BlockedByCounters that applies, so
// the five add up to the total.
type Availability struct {
	// Available devices: the pool is complete and valid, the device is not
	// in use, not tainted, and its counters fit (DeviceCounts.Free).
	Available int
	// Shared devices are available devices that allow multiple
	// allocations, already serve at least one, and have capacity left (no
	// capacity their allocations consume is used up).
	Shared int
	// PoolUnusable devices belong to a pool that is incomplete or invalid:
	// the scheduler uses none of them.
	PoolUnusable int
	// Allocated devices are in use by an allocation without adminAccess
	// (a shared device whose capacity is used up counts here too).
	Allocated int
	// Tainted devices carry a NoSchedule or NoExecute taint, from their
	// slice or from a DeviceTaintRule.
	Tainted int
	// BlockedByCounters devices would over-consume a shared counter that
	// allocated devices consume (or the pool's counters are already
	// over-consumed, which blocks every counter-consuming device).
	BlockedByCounters int
}

// AssessInput is what AssessPool needs besides the pool and the ledger.
type AssessInput struct {
	// Now is the time of the assessment.
	Now time.Time
	// IncompleteSince is when the pool was first seen incomplete (zero
	// means now).
	IncompleteSince time.Time
	// Grace is how long a pool may be incomplete before IncompletePool.
	Grace time.Duration
	// TaintRules are DeviceTaintRules; those whose selector matches a
	// device of the pool taint it. Nil when the cluster serves none.
	TaintRules []*resourceapi.DeviceTaintRule
	// ClaimName names a claim in problem messages from its ledger key (a
	// UID): namespace/name, which a person can look up. Nil, or an empty
	// answer, leaves the key.
	ClaimName func(key string) string
}

// Assess is AssessPool without DeviceTaintRules.
func Assess(p *Pool, l *Ledger, now, incompleteSince time.Time, grace time.Duration) Report {
	return AssessPool(p, l, AssessInput{Now: now, IncompleteSince: incompleteSince, Grace: grace})
}

// AssessPool computes a pool's health from its structure (p), the
// allocations in l (nil means none), DeviceTaintRules and how long it has
// been incomplete.
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
// Consumption is recomputed from the ledger's recorded allocations (not
// from tentative Takes) with PoolUsage's exact accounting, so AssessPool
// does not depend on the ledger's PoolUsage being up to date with p.
func AssessPool(p *Pool, l *Ledger, in AssessInput) Report {
	now := in.Now
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
		since := in.IncompleteSince
		if since.IsZero() {
			since = now
		}
		r.IncompleteFor = max(now.Sub(since), 0)
		if pr, ok := IncompleteProblem(p, since, now, in.Grace); ok {
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
	a.name = in.ClaimName
	allocProblems := a.problems()
	problems = append(problems, allocProblems...)

	a.count(&r, rulesFor(p.ID, in.TaintRules))
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

// count fills r.Devices, r.Availability and r.Partitions.
func (a *allocView) count(r *Report, rules []*resourceapi.DeviceTaintRule) {
	p, t := a.p, a.u.t
	var partitions []PartitionReport
	if len(t.partitions) > 0 {
		partitions = make([]PartitionReport, len(t.partitions))
		for k, pt := range t.partitions {
			partitions[k].PartitionType = pt
		}
	}
	usable := p.Allocatable()
	av := &r.Availability
	// free partitionable devices, for the fragmentation report.
	var partitionable []int
	for i := range p.Devices {
		d := &p.Devices[i]
		tainted := hasBlockingTaint(d.Device) || (len(rules) > 0 && ruleTaints(rules, d.Device.Name))
		if tainted {
			r.Devices.Tainted++
		}
		if a.exclusive[i] > 0 {
			r.Devices.Allocated++
		}
		if a.admin[i] > 0 {
			r.Devices.AdminAccess++
		}
		shared := t.flags[i]&flagShared != 0 && a.exclusive[i] > 0
		available := false
		switch {
		case !usable:
			av.PoolUnusable++
		case a.u.InUse(i) || (shared && !a.capacityLeft(i)):
			av.Allocated++
		case tainted:
			av.Tainted++
		case !a.u.Fits(i):
			av.BlockedByCounters++
		default:
			available = true
			av.Available++
			if shared {
				av.Shared++
			}
		}
		if t.partition != nil && t.partition[i] > 0 {
			pr := &partitions[t.partition[i]-1]
			pr.Total++
			if available {
				pr.Allocatable++
			}
			// Fragmentation is about counters: a device the counters
			// leave room for counts, tainted or not (central devices are
			// tainted for kube-scheduler).
			if usable && !a.u.InUse(i) && a.u.Fits(i) {
				partitionable = append(partitionable, i)
			}
		}
	}
	r.Devices.Free = av.Available
	slices.SortFunc(partitions, comparePartitions)
	r.Partitions = partitions
	if usable {
		// An incomplete or invalid pool gives nothing: no capacity to speak of.
		r.Fragmentation = a.fragmentation(partitionable)
	}
}

// hasBlockingTaint reports a taint that keeps requests without a matching
// toleration away (NoSchedule or NoExecute; None is informational).
func hasBlockingTaint(d *resourceapi.Device) bool {
	for _, t := range d.Taints {
		if blocking(t.Effect) {
			return true
		}
	}
	return false
}

func blocking(e resourceapi.DeviceTaintEffect) bool {
	return e == resourceapi.DeviceTaintEffectNoSchedule || e == resourceapi.DeviceTaintEffectNoExecute
}

// rulesFor keeps the rules with a blocking effect whose selector can match
// devices of pool id.
func rulesFor(id ID, rules []*resourceapi.DeviceTaintRule) []*resourceapi.DeviceTaintRule {
	var out []*resourceapi.DeviceTaintRule
	for _, r := range rules {
		if r == nil || !blocking(r.Spec.Taint.Effect) {
			continue
		}
		if RuleMatchesPool(r, id) {
			out = append(out, r)
		}
	}
	return out
}

// RuleMatchesPool reports whether a DeviceTaintRule's selector can select
// devices of pool id: its driver and pool, where set, are id's. A rule
// without a selector selects every device.
func RuleMatchesPool(r *resourceapi.DeviceTaintRule, id ID) bool {
	sel := r.Spec.DeviceSelector
	if sel == nil {
		return true
	}
	return (sel.Driver == nil || *sel.Driver == id.Driver) && (sel.Pool == nil || *sel.Pool == id.Pool)
}

// ruleTaints reports whether one of rules (already matched to the pool)
// selects the device: a rule without a device name selects every device
// of the pools it matches.
func ruleTaints(rules []*resourceapi.DeviceTaintRule, device string) bool {
	for _, r := range rules {
		sel := r.Spec.DeviceSelector
		if sel == nil || sel.Device == nil || *sel.Device == device {
			return true
		}
	}
	return false
}

// capacityLeft reports whether shared device i has some of every capacity
// its allocations consume left (consumable capacity, KEP-5075).
func (a *allocView) capacityLeft(i int) bool {
	d := a.p.Devices[i].Device
	h := a.held[d.Name]
	if h == nil || len(h.capacity) == 0 {
		return true
	}
	for name, c := range d.Capacity {
		var used resource.Quantity
		consumed := false
		for _, share := range h.capacity {
			if q, ok := share[name]; ok {
				if !consumed {
					used, consumed = q.DeepCopy(), true
				} else {
					used.Add(q)
				}
			}
		}
		if consumed && used.Cmp(c.Value) >= 0 {
			return false
		}
	}
	return true
}
