package pool

import (
	"cmp"
	"slices"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
)

// KeyOf returns the pool a slice belongs to, so callers can index slices by
// pool and rebuild one pool with Build when one of its slices changes.
func KeyOf(s *resourceapi.ResourceSlice) ID {
	return ID{Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name}
}

// compareSlices orders slices by pool, then name, then UID (a tie breaker
// that only matters for hand-written input with duplicate names), so pools
// come out sorted by ID and each pool's slices by name.
func compareSlices(a, b *resourceapi.ResourceSlice) int {
	if c := cmp.Compare(a.Spec.Driver, b.Spec.Driver); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Spec.Pool.Name, b.Spec.Pool.Name); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Name, b.Name); c != 0 {
		return c
	}
	return cmp.Compare(a.UID, b.UID)
}

func compareByName(a, b *resourceapi.ResourceSlice) int {
	if c := cmp.Compare(a.Name, b.Name); c != 0 {
		return c
	}
	return cmp.Compare(a.UID, b.UID)
}

// Options change how Group validates. The zero value is the live view that
// the pool controller, the engines and kubectl dra simulate use.
type Options struct {
	// StrictLimits reports a slice over a per-slice limit (the Too*
	// reasons) as an Error instead of a Warning. The API server refuses
	// such a slice on write, so offline (kubectl dra validate) it could
	// never be published; live it can only predate the limit, and
	// kube-scheduler still allocates from it.
	StrictLimits bool
	// CompatibilityGroupsDisabled says the DRADeviceCompatibilityGroups
	// feature gate is off. kube-scheduler then ignores every slice whose
	// devices declare consumesCounters[].compatibilityGroups, so the pool
	// can never be complete: such a slice gets a FeatureGateDisabled
	// Error.
	CompatibilityGroupsDisabled bool
}

// Group groups slices into pools (driver, pool name), picks each pool's
// current generation, resolves where each device is reachable and validates
// the pools. Pools are sorted by ID. Nil slices are ignored; the input is
// neither modified nor copied deeply: Pools point into the given objects.
//
// Group does not add IncompletePool (whether an incomplete pool is a problem
// depends on how long it has been incomplete: see IncompleteProblem).
//
// Cost: one sort of the input, then linear work per pool with scratch maps
// reused across pools.
func Group(in []*resourceapi.ResourceSlice) []*Pool {
	return GroupWith(in, Options{})
}

// GroupWith is Group with validation changed by opts.
func GroupWith(in []*resourceapi.ResourceSlice, opts Options) []*Pool {
	sorted := make([]*resourceapi.ResourceSlice, 0, len(in))
	for _, s := range in {
		if s != nil {
			sorted = append(sorted, s)
		}
	}
	slices.SortFunc(sorted, compareSlices)

	n := 0
	for i := range sorted {
		if i == 0 || KeyOf(sorted[i]) != KeyOf(sorted[i-1]) {
			n++
		}
	}
	// One backing array for all pools: 10,000 pools are one allocation.
	backing := make([]Pool, n)
	out := make([]*Pool, n)
	b := getBuilder()
	defer putBuilder(b)
	b.opts = opts
	for start, k := 0, 0; start < len(sorted); k++ {
		id := KeyOf(sorted[start])
		end := start + 1
		for end < len(sorted) && KeyOf(sorted[end]) == id {
			end++
		}
		p := &backing[k]
		// The run is already sorted by name and owned by us.
		b.build(p, id, sorted[start:end:end])
		out[k] = p
		start = end
	}
	return out
}

// Build builds one pool from its slices (of any generation), the same way
// Group does. Slices of other pools and nil slices are ignored. A controller
// that indexes slices by KeyOf calls Build for the one pool whose slices
// changed instead of regrouping everything. It returns nil when no slice
// belongs to id.
func Build(id ID, in []*resourceapi.ResourceSlice) *Pool {
	own := make([]*resourceapi.ResourceSlice, 0, len(in))
	for _, s := range in {
		if s != nil && KeyOf(s) == id {
			own = append(own, s)
		}
	}
	if len(own) == 0 {
		return nil
	}
	slices.SortFunc(own, compareByName)
	p := &Pool{}
	b := getBuilder()
	defer putBuilder(b)
	b.build(p, id, own)
	return p
}

// builder holds scratch state reused across pools so that validating a
// pool does not allocate maps for its checks.
type builder struct {
	// deviceAt maps a device name to its first index in Pool.Devices.
	deviceAt map[string]int
	problems []Problem
	counters counterInterner
	// Scratch of indexCounters: every consumption and its value.
	uses []counterUse
	decs []decimal
	buf  [40]byte
	// dups are the indexes in Pool.Devices of devices whose name an
	// earlier device already has.
	dups []int
	// opts of the current Group call (zero for Build).
	opts Options
}

var builders = sync.Pool{New: func() any {
	return &builder{deviceAt: make(map[string]int), counters: newCounterInterner()}
}}

func getBuilder() *builder { return builders.Get().(*builder) }

func putBuilder(b *builder) {
	// Do not keep the scratch map of one huge pool alive forever.
	if len(b.deviceAt) > 4096 {
		b.deviceAt = make(map[string]int)
	}
	clear(b.deviceAt)
	b.problems = b.problems[:0]
	b.opts = Options{}
	if cap(b.uses) > 1<<16 {
		b.uses, b.decs = nil, nil
	}
	// Interned maps belong to the pools of one call; do not keep them.
	b.counters.reset()
	builders.Put(b)
}

func (b *builder) add(p Problem) { b.problems = append(b.problems, p) }

// build fills p from run, which holds all slices of pool id sorted by name.
func (b *builder) build(p *Pool, id ID, run []*resourceapi.ResourceSlice) {
	clear(b.deviceAt)
	b.problems = b.problems[:0]
	b.dups = b.dups[:0]
	p.ID = id

	gen := run[0].Spec.Pool.Generation
	for _, s := range run[1:] {
		gen = max(gen, s.Spec.Pool.Generation)
	}
	p.Generation = gen
	p.Slices, p.StaleSlices = splitGenerations(run, gen)

	p.ExpectedSlices = 0
	devices := 0
	sets := 0
	for _, s := range p.Slices {
		// Slices of one generation should agree on resourceSliceCount. If
		// they do not, the largest count wins: the pool then stays
		// incomplete until the driver has written them all, which is the
		// safe side.
		p.ExpectedSlices = max(p.ExpectedSlices, s.Spec.Pool.ResourceSliceCount)
		devices += len(s.Spec.Devices)
		sets += len(s.Spec.SharedCounters)
	}
	p.Node = commonNode(p.Slices)
	p.Devices = make([]Device, 0, devices)
	p.CounterSets = nil
	if sets > 0 {
		p.CounterSets = make(map[string]*CounterSet, sets)
	}

	add := b.add
	for _, s := range p.Slices {
		b.addSlice(p, s, add)
	}
	p.counters = b.indexCounters(p, p.Complete(), add)

	if len(p.StaleSlices) > 0 {
		add(staleProblem(p))
	}
	if len(b.problems) > 0 {
		p.Problems = slices.Clone(b.problems)
		SortProblems(p.Problems)
	} else {
		p.Problems = nil
	}
}

// splitGenerations separates the current generation from older ones,
// keeping name order in both. Without stale slices (the common case) the
// run is used as is.
func splitGenerations(run []*resourceapi.ResourceSlice, gen int64) (current, stale []*resourceapi.ResourceSlice) {
	nCurrent := 0
	for _, s := range run {
		if s.Spec.Pool.Generation == gen {
			nCurrent++
		}
	}
	if nCurrent == len(run) {
		return run, nil
	}
	buf := make([]*resourceapi.ResourceSlice, len(run))
	current, stale = buf[:0:nCurrent], buf[nCurrent:nCurrent]
	for _, s := range run {
		if s.Spec.Pool.Generation == gen {
			current = append(current, s)
		} else {
			stale = append(stale, s)
		}
	}
	return current, stale
}

// commonNode returns spec.nodeName when every slice sets the same one.
func commonNode(current []*resourceapi.ResourceSlice) string {
	node := ""
	for _, s := range current {
		if s.Spec.NodeName == nil || *s.Spec.NodeName == "" {
			return ""
		}
		if node == "" {
			node = *s.Spec.NodeName
		} else if node != *s.Spec.NodeName {
			return ""
		}
	}
	return node
}

// addSlice validates one current slice and adds its devices and counter
// sets to p.
func (b *builder) addSlice(p *Pool, s *resourceapi.ResourceSlice, add func(Problem)) {
	spec := &s.Spec
	sel := sliceSelection(s, add)
	if len(spec.Devices) > 0 && len(spec.SharedCounters) > 0 {
		add(newProblem(ReasonMixedCountersAndDevices, SeverityError, s.Name, "",
			"slice %s sets both devices (%d) and sharedCounters (%d); a slice may hold only one of them",
			s.Name, len(spec.Devices), len(spec.SharedCounters)))
	}
	checkLimits(s, limitSeverity(b.opts.StrictLimits), add)
	if b.opts.CompatibilityGroupsDisabled {
		checkCompatibilityGroups(s, p.ID, add)
	}

	for i := range spec.SharedCounters {
		cs := &spec.SharedCounters[i]
		if first, dup := p.CounterSets[cs.Name]; dup {
			add(duplicateCounterSet(s, cs.Name, first.Slice))
			continue
		}
		l := b.counters.layout(cs.Counters)
		p.CounterSets[cs.Name] = &CounterSet{Name: cs.Name, Slice: s.Name, Counters: l.counters, layout: l}
	}

	for i := range spec.Devices {
		d := &spec.Devices[i]
		if first, dup := b.deviceAt[d.Name]; dup {
			add(duplicateDevice(s, d.Name, p.Devices[first].Slice.Name))
			b.dups = append(b.dups, len(p.Devices))
		} else {
			b.deviceAt[d.Name] = len(p.Devices)
		}
		ds := deviceSelection(s, sel, d, add)
		p.Devices = append(p.Devices, Device{
			Slice:        s,
			Device:       d,
			NodeName:     ds.nodeName,
			NodeSelector: ds.selector,
			AllNodes:     ds.allNodes,
		})
	}
}

// checkCompatibilityGroups reports a slice that kube-scheduler ignores
// because its devices declare compatibility groups while the
// DRADeviceCompatibilityGroups gate is off. The first such device is named.
func checkCompatibilityGroups(s *resourceapi.ResourceSlice, id ID, add func(Problem)) {
	for i := range s.Spec.Devices {
		d := &s.Spec.Devices[i]
		for _, c := range d.ConsumesCounters {
			if len(c.CompatibilityGroups) > 0 {
				add(newProblem(ReasonFeatureGateDisabled, SeverityError, s.Name, d.Name,
					"device %s declares compatibility groups (consumesCounters[].compatibilityGroups) while the DRADeviceCompatibilityGroups feature gate is off: kube-scheduler ignores slice %s, so pool %s can never be complete and none of its devices can be allocated",
					d.Name, s.Name, id))
				return
			}
		}
	}
}
