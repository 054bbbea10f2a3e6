package pool

import (
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// allocView is the recorded allocations of one pool matched against the
// pool's current devices, with exact counter consumption.
type allocView struct {
	p         *Pool
	held      map[string]*holding
	exclusive []int32 // per device; only the first device of a duplicated name
	admin     []int32
	missing   []string // held names the pool does not publish, sorted
	consumed  map[string]map[string]resource.Quantity
	over      bool                                    // some counter is consumed beyond capacity
	available map[string]map[string]resource.Quantity // capacity - consumed, computed on demand
}

func newAllocView(p *Pool, held map[string]*holding) *allocView {
	a := &allocView{
		p:         p,
		held:      held,
		exclusive: make([]int32, len(p.Devices)),
		admin:     make([]int32, len(p.Devices)),
	}
	if len(held) == 0 {
		return a
	}
	found := make(map[string]bool, len(held))
	for i := range p.Devices {
		name := p.Devices[i].Device.Name
		h := held[name]
		if h == nil || found[name] {
			continue
		}
		found[name] = true
		a.exclusive[i] = h.exclusive
		a.admin[i] = h.admin
		if h.exclusive > 0 {
			a.consume(p.Devices[i].Device)
		}
	}
	for name := range held {
		if !found[name] {
			a.missing = append(a.missing, name)
		}
	}
	slices.Sort(a.missing)
	a.over = a.overconsumed()
	return a
}

// consume adds a device's consumption, once, like kube-scheduler.
// Consumption of counters the pool does not define is ignored (the pool is
// invalid for that already).
func (a *allocView) consume(d *resourceapi.Device) {
	for _, c := range d.ConsumesCounters {
		cs := a.p.CounterSets[c.CounterSet]
		if cs == nil {
			continue
		}
		for name, v := range c.Counters {
			if _, ok := cs.Counters[name]; !ok {
				continue
			}
			if a.consumed == nil {
				a.consumed = make(map[string]map[string]resource.Quantity)
			}
			set := a.consumed[c.CounterSet]
			if set == nil {
				set = make(map[string]resource.Quantity)
				a.consumed[c.CounterSet] = set
			}
			sum, ok := set[name]
			if !ok {
				// Quantities may share an inf.Dec; never add into the
				// API object's value.
				set[name] = v.Value.DeepCopy()
				continue
			}
			sum.Add(v.Value)
			set[name] = sum
		}
	}
}

func (a *allocView) consumedOf(set, counter string) resource.Quantity {
	return a.consumed[set][counter]
}

func (a *allocView) overconsumed() bool {
	for set, counters := range a.consumed {
		for name, used := range counters {
			capacity := a.p.CounterSets[set].Counters[name]
			if used.Cmp(capacity) > 0 {
				return true
			}
		}
	}
	return false
}

// canAllocate applies PoolUsage's rule with exact quantities.
func (a *allocView) canAllocate(i int) bool {
	d := a.p.Devices[i].Device
	shared := deviceAllowsMultiple(d)
	if a.exclusive[i] > 0 && !shared {
		return false
	}
	if len(d.ConsumesCounters) == 0 || (shared && a.exclusive[i] > 0) {
		return true
	}
	if a.over {
		return false
	}
	if a.available == nil {
		a.computeAvailable()
	}
	for _, c := range d.ConsumesCounters {
		avail := a.available[c.CounterSet]
		if avail == nil {
			continue // invalid pool; ignored like in PoolUsage
		}
		for name, v := range c.Counters {
			if left, ok := avail[name]; ok && v.Value.Cmp(left) > 0 {
				return false
			}
		}
	}
	return true
}

// computeAvailable fills capacity minus consumption per counter, so that
// checking a device is one comparison per counter.
func (a *allocView) computeAvailable() {
	a.available = make(map[string]map[string]resource.Quantity, len(a.p.CounterSets))
	for name, cs := range a.p.CounterSets {
		m := make(map[string]resource.Quantity, len(cs.Counters))
		for counter, capacity := range cs.Counters {
			left := capacity.DeepCopy()
			if used, ok := a.consumed[name][counter]; ok {
				left.Sub(used)
			}
			m[counter] = left
		}
		a.available[name] = m
	}
}

// problems lists the allocation problems: devices allocated but not
// published, devices in two exclusive allocations, and over-consumed
// counters.
func (a *allocView) problems() []Problem {
	var out []Problem
	for _, name := range a.missing {
		h := a.held[name]
		out = append(out, newProblem(ReasonAllocatedDeviceMissing, SeverityError, "", name,
			"device %s is allocated to %s but generation %d of the pool does not publish it",
			name, claimList(h.claims), a.p.Generation))
	}
	for i := range a.p.Devices {
		d := &a.p.Devices[i]
		if a.exclusive[i] < 2 || deviceAllowsMultiple(d.Device) {
			continue
		}
		h := a.held[d.Device.Name]
		out = append(out, newProblem(ReasonDeviceDoubleAllocated, SeverityError, d.Slice.Name, d.Device.Name,
			"device %s is allocated %d times without adminAccess (%s)",
			d.Device.Name, a.exclusive[i], claimList(h.claims)))
	}
	for set, counters := range a.consumed {
		cs := a.p.CounterSets[set]
		for name, used := range counters {
			capacity := cs.Counters[name]
			if used.Cmp(capacity) > 0 {
				out = append(out, newProblem(ReasonCounterOverconsumed, SeverityError, cs.Slice, "",
					"counter %s of counter set %s: allocated devices consume %s, capacity is %s",
					name, set, used.String(), capacity.String()))
			}
		}
	}
	return out
}

// claimList names the claims holding a device, for messages.
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
	if len(a.p.CounterSets) == 0 {
		return nil
	}
	// Sort names, not the (large) report structs.
	setNames := sortedKeys(a.p.CounterSets)
	out := make([]CounterSetReport, 0, len(setNames))
	var counterNames []string
	for _, name := range setNames {
		cs := a.p.CounterSets[name]
		rep := CounterSetReport{Name: name, Slice: cs.Slice, Counters: make([]CounterReport, 0, len(cs.Counters))}
		counterNames = counterNames[:0]
		for counter := range cs.Counters {
			counterNames = append(counterNames, counter)
		}
		slices.Sort(counterNames)
		for _, counter := range counterNames {
			capacity := cs.Counters[counter]
			used, ok := a.consumed[name][counter]
			if !ok {
				used = *resource.NewQuantity(0, capacity.Format)
			}
			rep.Counters = append(rep.Counters, CounterReport{Name: counter, Capacity: capacity, Consumed: used})
		}
		out = append(out, rep)
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
