package pool

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// byteGen turns fuzz bytes into choices; past the end every choice is 0.
type byteGen struct{ data []byte }

func (g *byteGen) next() int {
	if len(g.data) == 0 {
		return 0
	}
	b := g.data[0]
	g.data = g.data[1:]
	return int(b)
}

func (g *byteGen) pick(n int) int { return g.next() % n }

func pickOf[T any](g *byteGen, options ...T) T { return options[g.pick(len(options))] }

// Small name alphabets so that duplicates, missing references and
// collisions between pools are frequent. Values are non-negative and small
// (the API server rejects negative counters; huge ones are covered by unit
// tests).
var (
	fuzzQuantities = []string{"0", "1", "2", "3", "1Gi", "0.5", "1n", "250m"}
	fuzzCounters   = []string{"c0", "c1", "c2", "c9"}
	fuzzSets       = []string{"cs0", "cs1", "cs2"}
	fuzzDevices    = []string{"d0", "d1", "d2", "d3", "d4"}
)

func (g *byteGen) counters(n int) map[string]resourceapi.Counter {
	m := map[string]resourceapi.Counter{}
	for range n {
		m[pickOf(g, fuzzCounters...)] = resourceapi.Counter{Value: resource.MustParse(pickOf(g, fuzzQuantities...))}
	}
	return m
}

func (g *byteGen) device(i int) resourceapi.Device {
	d := resourceapi.Device{Name: pickOf(g, fuzzDevices...)}
	if g.pick(4) == 0 {
		d.Name = fmt.Sprint("u", i)
	}
	switch g.pick(6) {
	case 1:
		d.NodeName = ptr.To(pickOf(g, "n0", "n1", ""))
	case 2:
		d.AllNodes = ptr.To(g.pick(2) == 0)
	case 3:
		d.NodeSelector = selectorTerms(g.pick(3))
	case 4:
		d.NodeName, d.AllNodes = ptr.To("n0"), ptr.To(true)
	}
	for range g.pick(4) {
		d.ConsumesCounters = append(d.ConsumesCounters, resourceapi.DeviceCounterConsumption{
			CounterSet: pickOf(g, append(fuzzSets, "cs9")...),
			Counters:   g.counters(g.pick(3)),
		})
	}
	for range g.pick(3) {
		taint(pickOf(g, resourceapi.DeviceTaintEffectNone, resourceapi.DeviceTaintEffectNoSchedule, resourceapi.DeviceTaintEffectNoExecute))(&d)
	}
	switch g.pick(8) {
	case 1:
		listAttr("l", g.pick(60))(&d)
	case 2:
		scalarAttrs(g.pick(40))(&d)
	case 3:
		taints(17)(&d)
	}
	if g.pick(5) == 0 {
		d.AllowMultipleAllocations = ptr.To(true)
	}
	return d
}

func (g *byteGen) slice(i int) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("s", i)},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: pickOf(g, "a.example.com", "b.example.com"),
			Pool: resourceapi.ResourcePool{
				Name:               pickOf(g, "p0", "p1", "p2"),
				Generation:         int64(g.pick(3)),
				ResourceSliceCount: int64(g.pick(4)),
			},
		},
	}
	switch g.pick(8) {
	case 1:
		s.Spec.NodeName = ptr.To(pickOf(g, "n0", "n1"))
	case 2:
		s.Spec.NodeName = ptr.To("")
	case 3:
		s.Spec.AllNodes = ptr.To(true)
	case 4:
		s.Spec.AllNodes = ptr.To(false)
	case 5:
		s.Spec.NodeSelector = selectorTerms(g.pick(3))
	case 6, 7:
		s.Spec.PerDeviceNodeSelection = ptr.To(g.pick(5) != 0)
		if g.pick(4) == 0 {
			s.Spec.NodeName = ptr.To("n0")
		}
	}
	nSets := g.pick(4)
	if g.pick(16) == 0 {
		nSets = 9
	}
	for range nSets {
		nCounters := g.pick(4)
		cs := resourceapi.CounterSet{Name: pickOf(g, fuzzSets...), Counters: g.counters(nCounters)}
		if g.pick(16) == 0 {
			cs.Counters = counterMap(nCounters2(33)...)
		}
		s.Spec.SharedCounters = append(s.Spec.SharedCounters, cs)
	}
	nDevices := g.pick(5)
	if g.pick(16) == 0 {
		nDevices = 65 + g.pick(70)
	}
	for j := range nDevices {
		s.Spec.Devices = append(s.Spec.Devices, g.device(j))
	}
	return s
}

func nCounters2(n int) []string { return nCounters(n) }

func (g *byteGen) claims(n int) []*resourceapi.ResourceClaim {
	var out []*resourceapi.ResourceClaim
	for i := range n {
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprint("c", i)}}
		c.Status.Allocation = &resourceapi.AllocationResult{}
		for range 1 + g.pick(3) {
			c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
				Driver:      pickOf(g, "a.example.com", "b.example.com"),
				Pool:        pickOf(g, "p0", "p1", "p2"),
				Device:      pickOf(g, append(fuzzDevices, "u0", "u1")...),
				AdminAccess: ptr.To(g.pick(4) == 0),
			})
		}
		out = append(out, c)
	}
	return out
}

// FuzzValidate builds slices and claims from the fuzz input and checks the
// invariants of the pool model: no panic, only known reason codes with a
// severity and a message, deterministic and order-independent grouping,
// Build equal to Group, PoolUsage equal to plain Quantity arithmetic,
// availability adding up, and claims added then removed leave no consumption.
func FuzzValidate(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{3, 0, 0, 1, 2, 6, 1, 2, 1, 1, 3, 2, 1, 0, 2, 1, 1, 3, 0, 1, 2, 2})
	f.Add([]byte("a fairly long seed that exercises many different choices in the generator 0123456789"))
	f.Add([]byte{5, 1, 1, 1, 1, 1, 1, 1, 1, 7, 7, 7, 7, 7, 7, 7, 200, 100, 3, 3, 3, 3, 9, 9, 9, 9, 0, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		g := &byteGen{data: data}
		var in []*resourceapi.ResourceSlice
		for i := range 1 + g.pick(6) {
			in = append(in, g.slice(i))
		}
		claims := g.claims(g.pick(5))

		pools := Group(in)
		if again := Group(in); !reflect.DeepEqual(pools, again) {
			t.Fatal("Group is not deterministic")
		}
		rev := slices.Clone(in)
		slices.Reverse(rev)
		if other := Group(rev); !reflect.DeepEqual(pools, other) {
			t.Fatal("Group depends on input order")
		}

		l := NewLedger()
		for _, p := range pools {
			if b := Build(p.ID, in); !reflect.DeepEqual(b, p) {
				t.Fatalf("Build(%s) differs from Group", p.ID)
			}
			checkProblems(t, p.Problems)
			l.SetPool(p)
		}
		for _, c := range claims {
			l.AddClaim(c)
		}

		for _, p := range pools {
			r := Assess(p, l, t0, t0.Add(-time.Hour), time.Minute)
			checkProblems(t, r.Problems)
			switch r.Health {
			case HealthHealthy, HealthIncomplete, HealthInvalid, HealthDegraded:
			default:
				t.Fatalf("unknown health %q", r.Health)
			}
			if r.Devices.Allocated > r.Devices.Total || r.Devices.Free > r.Devices.Total || r.Devices.Tainted > r.Devices.Total {
				t.Fatalf("inconsistent counts %+v", r.Devices)
			}
			av := r.Availability
			if av.Available+av.PoolUnusable+av.Allocated+av.Tainted+av.BlockedByCounters != r.Devices.Total || av.Available != r.Devices.Free {
				t.Fatalf("availability %+v does not add up to %+v", av, r.Devices)
			}
			// The ledger's PoolUsage agrees with an independent
			// computation in plain resource.Quantity arithmetic.
			u := l.Usage(p.ID)
			ref := referenceCanAllocate(p, l)
			for i := range p.Devices {
				if idx, _ := u.Index(p.Devices[i].Device.Name); idx != i {
					continue // duplicate name: only the first is tracked
				}
				if u.CanAllocate(i) != ref[i] {
					t.Fatalf("pool %s device %s: CanAllocate %v, Quantity arithmetic says %v\ndevice: %+v\nsets: %+v\nbalances: %+v",
						p.ID, p.Devices[i].Device.Name, u.CanAllocate(i), ref[i], p.Devices[i].Device.ConsumesCounters, p.CounterSets, u.Balances())
				}
			}
		}

		for _, c := range claims {
			l.RemoveClaim(c)
		}
		for _, p := range pools {
			u := l.Usage(p.ID)
			if u.Overconsumed() {
				t.Fatalf("pool %s over-consumed after removing all claims", p.ID)
			}
			for _, b := range u.Balances() {
				if !b.Consumed.IsZero() {
					t.Fatalf("pool %s counter %s/%s consumed %s after removing all claims", p.ID, b.CounterSet, b.Counter, b.Consumed.String())
				}
			}
		}
	})
}

func checkProblems(t *testing.T, ps []Problem) {
	t.Helper()
	for _, pr := range ps {
		if !pr.Reason.Known() || (pr.Severity != SeverityError && pr.Severity != SeverityWarning) || pr.Message == "" {
			t.Fatalf("bad problem %+v", pr)
		}
	}
	if !slices.IsSortedFunc(ps, CompareProblems) {
		t.Fatal("problems are not sorted")
	}
}

// referenceCanAllocate is PoolUsage.CanAllocate for every device, computed
// independently with resource.Quantity sums over maps (slow and obvious).
func referenceCanAllocate(p *Pool, l *Ledger) []bool {
	first := map[string]int{}
	for i := range p.Devices {
		if _, ok := first[p.Devices[i].Device.Name]; !ok {
			first[p.Devices[i].Device.Name] = i
		}
	}
	allocated := make([]bool, len(p.Devices))
	for name, i := range first {
		if ex, _, _ := l.Holders(p.ID, name); ex > 0 {
			allocated[i] = true
		}
	}
	defined := func(set, counter string) (resource.Quantity, bool) {
		cs := p.CounterSets[set]
		if cs == nil {
			return resource.Quantity{}, false
		}
		q, ok := cs.Counters[counter]
		return q, ok
	}
	consumed := map[[2]string]resource.Quantity{}
	for i := range p.Devices {
		if !allocated[i] {
			continue
		}
		for _, c := range p.Devices[i].Device.ConsumesCounters {
			for name, v := range c.Counters {
				if _, ok := defined(c.CounterSet, name); !ok {
					continue
				}
				k := [2]string{c.CounterSet, name}
				sum := consumed[k].DeepCopy()
				sum.Add(v.Value)
				consumed[k] = sum
			}
		}
	}
	over := false
	for k, used := range consumed {
		capacity, _ := defined(k[0], k[1])
		over = over || used.Cmp(capacity) > 0
	}
	out := make([]bool, len(p.Devices))
	for i := range p.Devices {
		d := p.Devices[i].Device
		shared := deviceAllowsMultiple(d)
		switch {
		case allocated[i] && !shared:
		case len(d.ConsumesCounters) == 0 || (shared && allocated[i]):
			out[i] = true
		case over:
		default:
			fits := true
			for _, c := range d.ConsumesCounters {
				for name, v := range c.Counters {
					capacity, ok := defined(c.CounterSet, name)
					if !ok {
						continue
					}
					sum := consumed[[2]string{c.CounterSet, name}].DeepCopy()
					sum.Add(v.Value)
					fits = fits && sum.Cmp(capacity) <= 0
				}
			}
			out[i] = fits
		}
	}
	return out
}
