package publisher

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/stack"
	"github.com/drastack/drastack/internal/topology"
)

// Desired is everything the publisher should publish and report for one
// DRAStack spec and the cluster's nodes.
type Desired struct {
	// Drivers maps every driver named in spec.multiHost to the pools to
	// publish for it, keyed by pool name. A driver with no pool is present
	// with an empty map: its controller must remove what it published.
	Drivers map[string]map[string]resourceslice.Pool
	// Status has one entry per spec entry, in spec order.
	Status []v1alpha1.MultiHostStatus
	// Summaries of the generated pools (withheld ones included), by pool
	// name, for logs and tests.
	Summaries map[string]topology.Summary
}

// placeholderDomain stands in for a domain when an entry is checked before
// any node is known, so that a bad spec is reported even without nodes.
const placeholderDomain = "domain"

// Compute decides, from the spec.multiHost entries and every Node, which
// pools each driver publishes and what status.multiHost says. It is pure.
//
// An entry that internal/topology rejects publishes no pool. A pool name
// that two domains of one driver share (possible only across entries:
// "a" with domain "b-c" and "a-b" with domain "c") is published by neither.
func Compute(entries []v1alpha1.MultiHostSpec, nodes []corev1.Node) Desired {
	d := Desired{
		Drivers:   map[string]map[string]resourceslice.Pool{},
		Summaries: map[string]topology.Summary{},
	}
	plans := make([]EntryPlan, 0, len(entries))
	seen := map[string]bool{}
	for i := range entries {
		e := &entries[i]
		// Admission keeps names unique (a list map); a duplicate could only
		// come from an object written around the CRD and is ignored, since
		// status cannot hold two entries of one name.
		if seen[e.Name] {
			continue
		}
		seen[e.Name] = true
		if d.Drivers[e.Driver] == nil {
			d.Drivers[e.Driver] = map[string]resourceslice.Pool{}
		}
		plan := MapEntry(e, nodes)
		if plan.Invalid == "" {
			if msg := checkEntry(e); msg != "" {
				plan.Invalid = fmt.Sprintf("%s: %s; nothing is published for this entry", ReasonInvalidTopology, msg)
				// First: it is why nothing else matters.
				plan.Problems = append([]string{plan.Invalid}, plan.Problems...)
				plan.Pools = nil
			}
		}
		plans = append(plans, plan)
	}
	dropConflictingEntries(plans, entries, nodes)
	conflicts := poolNameConflicts(plans)

	for _, plan := range plans {
		st := v1alpha1.MultiHostStatus{Name: plan.Entry}
		problems := slices.Clone(plan.Problems)
		for _, dp := range plan.Pools {
			name := dp.Spec.Pool
			if others := conflicts[conflictKey{plan.Driver, name}]; len(others) > 1 {
				problems = append(problems, fmt.Sprintf("%s: pool %s: domains of entries %s all map to this pool name; none of them is published",
					ReasonPoolNameConflict, name, strings.Join(others, ", ")))
				continue
			}
			res, err := topology.Generate(dp.Spec, 0)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: pool %s: %s; the pool is not published", ReasonInvalidTopology, name, topologyError(err)))
				continue
			}
			sum := res.Summary
			d.Summaries[name] = sum
			st.Hosts += int32(sum.Hosts)
			problems = append(problems, poolProblems(name, sum.Problems)...)
			if len(res.Slices) == 0 {
				continue
			}
			d.Drivers[plan.Driver][name] = poolOf(res)
			st.Pools++
			st.Devices += int32(sum.Devices)
			st.Slices += int32(sum.Slices)
		}
		st.Problems = capProblems(problems, MaxProblemsPerEntry)
		d.Status = append(d.Status, st)
	}
	return d
}

// checkEntry runs topology.Generate on the entry without hosts, so that a
// spec topology rejects is reported once, whether or not nodes exist yet,
// and returns the reason or "".
func checkEntry(e *v1alpha1.MultiHostSpec) string {
	spec := topology.Spec{
		Driver:       e.Driver,
		Pool:         stack.PoolName(e.Name, placeholderDomain),
		Domain:       placeholderDomain,
		HostGrid:     toInts(e.HostGrid),
		ChipsPerHost: toInts(e.ChipsPerHost),
		Partitions:   e.Partitions,
		Attributes:   e.Attributes,
		MissingHosts: missingHostPolicy(e.MissingHostPolicy),
	}
	// With no hosts the pool is withheld under Withhold (nothing is built)
	// and empty under PublishAvailable: either way only the spec is checked.
	if _, err := topology.Generate(spec, 0); err != nil {
		return topologyError(err)
	}
	return ""
}

// topologyError drops the "invalid multi-host spec for pool ..." wrapper of
// a topology error when there is one (the status line names the entry or
// pool already) and puts joined reasons on one line.
func topologyError(err error) string {
	if inner := errors.Unwrap(err); inner != nil {
		err = inner
	}
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

// dropConflictingEntries empties the plan of every entry that selects a
// host of an earlier entry of its driver that publishes
// (stack.MultiHostConflicts), so that no chip is two devices. Pool names
// two entries share are poolNameConflicts' to handle.
func dropConflictingEntries(plans []EntryPlan, entries []v1alpha1.MultiHostSpec, nodes []corev1.Node) {
	plan := func(name string) *EntryPlan {
		for i := range plans {
			if plans[i].Entry == name {
				return &plans[i]
			}
		}
		return nil
	}
	for _, c := range stack.MultiHostConflicts(entries, nodes) {
		first, second := plan(entries[c.First].Name), plan(entries[c.Second].Name)
		if len(c.Nodes) == 0 || first == nil || second == nil || first.Invalid != "" || second.Invalid != "" {
			continue
		}
		second.Invalid = fmt.Sprintf("%s: %s; nothing is published for this entry", ReasonHostConflict, c.Message(entries))
		second.Problems = append([]string{second.Invalid}, second.Problems...)
		second.Pools = nil
	}
}

// conflictKey is a pool as the resourceslice library knows it.
type conflictKey struct{ driver, pool string }

// poolNameConflicts returns, for every (driver, pool name), the entries
// that would publish it.
func poolNameConflicts(plans []EntryPlan) map[conflictKey][]string {
	out := map[conflictKey][]string{}
	for _, plan := range plans {
		for _, dp := range plan.Pools {
			k := conflictKey{plan.Driver, dp.Spec.Pool}
			out[k] = append(out[k], plan.Entry)
		}
	}
	return out
}

// poolOf turns generated slices into the library's description of a pool.
// The library names slices by their index and sets the pool's name,
// generation and slice count itself, so only the content is handed over,
// in the order topology chose (counter slices first, then devices smallest
// shape first, which first-fit allocators follow).
func poolOf(res *topology.Result) resourceslice.Pool {
	p := resourceslice.Pool{Slices: make([]resourceslice.Slice, len(res.Slices))}
	for i, s := range res.Slices {
		p.Slices[i] = resourceslice.Slice{
			Devices:                s.Spec.Devices,
			SharedCounters:         s.Spec.SharedCounters,
			PerDeviceNodeSelection: s.Spec.PerDeviceNodeSelection,
		}
	}
	return p
}
