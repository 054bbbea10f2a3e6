package native

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

// Allocate implements allocator.Session.
//
// With opts.Node set it searches the devices reachable from that node.
// Without, it is a central allocator (see central).
func (s *Session) Allocate(ctx context.Context, claims []*resourceapi.ResourceClaim, opts allocator.Options) ([]allocator.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("allocate: %w", err)
	}
	if err := opts.Policy.Validate(); err != nil {
		return nil, err
	}
	p, err := s.planFor(claims)
	if err != nil {
		return nil, err
	}
	limit := opts.MaxSteps
	if limit <= 0 {
		limit = s.e.maxSteps
	}
	x := s.searchFor(ctx, p, limit)
	defer s.doneSearch(x) // release tentative counters and marks
	x.pack = opts.Policy == allocator.PlacementPack

	if opts.Node != "" {
		ni, ok := s.nodeIdx[opts.Node]
		if !ok {
			ni = s.addNode(&corev1.Node{ObjectMeta: metaName(opts.Node)})
		}
		found, err := x.run(ni)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("%w: %s on node %s: %s%s", allocator.ErrUnsatisfiable, claimNames(claims), opts.Node, x.reason, s.skippedPools(ni))
		}
		return s.results(p, x, ni), nil
	}

	if s.candidates == 0 {
		found, err := x.run(-1)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("%w: %s: %s%s", allocator.ErrUnsatisfiable, claimNames(claims), x.reason, s.skippedPools(-1))
		}
		return s.results(p, x, -1), nil
	}

	return s.central(ctx, p, x)
}

// planFor returns the plan of claims, reusing the previous call's when the
// claims are the same objects at the same resource versions: kube-scheduler
// asks about one pod's claims once per node (one Filter call each), and the
// plan (classes, selectors, candidate sets, capacity fits) depends only on
// the claims and the session's snapshot, not on what Record changed since.
// Claims without a resource version (built in memory, possibly edited in
// place) are planned on every call.
func (s *Session) planFor(claims []*resourceapi.ResourceClaim) (*plan, error) {
	if c := &s.lastPlan; c.p != nil && len(c.claims) == len(claims) {
		same := true
		for i, claim := range claims {
			if claim != c.claims[i] || claim.ResourceVersion != c.versions[i] {
				same = false
				break
			}
		}
		if same {
			return c.p, nil
		}
	}
	p, err := s.buildPlan(claims)
	if err != nil {
		return nil, err
	}
	s.lastPlan = cachedPlan{}
	versions := make([]string, len(claims))
	for i, claim := range claims {
		if claim.ResourceVersion == "" {
			return p, nil
		}
		versions[i] = claim.ResourceVersion
	}
	s.lastPlan = cachedPlan{claims: slices.Clone(claims), versions: versions, p: p}
	return p, nil
}

// cachedPlan is the plan of the last Allocate call (see planFor) and its
// search, idle between calls (nil while a call uses it).
type cachedPlan struct {
	claims   []*resourceapi.ResourceClaim
	versions []string
	p        *plan
	x        *search
}

// searchFor returns a search for plan p: the cached plan's idle search
// (its buffers are sized by the plan) or a new one.
func (s *Session) searchFor(ctx context.Context, p *plan, limit int64) *search {
	if c := &s.lastPlan; c.p == p && c.x != nil {
		x := c.x
		c.x = nil
		x.ctx, x.limit, x.steps = ctx, limit, 0
		return x
	}
	return s.newSearch(ctx, p, limit)
}

// doneSearch undoes what search x left tentatively allocated and keeps it
// for the next call with the same plan.
func (s *Session) doneSearch(x *search) {
	x.reset(-1)
	if s.lastPlan.p == x.p {
		x.ctx = nil
		s.lastPlan.x = x
	}
}

// central is the central allocator: it walks the nodes in input order and
// returns the first that fits (first fit, as kube-scheduler would try
// them), but searches only where a search can tell something new:
//
//   - nodes where some request has fewer live candidates than it needs are
//     skipped, and when no request can use shared devices, a per-candidate
//     set cursor skips the nodes whose devices are all gone for good;
//   - a node without local candidates that matter searches exactly the
//     shared devices it reaches, so one search answers for every node that
//     reaches the same ones.
func (s *Session) central(ctx context.Context, p *plan, x *search) ([]allocator.Result, error) {
	nodeLocal, special := true, false
	for i := range p.slots {
		for b := range p.slots[i].subs {
			sb := &p.slots[i].subs[b]
			special = special || sb.all || sb.admin
			shared, err := s.sharedFor(ctx, sb.cs)
			if err != nil {
				return nil, p.candidateError(i, b, err)
			}
			nodeLocal = nodeLocal && len(shared) == 0
		}
	}
	cursor := nodeLocal && !special
	start := 0
	if cursor {
		// Every node before a set's cursor lacks live candidates of that
		// set; a request needs one of its alternatives' sets.
		for i := range p.slots {
			least := s.candidates
			for _, sb := range p.slots[i].subs {
				least = min(least, sb.cs.firstLive)
			}
			start = max(start, least)
		}
	}
	// Pack examines the same nodes in another order (pack.go): order
	// permutes the first of them, the rest follow in input order.
	var order []int
	if x.pack {
		o, err := s.packNodes(ctx, p, start)
		if err != nil {
			return nil, err
		}
		order = o
	}
	var tried map[string]bool
	var key []byte
	firstReason, firstNode := "", -1
	// What became of the nodes examined, for the message.
	var n struct{ searched, short, alike, blocked int }
	for k := start; k < s.candidates; k++ {
		ni := k
		if k-start < len(order) {
			ni = order[k-start]
		}
		if firstReason == "" {
			firstNode = ni
		}
		if p.hasAll && s.allBlocked(ni) {
			// Not searched: the node is out for this claim (see allBlocked).
			n.blocked++
			if firstReason == "" {
				firstReason = fmt.Sprintf("node %s: a request asks for all devices, but a pool visible from the node is incomplete or invalid", s.nodes[ni].Name)
			}
			continue
		}
		if p.deferred != nil {
			return nil, p.deferred
		}
		if p.hasAll {
			var lerr error
			err := s.overLimit(p, ni, func(i, b int) int {
				nc, err := s.nodeCands(ctx, p.slots[i].subs[b].cs, ni)
				if err != nil {
					lerr = p.candidateError(i, b, err)
					return 0
				}
				return s.servable(&p.slots[i].subs[b], nc.all)
			})
			if lerr != nil {
				return nil, lerr
			}
			if err != nil {
				return nil, err
			}
		}
		own, fits := false, true
		key = append(key[:0], 'r')
		if s.nodeOpsDevs {
			// Devices that skip node operations depend on what the node
			// declares, not only on which devices it reaches.
			key = append(key, boolByte(s.declaresNodeOps(ni)))
		}
		for i := range p.slots {
			slotFits := false
			for b := range p.slots[i].subs {
				sb := &p.slots[i].subs[b]
				nc, err := s.nodeCands(ctx, sb.cs, ni)
				if err != nil {
					return nil, p.candidateError(i, b, err)
				}
				s.prune(nc)
				if cursor && ni == sb.cs.firstLive && len(nc.live) == 0 {
					sb.cs.firstLive++
				}
				switch {
				case sb.all:
					slotFits = slotFits || len(nc.all) > 0
					own = own || nc.local > 0
				case sb.admin:
					slotFits = slotFits || len(nc.all) >= sb.count
					own = own || nc.local > 0
				default:
					slotFits = slotFits || len(nc.live) >= sb.count
					own = own || nc.liveLocal > 0
				}
				key = binary.AppendUvarint(key, uint64(nc.reach))
			}
			if !slotFits {
				fits = false
				if firstReason == "" {
					firstReason = fmt.Sprintf("node %s: %s", s.nodes[ni].Name, s.shortOf(ctx, p, i, ni))
				}
				break
			}
		}
		if !fits {
			n.short++
			continue
		}
		if own {
			// A node with its own candidates is interchangeable with one
			// whose candidates look exactly the same (see lookalike);
			// the key is empty when that cannot be told.
			key = key[:0]
			if !special && tried != nil {
				key = s.lookalike(key, p, ni)
			}
		}
		if len(key) > 0 && tried[string(key)] {
			n.alike++
			continue
		}
		n.searched++
		found, err := x.run(ni)
		if err != nil {
			return nil, err
		}
		if found {
			return s.results(p, x, ni), nil
		}
		if own && !special && len(key) == 0 {
			key = s.lookalike(key, p, ni)
		}
		if len(key) > 0 {
			if tried == nil {
				tried = map[string]bool{}
			}
			tried[string(key)] = true
		}
		if firstReason == "" {
			firstReason = fmt.Sprintf("node %s: %s", s.nodes[ni].Name, x.reason)
		}
	}
	if firstReason == "" && start > 0 {
		// Every node was passed over by the cursor: an earlier claim found
		// them without free matching devices. Say why on the first, as
		// that claim did (a pool not used, for one), not only that.
		firstNode = 0
		firstReason = fmt.Sprintf("node %s: %s", s.nodes[0].Name, s.shortOf(ctx, p, s.shortSlot(p), 0))
	}
	if firstReason == "" {
		firstReason = "no node has enough free matching devices"
		firstNode = -1
	}
	var parts []string
	for _, c := range []struct {
		n    int
		what string
	}{
		{n.searched, "searched"},
		{n.short, "short of matching devices"},
		{n.alike, "like a node searched in vain"},
		{n.blocked, "next to an incomplete or invalid pool, with a request for all devices"},
		{start, "without free matching devices, as an earlier claim found"},
	} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	return nil, fmt.Errorf("%w: %s: no node fits (%d of %d nodes examined: %s; first: %s%s)",
		allocator.ErrUnsatisfiable, claimNames(p.claims), s.candidates-start, s.candidates, strings.Join(parts, ", "), firstReason, s.skippedPools(firstNode))
}

// lookalike appends a key that says what the plan's live candidates on
// node ni look like: per alternative, the contents (driver, attributes,
// capacity) of its candidates in search order. Without admin access or All
// requests, a search depends only on that (devices in use are not live, and
// the search starts with nothing tentatively allocated), so a node whose key
// equals that of a node already searched in vain fails too, and is skipped:
// a claim with a CEL constraint proves each kind of node unsatisfiable once.
// Candidates with counters or taints are not described by their contents;
// with any of them the key is empty and the node is searched. A candidate
// with capacities adds what the alternative would consume of it (its
// request policy is not part of the contents) and, when shared, what its
// recorded shares already consume: two shared devices that look alike but
// have different capacity left are different candidates.
func (s *Session) lookalike(key []byte, p *plan, ni int) []byte {
	key = append(key, 'o')
	for i := range p.slots {
		for b := range p.slots[i].subs {
			sb := &p.slots[i].subs[b]
			nc := sb.cs.nodes[ni]
			key = binary.AppendUvarint(key, uint64(len(nc.live)))
			for _, d := range nc.live {
				dev := &s.devs[d]
				if dev.usesCounters || len(dev.dev.Taints) > 0 || dev.nodeOps {
					return key[:0]
				}
				key = binary.AppendUvarint(key, uint64(s.contentID(d)))
				if sb.derived != nil {
					// A derived attribute also sees allowMultipleAllocations.
					key = append(key, boolByte(ptr.Deref(dev.dev.AllowMultipleAllocations, false)))
				}
				if len(dev.caps) > 0 {
					key = s.capacityKey(key, sb, d)
				}
			}
		}
	}
	return key
}

// capacityKey appends what alternative sb would consume of device d's
// capacities and what d's shares already use of them.
func (s *Session) capacityKey(key []byte, sb *sub, d int32) []byte {
	f := s.fit(sb, d)
	if !f.ok {
		return append(key, 'x')
	}
	key = append(key, 'f')
	for k := range f.consumed {
		key = appendQuantity(key, f.consumed[k])
	}
	if s.devs[d].multi {
		key = binary.AppendUvarint(append(key, 'u'), uint64(s.shares[d]))
		for _, q := range s.capUsed[d] {
			key = appendQuantity(key, q)
		}
	}
	return key
}

// appendQuantity appends an exact, unambiguous encoding of q: its value
// and its format (which decides how a copy of it is written).
func appendQuantity(key []byte, q resource.Quantity) []byte {
	key = append(key, q.Format...)
	if v, ok := q.AsInt64(); ok {
		return binary.AppendVarint(append(key, 'i'), v)
	}
	return append(append(append(key, 's'), q.String()...), 0)
}

// shortSlot is the slot that keeps the cursor of central at its start:
// the one whose every alternative has its first live candidate furthest
// on, so it has none on the nodes before.
func (s *Session) shortSlot(p *plan) int {
	best, bestAt := 0, -1
	for i := range p.slots {
		least := s.candidates
		for _, sb := range p.slots[i].subs {
			least = min(least, sb.cs.firstLive)
		}
		if least > bestAt {
			best, bestAt = i, least
		}
	}
	return best
}

// shortOf says why slot i has too few candidates on node ni.
func (s *Session) shortOf(ctx context.Context, p *plan, i, ni int) string {
	sl := &p.slots[i]
	if len(sl.subs) != 1 {
		return fmt.Sprintf("request %s: not enough matching devices", p.claims[sl.claim].Spec.Devices.Requests[sl.req].Name)
	}
	sb := &sl.subs[0]
	nc, err := s.nodeCands(ctx, sb.cs, ni)
	switch {
	case err != nil:
		return err.Error()
	case sb.all:
		return fmt.Sprintf("request %s: no matching devices", sb.name)
	case sb.admin:
		return fmt.Sprintf("request %s: %d matching devices, %d needed", sb.name, len(nc.all), sb.count)
	}
	return fmt.Sprintf("request %s: %d matching devices available, %d needed", sb.name, len(nc.live), sb.count)
}

func claimNames(claims []*resourceapi.ResourceClaim) string {
	names := make([]string, len(claims))
	for i, c := range claims {
		names[i] = "claim " + allocator.ClaimKey(c)
	}
	return strings.Join(names, ", ")
}
