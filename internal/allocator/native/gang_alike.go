package native

import (
	"encoding/binary"
	"slices"
)

// Symmetry in a gang search: devices and nodes that look alike to the
// rest of the gang, so that a choice that failed is not tried again in
// another guise.

// signature describes node ni as the rest of the gang (members m on) sees
// it, so that member m skips a node exactly like one where the rest of the
// gang already failed: the kinds of its free devices (kind), which later
// members may use it, on which side of each later member's twin position
// it lies, which shared devices it reaches, and what it declares. Two nodes
// with one signature are interchangeable for members m on: swapping them
// in a placement gives another. alike is false when the node cannot be
// described so (a free device of a kind of its own), and whenever a later
// member is a twin of a member not yet placed, whose order among nodes the
// swap could break.
func (g *gangSearch) signature(m, ni int) (string, bool) {
	if ni < 0 {
		return "", false
	}
	for k := m + 1; k < len(g.members); k++ {
		if g.members[k].twin >= m {
			return "", false
		}
	}
	s := g.s
	key := g.sigBuf[:0]
	for k := m; k < len(g.members); k++ {
		gk := g.members[k]
		pos := slices.Index(gk.nodes, ni)
		key = append(key, boolByte(pos >= 0))
		if gk.twin >= 0 && k > m {
			key = append(key, boolByte(pos >= g.members[gk.twin].pos))
		}
		for i := range gk.p.slots {
			for _, sb := range gk.p.slots[i].subs {
				nc, err := s.nodeCands(g.ctx, sb.cs, ni)
				if err != nil {
					return "", false
				}
				key = binary.AppendUvarint(key, uint64(nc.reach))
			}
		}
		if gk.p.hasAll {
			key = append(key, boolByte(s.allBlocked(ni)))
		}
	}
	key = append(key, boolByte(s.nodeOpsDevs && s.declaresNodeOps(ni)))
	kinds := g.kinds[:0]
	for _, d := range s.local[ni] {
		if s.inUse[d] || s.tent[d] > 0 || s.devs[d].unselectable {
			continue
		}
		k := g.kind(d)
		if k < 0 {
			g.kinds = kinds
			return "", false
		}
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		key = binary.AppendUvarint(key, uint64(k))
	}
	g.kinds, g.sigBuf = kinds, key
	return string(key), true
}

// choiceKey describes member gm's current choice by the kinds of devices it
// takes (kind), per request, for the memo.
func (g *gangSearch) choiceKey(gm *gangMember) string {
	x := gm.x
	type pick struct{ slot, sub, kind int32 }
	picks := make([]pick, 0, len(x.chosen))
	for _, ch := range x.chosen {
		picks = append(picks, pick{int32(ch.slot), int32(ch.sub), g.kind(ch.dev)})
	}
	slices.SortFunc(picks, func(a, b pick) int {
		if a.slot != b.slot {
			return int(a.slot - b.slot)
		}
		if a.sub != b.sub {
			return int(a.sub - b.sub)
		}
		return int(a.kind - b.kind)
	})
	key := make([]byte, 0, 12*len(picks))
	for _, p := range picks {
		key = binary.AppendVarint(key, int64(p.slot))
		key = binary.AppendVarint(key, int64(p.sub))
		key = binary.AppendVarint(key, int64(p.kind))
	}
	return string(key)
}

// kind identifies what a device is to the gang: node-local devices of one
// kind on one node can be swapped in any member's choice without changing
// whether the other members fit, and nodes with the same kinds free look
// alike (signature). Node-local devices without counters, taints,
// capacities or node operations are of one kind when they match the same
// candidate sets of every member's requests and have the same values of
// every attribute a constraint of any member reads (and the same contents,
// when some member has CEL constraints or derived attributes). Any other
// device is a kind of its own (negative IDs).
func (g *gangSearch) kind(d int32) int32 {
	if k, ok := g.classes[d]; ok {
		return k
	}
	s := g.s
	dev := &s.devs[d]
	if g.classes == nil {
		g.classes = map[int32]int32{}
		g.classIDs = map[string]int32{}
	}
	if dev.node == "" || dev.nodeIdx < 0 || dev.usesCounters || dev.multi || len(dev.dev.Taints) > 0 || dev.nodeOps || len(dev.caps) > 0 {
		g.classes[d] = -d - 1
		return -d - 1
	}
	key := g.keyBuf[:0]
	attrs := map[string]bool{}
	for _, gm := range g.members {
		for i := range gm.p.slots {
			for _, sb := range gm.p.slots[i].subs {
				in := true
				for _, expr := range sb.cs.exprs {
					ok, err := s.evalSelector(g.ctx, expr, d)
					if err != nil {
						g.classes[d] = -d - 1
						return -d - 1
					}
					if !ok {
						in = false
						break
					}
				}
				key = append(key, boolByte(in))
			}
		}
		for _, a := range gm.p.match {
			attrs[a] = true
		}
		for _, a := range gm.p.distinct {
			attrs[a] = true
		}
	}
	names := make([]string, 0, len(attrs))
	for a := range attrs {
		names = append(names, a)
	}
	slices.Sort(names)
	for _, a := range names {
		key = append(append(key, a...), 0)
		for _, v := range s.attrValues(a, d) {
			key = append(append(key, v...), 0)
		}
		key = append(key, 1)
	}
	if g.content {
		key = binary.AppendVarint(key, int64(s.contentID(d)))
	}
	g.keyBuf = key
	id, ok := g.classIDs[string(key)]
	if !ok {
		id = int32(len(g.classIDs))
		g.classIDs[string(key)] = id
	}
	g.classes[d] = id
	return id
}
