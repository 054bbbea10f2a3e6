package native

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
)

// Allocate implements allocator.Session.
//
// With opts.Node set it searches the devices reachable from that node.
// Without, it is a central allocator: it walks the nodes in input order
// (first fit, as kube-scheduler would try them) but skips nodes that cannot
// help without searching: nodes whose local devices are all in use and
// nodes that reach exactly the same shared devices as a node already tried.
func (s *Session) Allocate(ctx context.Context, claims []*resourceapi.ResourceClaim, opts allocator.Options) ([]allocator.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("allocate: %w", err)
	}
	p, err := s.buildPlan(claims)
	if err != nil {
		return nil, err
	}
	limit := opts.MaxSteps
	if limit <= 0 {
		limit = s.e.maxSteps
	}
	x := s.newSearch(ctx, p, limit)
	defer x.reset(-1) // release tentative counters and marks

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
			return nil, fmt.Errorf("%w: %s on node %s: %s", allocator.ErrUnsatisfiable, claimNames(claims), opts.Node, x.reason)
		}
		return s.results(p, x, ni), nil
	}

	if len(s.nodes) == 0 {
		found, err := x.run(-1)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("%w: %s: %s", allocator.ErrUnsatisfiable, claimNames(claims), x.reason)
		}
		return s.results(p, x, -1), nil
	}

	anyAdmin := false
	for _, sl := range p.slots {
		for _, sb := range sl.subs {
			anyAdmin = anyAdmin || sb.admin
		}
	}
	tried := map[string]bool{}
	firstReason, triedNodes := "", 0
	for ni, node := range s.nodes {
		hasLocal, err := s.nodeHasLocal(ctx, x, p, node.Name, anyAdmin)
		if err != nil {
			return nil, err
		}
		if !hasLocal {
			key, err := s.reachKey(ctx, p, ni)
			if err != nil {
				return nil, err
			}
			if tried[key] {
				continue
			}
			tried[key] = true
		}
		triedNodes++
		found, err := x.run(ni)
		if err != nil {
			return nil, err
		}
		if found {
			return s.results(p, x, ni), nil
		}
		if firstReason == "" {
			firstReason = fmt.Sprintf("node %s: %s", node.Name, x.reason)
		}
	}
	if firstReason == "" {
		firstReason = "no node has matching devices"
	}
	return nil, fmt.Errorf("%w: %s: no node fits (searched %d of %d nodes; first: %s)",
		allocator.ErrUnsatisfiable, claimNames(claims), triedNodes, len(s.nodes), firstReason)
}

// nodeHasLocal reports whether node has usable local devices matching some
// request of the plan.
func (s *Session) nodeHasLocal(ctx context.Context, x *search, p *plan, node string, anyAdmin bool) (bool, error) {
	if len(s.localByNode[node]) == 0 || (!anyAdmin && s.freeLocal[node] == 0) {
		return false, nil
	}
	for i := range p.slots {
		for b := range p.slots[i].subs {
			l, err := s.localFor(ctx, p.slots[i].subs[b].cs, node)
			if err != nil {
				return false, fmt.Errorf("claim %s, request %s: %w", allocator.ClaimKey(p.claims[p.slots[i].claim]), p.slots[i].subs[b].name, err)
			}
			if len(l) > 0 {
				return true, nil
			}
		}
	}
	return false, nil
}

// reachKey describes which shared candidates of the plan node ni reaches;
// nodes with the same key are interchangeable for nodes without local
// candidates.
func (s *Session) reachKey(ctx context.Context, p *plan, ni int) (string, error) {
	var b strings.Builder
	seen := map[int32]bool{}
	for i := range p.slots {
		for _, sb := range p.slots[i].subs {
			shared, err := s.sharedFor(ctx, sb.cs)
			if err != nil {
				return "", fmt.Errorf("claim %s, request %s: %w", allocator.ClaimKey(p.claims[p.slots[i].claim]), sb.name, err)
			}
			for _, d := range shared {
				sel := s.devs[d].sel
				if sel < 0 || seen[sel] {
					continue
				}
				seen[sel] = true
				if s.nodeSels[sel].match(ni, s.nodes[ni]) {
					b.WriteByte('1')
				} else {
					b.WriteByte('0')
				}
			}
		}
	}
	return b.String(), nil
}

func claimNames(claims []*resourceapi.ResourceClaim) string {
	names := make([]string, len(claims))
	for i, c := range claims {
		names[i] = "claim " + allocator.ClaimKey(c)
	}
	return strings.Join(names, ", ")
}
