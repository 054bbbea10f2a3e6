package native

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/drastack/drastack/internal/allocator"
)

// AllocateGang places the claims of all members of a gang in one search.
//
// Members are placed in order. Each member's claims are searched on each of
// its candidate nodes exactly as Allocate with that node would search them,
// with the devices other members chose so far tentatively taken; when a
// member's search completes a choice, it goes on with the next member
// instead of returning (search.complete), so a later member that cannot be
// placed makes the earlier ones try their next devices, then their next
// nodes: a gang is refused only when no combination works.
//
// Gang constraints are decided up front, like matchAttribute in one claim:
// for a NodeLabel constraint the search runs once per label value (domain),
// with every member restricted to the domain's nodes; for a MatchAttribute
// constraint once per attribute value, the value fixed for every request it
// binds. Domains and values that cannot hold the gang's devices (counted
// without search) are skipped.
//
// The members with the most devices go first (they have the fewest places
// to go), and three cuts keep the search small without losing a placement
// (gang_alike.go):
//
//   - identical members (same claim specs and candidate nodes, the usual
//     case: pods of one template) take nodes in non-decreasing order of their
//     candidate lists, since swapping two of them changes nothing;
//   - after a member's choice on a node has failed for the rest of the gang,
//     another choice on that node that takes devices of the same kinds (same
//     candidate sets, same values of every attribute a constraint reads;
//     devices with counters, taints or capacities count as unique) fails
//     too, and is skipped;
//   - after a member failed on a node, a node whose free devices are of the
//     same kinds, and that the later members see alike, fails too.
//
// Under PlacementPack, domains and values with the least room that is still
// enough are tried first, and each member's nodes and devices in Pack order
// (pack.go) computed with the earlier members' choices taken.
func (s *Session) AllocateGang(ctx context.Context, gang allocator.Gang, opts allocator.Options) ([]allocator.MemberResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("allocate gang %s: %w", gang.Name, err)
	}
	if opts.Node != "" {
		return nil, fmt.Errorf("allocate gang %s: Options.Node must be empty: members' nodes come from GangMember.Nodes", gang.Name)
	}
	if err := opts.Policy.Validate(); err != nil {
		return nil, err
	}
	g := &gangSearch{s: s, ctx: ctx, name: gang.Name, limit: opts.MaxSteps, pack: opts.Policy == allocator.PlacementPack}
	if g.limit <= 0 {
		g.limit = s.e.maxSteps
	}
	for i, c := range gang.Constraints {
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("gang %s: constraints[%d]: %w", gang.Name, i, err)
		}
		if c.NodeLabel != "" {
			g.labels = append(g.labels, c.NodeLabel)
		} else {
			g.attrs = append(g.attrs, gangAttr{attr: c.MatchAttribute, requests: c.Requests})
		}
	}
	out := make([]allocator.MemberResult, len(gang.Members))
	for i, m := range gang.Members {
		out[i].Member = m.Name
		if len(m.Claims) == 0 {
			continue
		}
		gm, err := g.addMember(i, m)
		if err != nil {
			return nil, err
		}
		g.members = append(g.members, gm)
	}
	if len(g.members) == 0 {
		return out, nil
	}
	// The largest members first, as bin packing does: they have the
	// fewest places to go, so a gang that does not fit fails early.
	slices.SortStableFunc(g.members, func(a, b *gangMember) int { return b.demand() - a.demand() })
	g.findTwins(gang)
	// Prune every candidate list the members read while nothing is
	// tentatively taken (search.load does not prune in a gang).
	for _, gm := range g.members {
		for i := range gm.p.slots {
			for b := range gm.p.slots[i].subs {
				for _, ni := range gm.nodes {
					nc, err := s.nodeCands(ctx, gm.p.slots[i].subs[b].cs, ni)
					if err != nil {
						return nil, gm.p.candidateError(i, b, err)
					}
					s.prune(nc)
				}
			}
		}
	}
	ok, err := g.run()
	defer g.undo()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, g.failure()
	}
	for _, gm := range g.members {
		out[gm.index].Node = ""
		if gm.node >= 0 {
			out[gm.index].Node = s.nodes[gm.node].Name
		}
		out[gm.index].Results = s.results(gm.p, gm.x, gm.node)
	}
	return out, nil
}

var _ allocator.GangSession = &Session{}

// gangSearch is one AllocateGang call.
type gangSearch struct {
	s     *Session
	ctx   context.Context
	name  string
	limit int64
	// steps counts the devices tried by all members' searches.
	steps int64
	pack  bool

	// members are the members with claims, in the gang's order.
	members []*gangMember
	// attrs are the MatchAttribute constraints, labels the NodeLabel keys.
	attrs  []gangAttr
	labels []string
	// domain holds the current value of each label (during a search),
	// values the current value (a typed key, see attrValues) of each attr.
	domain []string
	values []string

	// classes and classIDs intern the kinds of devices for the memo (see
	// kind); content: some plan reads more of a device than its candidate
	// sets and constraint attributes (CEL constraints, derived attributes).
	classes  map[int32]int32
	classIDs map[string]int32
	content  bool
	keyBuf   []byte
	// sigBuf and kinds are scratch space for signature.
	sigBuf []byte
	kinds  []int32

	// tried and skipped count the domain and value combinations, for the
	// message of a gang that cannot be placed.
	tried, skipped int
	skipWhy        string
}

type gangAttr struct {
	attr     string
	requests []string
}

// gangMember is one member with claims.
type gangMember struct {
	name string
	// index is the member's index in Gang.Members.
	index int
	p     *plan
	x     *search
	// nodes are the candidate node indexes in the member's order; -1
	// stands for "no node" when the session has none.
	nodes []int
	// twin is the previous member identical to this one, -1 for none.
	twin int
	// node and pos are the node chosen during the search and its position
	// in nodes.
	node, pos int
	// match holds, per gang attr constraint, the index of its matchAttribute
	// constraint in p.match, -1 when none of the member's requests is bound.
	match []int
	// memo holds the kinds of choices on the current node that failed for
	// the rest of the gang.
	memo map[string]bool
	// reason is why the member was first found not to fit, for messages.
	reason string
	// attempted: the search got to the member; placedAlone: it fit on
	// some node in some attempt.
	attempted, placedAlone bool
}

// demand is how many devices the member needs at least.
func (gm *gangMember) demand() int {
	n := 0
	for i := range gm.p.slots {
		least := math.MaxInt32
		for _, sb := range gm.p.slots[i].subs {
			c := sb.count
			if sb.all {
				c = 1
			}
			least = min(least, c)
		}
		n += least
	}
	return n
}

func (g *gangSearch) addMember(i int, m allocator.GangMember) (*gangMember, error) {
	s := g.s
	p, err := s.buildPlan(m.Claims)
	if err != nil {
		return nil, fmt.Errorf("gang %s, member %s: %w", g.name, m.Name, err)
	}
	gm := &gangMember{name: m.Name, index: i, p: p, twin: -1, node: -1, memo: map[string]bool{}}
	for _, a := range g.attrs {
		idx := -1
		for si := range p.slots {
			sl := &p.slots[si]
			reqName := p.claims[sl.claim].Spec.Devices.Requests[sl.req].Name
			for b := range sl.subs {
				sb := &sl.subs[b]
				if len(a.requests) > 0 && !slices.Contains(a.requests, reqName) && !slices.Contains(a.requests, sb.name) {
					continue
				}
				if idx < 0 {
					idx = len(p.match)
					p.match = append(p.match, a.attr)
				}
				sb.match = append(sb.match, idx)
			}
		}
		if idx >= 0 {
			p.strict = p.needsStrict()
		}
		gm.match = append(gm.match, idx)
	}
	switch {
	case m.Nodes != nil:
		for _, name := range m.Nodes {
			ni, ok := s.nodeIdx[name]
			if !ok {
				ni = s.addNode(&corev1.Node{ObjectMeta: metaName(name)})
			}
			if !slices.Contains(gm.nodes, ni) {
				gm.nodes = append(gm.nodes, ni)
			}
		}
	case s.candidates == 0:
		gm.nodes = []int{-1}
	default:
		for ni := 0; ni < s.candidates; ni++ {
			gm.nodes = append(gm.nodes, ni)
		}
	}
	gm.x = s.newSearch(g.ctx, p, g.limit)
	gm.x.gang = g
	gm.x.pack = g.pack
	for i := range p.slots {
		for _, sb := range p.slots[i].subs {
			g.content = g.content || sb.derived != nil
		}
	}
	g.content = g.content || len(p.cels) > 0
	return gm, nil
}

// findTwins links each member to the previous identical one.
func (g *gangSearch) findTwins(gang allocator.Gang) {
	for m := range g.members {
		for j := m - 1; j >= 0; j-- {
			if g.identical(gang, g.members[j], g.members[m]) {
				g.members[m].twin = j
				break
			}
		}
	}
}

func (g *gangSearch) identical(gang allocator.Gang, a, b *gangMember) bool {
	ca, cb := gang.Members[a.index].Claims, gang.Members[b.index].Claims
	if len(ca) != len(cb) || !slices.Equal(a.nodes, b.nodes) {
		return false
	}
	for i := range ca {
		if !reflect.DeepEqual(ca[i].Spec, cb[i].Spec) || ca[i].Annotations[allocator.CELConstraintsAnnotation] != cb[i].Annotations[allocator.CELConstraintsAnnotation] {
			return false
		}
	}
	return true
}

// run tries every domain and value combination in turn.
func (g *gangSearch) run() (bool, error) {
	domains := g.domains()
	if len(g.labels) > 0 && len(domains) == 0 {
		g.skipWhy = fmt.Sprintf("no node of every member has the labels %s", strings.Join(g.labels, ", "))
		return false, nil
	}
	if len(g.labels) == 0 {
		domains = [][]string{nil}
	}
	for _, d := range domains {
		g.domain = d
		if why := g.short(); why != "" {
			g.skipped++
			if g.skipWhy == "" {
				g.skipWhy = why
			}
			continue
		}
		ok, err := g.withValues(0)
		if ok || err != nil {
			return ok, err
		}
	}
	return false, nil
}

// withValues fixes the value of attr constraint k and those after it.
func (g *gangSearch) withValues(k int) (bool, error) {
	if k == len(g.attrs) {
		g.tried++
		return g.place(0)
	}
	if g.values == nil {
		g.values = make([]string, len(g.attrs))
	}
	values := g.valuesOf(k)
	if len(values) == 0 && g.skipWhy == "" {
		g.skipWhy = fmt.Sprintf("%s: no free candidate device of the members has the attribute %s", g.domainName(), g.attrs[k].attr)
	}
	for _, v := range values {
		g.values[k] = v
		ok, err := g.withValues(k + 1)
		if ok || err != nil {
			return ok, err
		}
	}
	return false, nil
}

// place places member m and, through its search, every later member.
func (g *gangSearch) place(m int) (bool, error) {
	if m == len(g.members) {
		return true, nil
	}
	if err := g.ctx.Err(); err != nil {
		return false, fmt.Errorf("allocate gang %s: %w", g.name, context.Cause(g.ctx))
	}
	gm := g.members[m]
	gm.attempted = true
	var tried map[string]bool
	for _, pos := range g.order(m) {
		ni := gm.nodes[pos]
		sig, alike := g.signature(m, ni)
		if alike && tried[sig] {
			continue
		}
		gm.node, gm.pos = ni, pos
		clear(gm.memo)
		ok, err := gm.x.run(gm.node)
		if err != nil {
			return false, err
		}
		if ok {
			return true, nil
		}
		if gm.reason == "" && gm.x.reason != "" && !gm.placedAlone {
			gm.reason = fmt.Sprintf("%s: %s", g.nodeName(gm.node), gm.x.reason)
		}
		if alike {
			if tried == nil {
				tried = map[string]bool{}
			}
			tried[sig] = true
		}
	}
	gm.node = -1
	return false, nil
}

// complete is called by a search when its plan has a complete choice: a
// gang member's search goes on with the next member; any other search is
// done.
func (x *search) complete() (bool, error) {
	if x.gang == nil {
		return true, nil
	}
	return x.gang.next(x)
}

// next continues a gang search after member x has a complete choice.
func (g *gangSearch) next(x *search) (bool, error) {
	m := 0
	for m < len(g.members) && g.members[m].x != x {
		m++
	}
	gm := g.members[m]
	gm.placedAlone = true
	if x.p.strict && !g.strictValuesHold(gm) {
		return false, nil
	}
	key := g.choiceKey(gm)
	if gm.memo[key] {
		return false, nil
	}
	ok, err := g.place(m + 1)
	if err != nil {
		return false, err
	}
	if !ok {
		gm.memo[key] = true
	}
	return ok, nil
}

// preset fixes the gang's attribute values in member search x, called
// whenever x is reset (the strict search checks them at the end instead,
// strictValuesHold).
func (g *gangSearch) preset(x *search) {
	if len(g.values) == 0 {
		return
	}
	for _, gm := range g.members {
		if gm.x != x {
			continue
		}
		for k, idx := range gm.match {
			if idx >= 0 {
				x.matchSet[idx], x.matchVal[idx] = true, g.values[k]
			}
		}
	}
}

// strictValuesHold checks the gang's attribute values on a complete choice
// of a member whose plan is searched the strict way (strict.go), which
// narrows matchAttribute values as it goes instead of fixing them.
func (g *gangSearch) strictValuesHold(gm *gangMember) bool {
	x := gm.x
	for k, idx := range gm.match {
		if idx < 0 {
			continue
		}
		for _, ch := range x.chosen {
			sb := &x.p.slots[ch.slot].subs[ch.sub]
			if containsInt(sb.match, idx) && !containsStr(x.values(sb, g.attrs[k].attr, ch.dev), g.values[k]) {
				return false
			}
		}
	}
	return true
}

// order returns the positions in member m's node list to try, in the
// current domain, from its twin's position on, in the policy's order.
func (g *gangSearch) order(m int) []int {
	gm := g.members[m]
	first := 0
	if gm.twin >= 0 {
		first = g.members[gm.twin].pos
	}
	var out []int
	for pos := first; pos < len(gm.nodes); pos++ {
		if g.inDomain(gm.nodes[pos]) {
			out = append(out, pos)
		}
	}
	if !g.pack || len(out) < 2 || len(gm.p.slots) == 0 {
		return out
	}
	// Pack: the node whose candidates break the smallest partition, then
	// the one with the fewest free candidates, as packNodes orders them,
	// but counting the other members' tentative choices.
	s := g.s
	sb := &gm.p.slots[0].subs[0]
	keys := make([]packKey, 0, len(out))
	var free []int32
	for _, pos := range out {
		ni := gm.nodes[pos]
		free = free[:0]
		if nc, err := s.nodeCands(g.ctx, sb.cs, ni); err == nil {
			for _, d := range nc.live {
				if !s.inUse[d] && (s.tent[d] == 0 || s.devs[d].multi) && s.countersFree(d, s.tent[d]) {
					free = append(free, d)
				}
			}
		}
		cost := uint64(math.MaxUint64)
		if len(free) > 0 {
			cost = s.bestCost(free, s.tent)
		}
		keys = append(keys, packKey{cost: cost, live: int32(len(free)), pos: int32(pos)})
	}
	slices.SortFunc(keys, packKey.compare)
	for k := range keys {
		out[k] = int(keys[k].pos)
	}
	return out
}

func (g *gangSearch) nodeName(ni int) string {
	if ni < 0 {
		return "without a node"
	}
	return "node " + g.s.nodes[ni].Name
}

// undo releases every member's tentative choices, last member first.
func (g *gangSearch) undo() {
	for m := len(g.members) - 1; m >= 0; m-- {
		g.members[m].x.reset(-1)
	}
}

// failure is the error of a gang that cannot be placed.
func (g *gangSearch) failure() error {
	var parts []string
	for _, gm := range g.members {
		if gm.attempted && !gm.placedAlone {
			why := gm.reason
			if why == "" {
				why = "no candidate node"
				if len(g.labels) > 0 {
					why = "no candidate node in a domain that holds the gang"
				}
			}
			parts = append(parts, fmt.Sprintf("member %s fits on no node (first: %s)", gm.name, why))
		}
	}
	if len(parts) == 0 && g.tried == 0 && g.skipWhy != "" {
		// Nothing was searched: the count alone rules the gang out.
		return fmt.Errorf("%w: gang %s (%d members with claims): %s", allocator.ErrUnsatisfiable, g.name, len(g.members), g.skipWhy)
	}
	if len(parts) == 0 {
		parts = append(parts, "every member fits alone, but not all together")
	}
	where := ""
	switch {
	case len(g.labels) > 0:
		where = fmt.Sprintf("; %d domains searched, %d skipped", g.tried, g.skipped)
	case len(g.attrs) > 0:
		where = fmt.Sprintf("; %d attribute values searched", g.tried)
	}
	if g.skipWhy != "" {
		where += " (first skipped: " + g.skipWhy + ")"
	}
	return fmt.Errorf("%w: gang %s (%d members with claims): %s%s", allocator.ErrUnsatisfiable, g.name, len(g.members), strings.Join(parts, "; "), where)
}
