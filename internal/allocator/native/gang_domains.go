package native

import (
	"fmt"
	"slices"
	"strings"
)

// Gang constraints: the domains (label values) and attribute values a gang
// search runs under, and the counts that rule some out without a search.

// inDomain reports whether node ni has the current domain's label values.
func (g *gangSearch) inDomain(ni int) bool {
	if len(g.labels) == 0 {
		return true
	}
	if ni < 0 {
		return false
	}
	labels := g.s.nodes[ni].Labels
	for k, key := range g.labels {
		v, ok := labels[key]
		if !ok || v != g.domain[k] {
			return false
		}
	}
	return true
}

// domains lists the label value combinations of the members' nodes in
// order of first appearance (members in order, their nodes in order), only
// those where every member has a node, best fit first under Pack.
func (g *gangSearch) domains() [][]string {
	if len(g.labels) == 0 {
		return nil
	}
	type dom struct {
		values []string
		key    string
		// members counts the members with a node in it; room the live
		// candidates of the first member's first request there.
		members, room int
		seen          int
	}
	var doms []*dom
	index := map[string]*dom{}
	s := g.s
	for m, gm := range g.members {
		for _, ni := range gm.nodes {
			if ni < 0 {
				continue
			}
			vals := make([]string, len(g.labels))
			ok := true
			for k, key := range g.labels {
				v, has := s.nodes[ni].Labels[key]
				if !has {
					ok = false
					break
				}
				vals[k] = v
			}
			if !ok {
				continue
			}
			key := strings.Join(vals, "\x00")
			d := index[key]
			if d == nil {
				d = &dom{values: vals, key: key, seen: -1}
				index[key] = d
				doms = append(doms, d)
			}
			if d.seen != m {
				d.seen = m
				d.members++
			}
			if m == 0 && len(gm.p.slots) > 0 {
				if nc, err := s.nodeCands(g.ctx, gm.p.slots[0].subs[0].cs, ni); err == nil {
					d.room += len(nc.live)
				}
			}
		}
	}
	var out [][]string
	kept := doms[:0]
	for _, d := range doms {
		if d.members == len(g.members) {
			kept = append(kept, d)
		}
	}
	if g.pack {
		slices.SortStableFunc(kept, func(a, b *dom) int { return a.room - b.room })
	}
	for _, d := range kept {
		out = append(out, d.values)
	}
	return out
}

// short says why the current domain cannot hold the gang, counting without
// search: a member without a node in it, or a request kind (candidate set)
// that all members together need more devices of than its nodes have free.
// Empty when the count allows the gang.
func (g *gangSearch) short() string {
	s := g.s
	type need struct {
		demand int
		nodes  map[int]bool
		multi  bool
		name   string
	}
	needs := map[*candSet]*need{}
	var order []*candSet
	for _, gm := range g.members {
		has := false
		for _, ni := range gm.nodes {
			if g.inDomain(ni) {
				has = true
				break
			}
		}
		if !has {
			return fmt.Sprintf("member %s has no candidate node in %s", gm.name, g.domainName())
		}
		for i := range gm.p.slots {
			sl := &gm.p.slots[i]
			if len(sl.subs) != 1 || sl.subs[0].all || sl.subs[0].admin {
				continue
			}
			sb := &sl.subs[0]
			n := needs[sb.cs]
			if n == nil {
				n = &need{nodes: map[int]bool{}, name: sb.name}
				needs[sb.cs] = n
				order = append(order, sb.cs)
			}
			n.demand += sb.count
			for _, ni := range gm.nodes {
				if g.inDomain(ni) {
					n.nodes[ni] = true
				}
			}
		}
	}
	for _, cs := range order {
		n := needs[cs]
		supply := 0
		seen := map[int32]bool{}
		for ni := range n.nodes {
			nc, err := s.nodeCands(g.ctx, cs, ni)
			if err != nil {
				return ""
			}
			for _, d := range nc.live {
				if s.devs[d].multi {
					// A shared device serves many requests: no count.
					return ""
				}
				if !seen[d] {
					seen[d] = true
					supply++
				}
			}
		}
		if supply < n.demand {
			return fmt.Sprintf("%s: the members need %d devices like request %s, %d are free", g.domainName(), n.demand, n.name, supply)
		}
	}
	return ""
}

func (g *gangSearch) domainName() string {
	if len(g.labels) == 0 {
		return "the cluster"
	}
	parts := make([]string, len(g.labels))
	for k, key := range g.labels {
		parts[k] = key + "=" + g.domain[k]
	}
	return "domain " + strings.Join(parts, ",")
}

// valuesOf lists the values of attr constraint k among the live
// candidates of the bound requests on the members' nodes in the current
// domain, in order of first appearance (best fit first under Pack: the
// value with the fewest such devices).
func (g *gangSearch) valuesOf(k int) []string {
	s := g.s
	a := g.attrs[k]
	count := map[string]int{}
	var order []string
	for _, gm := range g.members {
		idx := gm.match[k]
		if idx < 0 {
			continue
		}
		x := gm.x
		for i := range gm.p.slots {
			for b := range gm.p.slots[i].subs {
				sb := &gm.p.slots[i].subs[b]
				if !containsInt(sb.match, idx) {
					continue
				}
				for _, ni := range gm.nodes {
					if !g.inDomain(ni) {
						continue
					}
					nc, err := s.nodeCands(g.ctx, sb.cs, ni)
					if err != nil {
						continue
					}
					for _, d := range nc.live {
						for _, v := range x.values(sb, a.attr, d) {
							if _, ok := count[v]; !ok {
								order = append(order, v)
							}
							count[v]++
						}
					}
				}
			}
		}
	}
	if g.pack {
		slices.SortStableFunc(order, func(a, b string) int { return count[a] - count[b] })
	}
	return order
}
