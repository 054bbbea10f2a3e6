package native

import (
	"cmp"
	"context"
	"math"
	"slices"
)

// The Pack placement policy (allocator.PlacementPack) keeps the most
// capacity usable for later claims. It changes which node is searched first
// and in which order a node's devices are tried; what fits is decided by
// the same search as under FirstFit, so both policies allocate a claim
// exactly when it can be allocated, only not always the same devices.
//
// Partitions are devices that share counters: the MIG placements of a GPU
// (one counter set per GPU), the sub-meshes of a multi-host pool (counter
// sets of host blocks). Taking a device makes every other device that draws
// on the same counters and no longer fits unallocatable. The partition cost
// of a device is the largest footprint among those it would make
// unallocatable (zero when it breaks nothing but itself), then the sum of
// their footprints (a 1g slice at the end of an empty GPU breaks the 7g and
// one 3g placement; at its start also the 4g, a 3g and a 2g). Pack tries
// devices by partition cost, smallest first:
//
//   - a MIG 1g slice goes where it breaks the smallest free partition:
//     into the hole of a GPU that is already partly used (best fit on
//     counters), and on that GPU at the slice that keeps the largest
//     placement (4g, 3g) free, rather than onto a whole free GPU, whose 7g
//     partition it would break;
//   - a 2x4 multi-host slice goes into a 4x4 block that is already broken,
//     not into an intact 4x4 or an intact 8x8 pool.
//
// Nodes are searched in the order of the best (smallest) partition cost
// their candidates offer, nodes already partly used before pristine ones,
// then by how few candidates they have left, then in input order; the scan
// stops at the first partly used node where the claim breaks nothing (see
// packNodes). Without counters a one-GPU claim thus goes to a node that
// already runs something and leaves whole nodes for claims and gangs of
// eight. A gang orders each member's nodes the same way, counting the other
// members' choices, but always by how few candidates are left (gang.go).

// packState is the Pack policy's view of the session's partitions, built on
// first use.
type packState struct {
	// binsOf lists, per device, the counter sets ("bins", indexed by pool
	// and counter set name) it consumes from; nil when none.
	binsOf [][]int32
	// members lists, per bin, the devices that consume from it.
	members [][]int32
	// cost caches partitionCost per device for the recorded state; valid
	// says which entries are current (Record and Release invalidate the
	// entries of every device sharing a bin with a device they change).
	cost  []uint64
	valid []bool
	// alive is scratch space for partitionCost; keys, rest and order for
	// packNodes.
	alive []int32
	keys  []packKey
	rest  []int
	order []int
}

// packing returns the session's packState, building it on first use.
func (s *Session) packing() *packState {
	if s.pack != nil {
		return s.pack
	}
	ps := &packState{
		binsOf: make([][]int32, len(s.devs)),
		cost:   make([]uint64, len(s.devs)),
		valid:  make([]bool, len(s.devs)),
	}
	type binKey struct {
		pool int32
		set  string
	}
	ids := map[binKey]int32{}
	for d := range s.devs {
		dev := &s.devs[d]
		if len(dev.consumes) == 0 {
			continue
		}
		for _, c := range dev.dev.ConsumesCounters {
			k := binKey{dev.pool, c.CounterSet}
			id, ok := ids[k]
			if !ok {
				id = int32(len(ps.members))
				ids[k] = id
				ps.members = append(ps.members, nil)
			}
			if !slices.Contains(ps.binsOf[d], id) {
				ps.binsOf[d] = append(ps.binsOf[d], id)
				ps.members[id] = append(ps.members[id], int32(d))
			}
		}
	}
	s.pack = ps
	return ps
}

// packTouch invalidates the cached partition costs that a change of device
// d's recorded state can change: those of every device sharing a bin with d.
func (s *Session) packTouch(d int32) {
	ps := s.pack
	if ps == nil {
		return
	}
	for _, b := range ps.binsOf[d] {
		for _, m := range ps.members[b] {
			ps.valid[m] = false
		}
	}
}

// packAlive reports whether device m could be allocated now, as far as
// partitions go: not in use (nor tentatively chosen, with tent non-nil),
// not refused, and its counters free.
func (s *Session) packAlive(m int32, tent []int32) bool {
	dev := &s.devs[m]
	if s.inUse[m] || dev.refused || dev.unselectable {
		return false
	}
	t := int32(0)
	if tent != nil {
		t = tent[m]
		if t > 0 && !dev.multi {
			return false
		}
	}
	return s.countersFree(m, t)
}

// partitionCost is the partition cost of taking device d: the largest
// footprint rank + 1 among the devices that are allocatable now and would
// not be after taking d (0 when it breaks no other device) in the high 32
// bits, the sum of their ranks + 1 in the low ones. With tent nil it reads
// the recorded state and caches the result; a search with tentative choices
// passes its counts, and then a cached cost is used when there is one (it
// ignores the tentative choices, which only makes the order less exact)
// and otherwise the current balances, which include them, without caching.
// A shared device that already has a share is charged nothing more, so it
// costs nothing.
func (s *Session) partitionCost(d int32, tent []int32) uint64 {
	ps := s.packing()
	if len(ps.binsOf[d]) == 0 {
		return 0
	}
	if ps.valid[d] {
		return ps.cost[d]
	}
	dev := &s.devs[d]
	t := int32(0)
	if tent != nil {
		t = tent[d]
	}
	var largest, sum uint64
	if !(dev.multi && s.shares[d]+t > 0) {
		alive := ps.alive[:0]
		for _, b := range ps.binsOf[d] {
			for _, m := range ps.members[b] {
				if m != d && s.packAlive(m, tent) && !containsInt32(alive, m) {
					alive = append(alive, m)
				}
			}
		}
		// Charge d as a tentative choice would, look, and give it back;
		// the pool's overdrawn count is not touched.
		s.charge(dev, -1)
		for _, m := range alive {
			tm := int32(0)
			if tent != nil {
				tm = tent[m]
			}
			if !s.countersFree(m, tm) {
				c := uint64(s.devs[m].footprint) + 1
				largest = max(largest, c)
				sum += c
			}
		}
		s.charge(dev, +1)
		ps.alive = alive
	}
	cost := largest<<32 | min(sum, 1<<32-1)
	if tent == nil {
		ps.cost[d], ps.valid[d] = cost, true
	}
	return cost
}

// packOrder returns candidates c of slot i, alternative b, in the order
// Pack tries them: partition cost first, then c's own order (smallest
// footprint, then snapshot order). c itself is not modified. Candidates
// without counters cost nothing, so a list without any is returned as is.
func (x *search) packOrder(i, b int, c []int32) []int32 {
	s := x.s
	counters := false
	for _, d := range c {
		if s.devs[d].usesCounters {
			counters = true
			break
		}
	}
	if !counters || len(c) < 2 {
		return c
	}
	var tent []int32
	if x.gang != nil {
		tent = x.tent
	}
	keys := x.packKeys[:0]
	for k, d := range c {
		keys = append(keys, packKey{cost: s.partitionCost(d, tent), pos: int32(k)})
	}
	slices.SortFunc(keys, packKey.compare)
	if x.packBuf == nil {
		x.packBuf = make([][][]int32, len(x.p.slots))
		for j := range x.p.slots {
			x.packBuf[j] = make([][]int32, len(x.p.slots[j].subs))
		}
	}
	out := x.packBuf[i][b][:0]
	for _, k := range keys {
		out = append(out, c[k.pos])
	}
	x.packBuf[i][b], x.packKeys = out, keys
	return out
}

// packNodes orders the central allocator's nodes start... for Pack: the
// nodes where the plan's first request has enough live candidates, by the
// smallest partition cost among those candidates, then nodes where some
// candidate is already gone (in use, or its counters taken) before
// pristine ones, then by how few candidates are left (the fullest first),
// then in input order; after them the other nodes it scanned, in input
// order. The scan stops at the first node that cannot be beaten (cost 0,
// partly used): the returned order covers the nodes start up to there, and
// the nodes after it follow in input order (the caller walks them itself,
// so that it still examines, and accounts for, each). It reads the
// recorded state only (no search has tentative choices).
//
// A plan with CEL constraints is ordered by partition cost alone, then in
// input order: proving that a node cannot satisfy such a constraint can
// take a long search, and the fullest nodes are the likeliest to fail.
func (s *Session) packNodes(ctx context.Context, p *plan, start int) ([]int, error) {
	if len(p.slots) == 0 || s.candidates-start < 2 {
		return nil, nil
	}
	sb := &p.slots[0].subs[0]
	need := sb.count
	if sb.all {
		need = 1
	}
	cel := len(p.cels) > 0
	ps := s.packing()
	keys, rest := ps.keys[:0], ps.rest[:0]
	for ni := start; ni < s.candidates; ni++ {
		nc, err := s.nodeCands(ctx, sb.cs, ni)
		if err != nil {
			return nil, p.candidateError(0, 0, err)
		}
		s.prune(nc)
		live := nc.live
		if sb.admin || sb.all {
			live = nc.all
		}
		if len(live) < need {
			rest = append(rest, ni)
			continue
		}
		k := packKey{cost: s.bestCost(live, nil), pos: int32(ni)}
		if !cel {
			k.pristine = len(nc.live) == len(nc.all)
			k.live = int32(len(live))
		}
		keys = append(keys, k)
		if k.cost == 0 && !k.pristine && !cel {
			break
		}
	}
	slices.SortFunc(keys, packKey.compare)
	order := ps.order[:0]
	for _, k := range keys {
		order = append(order, int(k.pos))
	}
	order = append(order, rest...)
	ps.keys, ps.rest, ps.order = keys, rest, order
	return order, nil
}

// bestCost is the smallest partition cost among devices c (0 as soon as one
// has no counters).
func (s *Session) bestCost(c []int32, tent []int32) uint64 {
	best := uint64(math.MaxUint64)
	for _, d := range c {
		if !s.devs[d].usesCounters {
			return 0
		}
		if cost := s.partitionCost(d, tent); cost < best {
			best = cost
			if cost == 0 {
				break
			}
		}
	}
	return best
}

// packKey orders candidates (cost, then pos) and nodes (cost, then partly
// used before pristine, then live candidates, then pos).
type packKey struct {
	cost      uint64
	pristine  bool
	live, pos int32
}

func (a packKey) compare(b packKey) int {
	switch {
	case a.cost != b.cost:
		return cmp.Compare(a.cost, b.cost)
	case a.pristine != b.pristine:
		if a.pristine {
			return 1
		}
		return -1
	case a.live != b.live:
		return cmp.Compare(a.live, b.live)
	}
	return cmp.Compare(a.pos, b.pos)
}
