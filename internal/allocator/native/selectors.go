package native

import (
	"context"
	"fmt"
	"slices"
	"strings"

	dracel "k8s.io/dynamic-resource-allocation/cel"
)

// candSet is the set of devices that match one combination of selectors
// (the class's and the request's). Selecting is independent of what is in
// use, so a session computes it once and every claim with the same
// selectors reuses it. Node-local devices are evaluated per node on first
// use, so a central allocator that finds room on the first nodes never
// evaluates selectors on the others.
type candSet struct {
	exprs      []string
	local      map[string][]int32
	shared     []int32
	sharedDone bool
}

func (s *Session) candSetFor(exprs []string) *candSet {
	key := strings.Join(exprs, "\x00\x01")
	cs, ok := s.cands[key]
	if !ok {
		cs = &candSet{exprs: exprs, local: map[string][]int32{}}
		s.cands[key] = cs
	}
	return cs
}

// localFor returns the matching devices local to node, best first.
func (s *Session) localFor(ctx context.Context, cs *candSet, node string) ([]int32, error) {
	if l, ok := cs.local[node]; ok {
		return l, nil
	}
	l, err := s.filterMatching(ctx, cs, s.localByNode[node])
	if err != nil {
		return nil, err
	}
	cs.local[node] = l
	return l, nil
}

// sharedFor returns the matching devices that are not node-local, best first.
func (s *Session) sharedFor(ctx context.Context, cs *candSet) ([]int32, error) {
	if cs.sharedDone {
		return cs.shared, nil
	}
	var all []int32
	for i := range s.devs {
		if s.devs[i].node == "" {
			all = append(all, int32(i))
		}
	}
	l, err := s.filterMatching(ctx, cs, all)
	if err != nil {
		return nil, err
	}
	cs.shared, cs.sharedDone = l, true
	return l, nil
}

func (s *Session) filterMatching(ctx context.Context, cs *candSet, devs []int32) ([]int32, error) {
	var out []int32
	for _, d := range devs {
		ok := true
		for _, expr := range cs.exprs {
			m, err := s.evalSelector(ctx, expr, d)
			if err != nil {
				return nil, err
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

// preferred orders devices: smallest counter footprint first, then snapshot
// order (pools by name, slices by name, devices as listed).
func (s *Session) preferred(a, b int32) int {
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
	if dev.cacheKey != "" {
		if v, ok := s.e.cachedResult(resultKey{dev.cacheKey, expr}); ok {
			res[d] = boolCode(v)
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
		return false, fmt.Errorf("selector %q on device %s/%s/%s: CEL runtime error: %w",
			expr, dev.id.driver, dev.id.pool, dev.id.device, dracel.EnhanceRuntimeError(err))
	}
	res[d] = boolCode(v)
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

// candidatesOn returns the devices of cs reachable from node nodeIdx, best
// first.
func (s *Session) candidatesOn(ctx context.Context, cs *candSet, nodeIdx int) ([]int32, error) {
	var local []int32
	if nodeIdx >= 0 {
		l, err := s.localFor(ctx, cs, s.nodes[nodeIdx].Name)
		if err != nil {
			return nil, err
		}
		local = l
	}
	shared, err := s.sharedFor(ctx, cs)
	if err != nil {
		return nil, err
	}
	if len(shared) == 0 {
		return local, nil
	}
	out := make([]int32, 0, len(local)+len(shared))
	out = append(out, local...)
	for _, d := range shared {
		if s.reachable(d, nodeIdx) {
			out = append(out, d)
		}
	}
	if len(local) > 0 {
		slices.SortStableFunc(out, s.preferred)
	}
	return out, nil
}
