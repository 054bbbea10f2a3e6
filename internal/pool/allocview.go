package pool

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// allocView is the recorded allocations of one pool matched against the
// pool's current devices, with the counter consumption PoolUsage computes
// from them (the same exact accounting an engine uses).
type allocView struct {
	p    *Pool
	held map[string]*holding
	u    *PoolUsage
	// exclusive and admin count allocations per device; only the first
	// device of a duplicated name is matched.
	exclusive []int32
	admin     []int32
	missing   []string // held names the pool does not publish, sorted
	// name turns a claim key into what messages show (nil: the key).
	name func(string) string
	// firstFormat is, per slot, the format of the first consumption of an
	// allocated device (formatUnset when none consumes it): reports keep
	// the format the driver wrote, as Quantity.Add would.
	firstFormat []uint8
}

func newAllocView(p *Pool, held map[string]*holding) *allocView {
	a := &allocView{p: p, held: held, u: newUsage(p)}
	counts := make([]int32, 2*len(p.Devices))
	a.exclusive, a.admin = counts[:len(p.Devices)], counts[len(p.Devices):]
	if len(held) == 0 {
		return a
	}
	t := a.u.t
	matched := 0
	var found map[string]bool // only when a name is published twice
	for i := range p.Devices {
		name := p.Devices[i].Device.Name
		h := held[name]
		if h == nil {
			continue
		}
		if t.dup != nil && t.dup[i] {
			continue
		}
		matched++
		a.exclusive[i] = h.exclusive
		a.admin[i] = h.admin
		if h.exclusive > 0 {
			a.u.users[i] = h.exclusive
			a.u.charge(i, -1)
			for k := t.useStart[i]; k < t.useStart[i+1]; k++ {
				s := t.uses[k].slot
				if a.firstFormat == nil {
					a.firstFormat = make([]uint8, len(t.slots))
				}
				if a.firstFormat[s] == formatUnset {
					a.firstFormat[s] = t.uses[k].format
				}
			}
		}
	}
	if matched < len(held) {
		found = make(map[string]bool, matched)
		for i := range p.Devices {
			if t.dup == nil || !t.dup[i] {
				found[p.Devices[i].Device.Name] = true
			}
		}
		for name := range held {
			if !found[name] {
				a.missing = append(a.missing, name)
			}
		}
		slices.Sort(a.missing)
	}
	return a
}

// canAllocate applies PoolUsage's rule.
func (a *allocView) canAllocate(i int) bool { return a.u.CanAllocate(i) }

// problems lists the allocation problems: devices allocated but not
// published, devices in two exclusive allocations, and over-consumed
// counters.
func (a *allocView) problems() []Problem {
	var out []Problem
	for _, name := range a.missing {
		h := a.held[name]
		out = append(out, newProblem(ReasonAllocatedDeviceMissing, SeverityError, "", name,
			"device %s is allocated to %s but generation %d of the pool does not publish it",
			name, claimList(a.claimNames(h.claims)), a.p.Generation))
	}
	for i := range a.p.Devices {
		d := &a.p.Devices[i]
		if a.exclusive[i] < 2 || deviceAllowsMultiple(d.Device) {
			continue
		}
		h := a.held[d.Device.Name]
		out = append(out, newProblem(ReasonDeviceDoubleAllocated, SeverityError, d.Slice.Name, d.Device.Name,
			"device %s is allocated %d times without adminAccess (%s)",
			d.Device.Name, a.exclusive[i], claimList(a.claimNames(h.claims))))
	}
	if a.u.over == 0 {
		return out
	}
	for _, s := range a.u.t.sets {
		for k, name := range s.layout.names {
			slot := int(s.first) + k
			if !a.u.slotOver(slot) {
				continue
			}
			capacity := s.layout.counters[name]
			used := a.consumed(slot, capacity)
			out = append(out, newProblem(ReasonCounterOverconsumed, SeverityError, s.cs.Slice, "",
				"counter %s of counter set %s: allocated devices consume %s, capacity is %s",
				name, s.cs.Name, used.String(), capacity.String()))
		}
	}
	return out
}

// consumed is what allocated devices consume of a slot, in the format of
// the first of them (the capacity's format when none consumes it).
func (a *allocView) consumed(slot int, capacity resource.Quantity) resource.Quantity {
	if a.firstFormat == nil || a.firstFormat[slot] == formatUnset {
		return *resource.NewQuantity(0, capacity.Format)
	}
	return a.u.consumed(slot, formatOf(a.firstFormat[slot]))
}

// claimList names the claims holding a device, for messages.
// claimNames are the names messages show for claim keys.
func (a *allocView) claimNames(keys []string) []string {
	if a.name == nil {
		return keys
	}
	out := make([]string, len(keys))
	for i, k := range keys {
		if out[i] = a.name(k); out[i] == "" {
			out[i] = k
		}
	}
	return out
}

func claimList(keys []string) string {
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	const show = 5
	if len(sorted) > show {
		return "claims " + strings.Join(sorted[:show], ", ") + ", ..."
	}
	if len(sorted) == 1 {
		return "claim " + sorted[0]
	}
	return "claims " + strings.Join(sorted, ", ")
}

func (a *allocView) counterReports() []CounterSetReport {
	t := a.u.t
	if len(t.sets) == 0 {
		return nil
	}
	out := make([]CounterSetReport, len(t.sets))
	all := make([]CounterReport, len(t.slots))
	for i, s := range t.sets {
		counters := all[s.first : int(s.first)+len(s.layout.names) : int(s.first)+len(s.layout.names)]
		for k, name := range s.layout.names {
			capacity := s.layout.counters[name]
			counters[k] = CounterReport{Name: name, Capacity: capacity, Consumed: a.consumed(int(s.first)+k, capacity)}
		}
		out[i] = CounterSetReport{Name: s.cs.Name, Slice: s.cs.Slice, Counters: counters}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
