package native

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	dracel "k8s.io/dynamic-resource-allocation/cel"
)

// candSet is the set of devices that match one combination of selectors
// (the class's and the request's). Selecting is independent of what is in
// use, so a session computes it once and every claim with the same
// selectors reuses it. Candidates are kept per node and computed on first
// use, so a central allocator that finds room on the first nodes never
// evaluates selectors on the others.
type candSet struct {
	exprs []string
	// nodes holds the candidates per node index; nil until first needed.
	nodes []*nodeCands
	// none are the candidates for an allocation without any node.
	none *nodeCands
	// shared are the matching devices that are not node-local, best first.
	shared     []int32
	sharedDone bool
	// firstLive is a cursor for central allocation: every node before it
	// has been looked at and has no live candidate, and never will again
	// (see nodeCands.live). It is only used when shared is empty.
	firstLive int
}

// nodeCands are the candidates of one candSet on one node.
type nodeCands struct {
	// all are the matching devices reachable from the node, local and
	// shared, best first. They do not change within a session.
	all []int32
	// live is the part of all that may still be allocated without admin
	// access: a device in use, or one whose counters (or whose pool's
	// counters) ran short, stays that way for the rest of the session
	// (Record only ever takes), so prune drops it for good.
	live []int32
	// local counts the node-local devices in all; liveLocal those in live.
	local, liveLocal int
	// reach identifies the set of shared devices in all (Session.reachID):
	// nodes with equal reach and no local candidates are interchangeable.
	reach int32
}

// selectorError is a selector that failed on a device; idx is the index of
// the expression in candSet.exprs.
type selectorError struct {
	idx int
	err error
}

func (e *selectorError) Error() string { return e.err.Error() }
func (e *selectorError) Unwrap() error { return e.err }

func (s *Session) candSetFor(exprs []string) *candSet {
	key := strings.Join(exprs, "\x00\x01")
	cs, ok := s.cands[key]
	if !ok {
		cs = &candSet{exprs: exprs}
		s.cands[key] = cs
	}
	return cs
}

// nodeCands returns the candidates of cs on node ni (-1: no node).
func (s *Session) nodeCands(ctx context.Context, cs *candSet, ni int) (*nodeCands, error) {
	if ni < 0 {
		if cs.none == nil {
			nc, err := s.buildNodeCands(ctx, cs, -1)
			if err != nil {
				return nil, err
			}
			cs.none = nc
		}
		return cs.none, nil
	}
	for len(cs.nodes) <= ni {
		cs.nodes = append(cs.nodes, nil)
	}
	if nc := cs.nodes[ni]; nc != nil {
		return nc, nil
	}
	nc, err := s.buildNodeCands(ctx, cs, ni)
	if err != nil {
		return nil, err
	}
	cs.nodes[ni] = nc
	return nc, nil
}

func (s *Session) buildNodeCands(ctx context.Context, cs *candSet, ni int) (*nodeCands, error) {
	var local []int32
	if ni >= 0 {
		l, err := s.filterMatching(ctx, cs, s.local[ni])
		if err != nil {
			return nil, err
		}
		local = l
	}
	shared, err := s.sharedFor(ctx, cs)
	if err != nil {
		return nil, err
	}
	nc := &nodeCands{local: len(local)}
	all := local
	var reached []int32
	for _, d := range shared {
		if s.reachable(d, ni) {
			reached = append(reached, d)
		}
	}
	if len(reached) > 0 {
		all = append(slices.Clip(local), reached...)
		if len(local) > 0 {
			slices.SortStableFunc(all, s.preferred)
		}
	}
	nc.all = all
	nc.live = slices.Clone(all)
	nc.liveLocal = nc.local
	nc.reach = s.reachID(reached)
	s.prune(nc)
	return nc, nil
}

// reachID interns a list of shared devices.
func (s *Session) reachID(devs []int32) int32 {
	key := make([]byte, 0, 4*len(devs))
	for _, d := range devs {
		key = binary.LittleEndian.AppendUint32(key, uint32(d))
	}
	id, ok := s.reachIDs[string(key)]
	if !ok {
		id = int32(len(s.reachIDs))
		s.reachIDs[string(key)] = id
	}
	return id
}

// prune drops devices that can no longer be allocated (without admin
// access) from nc.live. It reads the committed state only, so it must not
// run while a search has devices tentatively allocated.
func (s *Session) prune(nc *nodeCands) {
	out := nc.live[:0]
	for _, d := range nc.live {
		if s.gone(d) {
			if s.devs[d].nodeIdx >= 0 {
				nc.liveLocal--
			}
			continue
		}
		out = append(out, d)
	}
	nc.live = out
}

// gone reports whether device d can never be allocated again in this
// session without admin access.
func (s *Session) gone(d int32) bool {
	if s.inUse[d] || s.devs[d].refused {
		return true
	}
	return !s.countersFree(d, 0)
}

// sharedFor returns the matching devices that are not node-local, best first.
func (s *Session) sharedFor(ctx context.Context, cs *candSet) ([]int32, error) {
	if cs.sharedDone {
		return cs.shared, nil
	}
	l, err := s.filterMatching(ctx, cs, s.sharedDevs)
	if err != nil {
		return nil, err
	}
	cs.shared, cs.sharedDone = l, true
	return l, nil
}

func (s *Session) filterMatching(ctx context.Context, cs *candSet, devs []int32) ([]int32, error) {
	var out []int32
	for _, d := range devs {
		if s.devs[d].unselectable {
			// Not even its selectors are evaluated, as in kube-scheduler.
			continue
		}
		ok := true
		for i, expr := range cs.exprs {
			m, err := s.evalSelector(ctx, expr, d)
			if err != nil {
				if ctx.Err() != nil {
					return nil, err
				}
				return nil, &selectorError{idx: i, err: err}
			}
			if !m {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, d)
		}
	}
	slices.SortStableFunc(out, s.preferred)
	return out, nil
}

// preferred orders devices: devices of pools with binding conditions last
// (as kube-scheduler tries them: a pod should not wait for a device's
// binding conditions while a plain one is free), then smallest counter
// footprint first, then snapshot order (pools by name, slices by name,
// devices as listed).
func (s *Session) preferred(a, b int32) int {
	ba, bb := s.pools[s.devs[a].pool].bindingConditions, s.pools[s.devs[b].pool].bindingConditions
	switch {
	case !ba && bb:
		return -1
	case ba && !bb:
		return 1
	}
	fa, fb := s.devs[a].footprint, s.devs[b].footprint
	switch {
	case fa < fb:
		return -1
	case fa > fb:
		return 1
	}
	return int(a - b)
}

// evalSelector evaluates one selector expression on one device, using the
// session's and the engine's caches.
func (s *Session) evalSelector(ctx context.Context, expr string, d int32) (bool, error) {
	res := s.exprResults[expr]
	if res == nil {
		res = make([]int8, len(s.devs))
		s.exprResults[expr] = res
	}
	switch res[d] {
	case 1:
		return true, nil
	case 2:
		return false, nil
	}
	dev := &s.devs[d]
	var shared map[string]bool
	if dev.convertible {
		if sh := s.e.shape(expr); sh.shared {
			s.keyBuf = sh.key(s.keyBuf[:0], dev)
			shared = s.sharedResults[expr]
			if shared == nil {
				shared = map[string]bool{}
				s.sharedResults[expr] = shared
			}
			if v, ok := shared[string(s.keyBuf)]; ok {
				res[d] = boolCode(v)
				return v, nil
			}
		}
	}
	if dev.cacheKey != "" {
		if v, ok := s.e.cachedResult(resultKey{dev.cacheKey, expr}); ok {
			res[d] = boolCode(v)
			if shared != nil {
				shared[string(s.keyBuf)] = v
			}
			return v, nil
		}
	}
	compiled := s.e.selectors.GetOrCompile(expr)
	if compiled.Error != nil {
		return false, fmt.Errorf("selector %q: %w", expr, compiled.Error)
	}
	v, _, err := compiled.DeviceMatches(ctx, dracel.Device{
		Driver:                   dev.id.driver,
		AllowMultipleAllocations: dev.dev.AllowMultipleAllocations,
		Attributes:               dev.dev.Attributes,
		Capacity:                 dev.dev.Capacity,
	})
	if err != nil {
		if ctx.Err() != nil {
			return false, fmt.Errorf("allocation aborted: %w", context.Cause(ctx))
		}
		return false, fmt.Errorf("selector %q on device %s/%s/%s: CEL runtime error: %w",
			expr, dev.id.driver, dev.id.pool, dev.id.device, dracel.EnhanceRuntimeError(err))
	}
	res[d] = boolCode(v)
	if shared != nil {
		shared[string(s.keyBuf)] = v
	}
	if dev.cacheKey != "" {
		s.e.storeResult(resultKey{dev.cacheKey, expr}, v)
	}
	return v, nil
}

func boolCode(v bool) int8 {
	if v {
		return 1
	}
	return 2
}
