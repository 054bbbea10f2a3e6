package native

import (
	"fmt"
	"strings"

	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/pool"
)

// allBlocked reports whether an incomplete or invalid pool is visible from
// node (-1: no node): it has a current slice whose node selection admits
// the node (for per-device node selection, a device that does).
//
// Claims that ask for All devices anywhere (in any request or any
// subrequest, chosen or not) are not allocated on such a node: "all" is
// unknown while a pool is being updated. This is kube-scheduler's rule,
// including its scope: it checks every request and subrequest up front, so
// a firstAvailable request whose All subrequest would not even be tried
// still keeps the claim off the node. The native engine follows it so that
// a claim it allocates is one kube-scheduler would allocate too.
func (s *Session) allBlocked(node int) bool {
	if node < 0 {
		return s.badPoolReachable(node)
	}
	for len(s.blocked) <= node {
		s.blocked = append(s.blocked, 0)
	}
	if s.blocked[node] == 0 {
		s.blocked[node] = boolCode(s.badPoolReachable(node))
	}
	return s.blocked[node] == 1
}

// badPoolReachable reports whether an incomplete or invalid pool has a
// slice reachable from node.
func (s *Session) badPoolReachable(node int) bool {
	for i := range s.badPools {
		if s.badPoolVisible(&s.badPools[i], node) {
			return true
		}
	}
	return false
}

// maxNamedPools bounds the skipped pools a message names.
const maxNamedPools = 3

// skippedPools says which incomplete or invalid pools visible from node
// (-1: no node) the allocator did not use, with their DevicePool health and
// reason code; empty when there are none. A claim that fails for lack of
// devices may have been after exactly those.
func (s *Session) skippedPools(node int) string {
	return s.namePools(s.badPools, node, "; pools not used because they are incomplete or invalid: ") +
		s.namePools(s.gatedPools, node, "; slices not used because a feature gate is off: ")
}

// namePools names the pools of list visible from node after intro, at
// most maxNamedPools of them; empty when none is.
func (s *Session) namePools(list []badPool, node int, intro string) string {
	var named []string
	more := 0
	for i := range list {
		bp := &list[i]
		if !s.badPoolVisible(bp, node) {
			continue
		}
		if len(named) == maxNamedPools {
			more++
			continue
		}
		named = append(named, fmt.Sprintf("%s/%s (%s)", bp.id.Driver, bp.id.Pool, bp.why))
	}
	if len(named) == 0 {
		return ""
	}
	msg := intro + strings.Join(named, ", ")
	if more > 0 {
		msg += fmt.Sprintf(" and %d more", more)
	}
	return msg
}

// badPoolReason is a pool's health and reason code as its DevicePool
// reports them: Incomplete (IncompletePool) or Invalid with the reason of
// its first error in the order users see problems.
func badPoolReason(p *pool.Pool) string {
	if !p.Complete() {
		return fmt.Sprintf("%s, %s: %d of %d slices", pool.HealthIncomplete, pool.ReasonIncompletePool, len(p.Slices), p.ExpectedSlices)
	}
	var first *pool.Problem
	for i := range p.Problems {
		pr := &p.Problems[i]
		if pr.Severity == pool.SeverityError && (first == nil || pool.CompareProblems(*pr, *first) < 0) {
			first = pr
		}
	}
	if first == nil {
		return string(pool.HealthInvalid)
	}
	return fmt.Sprintf("%s, %s", pool.HealthInvalid, first.Reason)
}

// badPoolVisible reports whether a slice of bp is reachable from node.
func (s *Session) badPoolVisible(bp *badPool, node int) bool {
	var name string
	if node >= 0 {
		name = s.nodes[node].Name
	}
	for _, sl := range bp.slices {
		switch {
		case ptr.Deref(sl.Spec.NodeName, "") != "":
			if *sl.Spec.NodeName == name {
				return true
			}
		case ptr.Deref(sl.Spec.AllNodes, false):
			return true
		case sl.Spec.NodeSelector != nil:
			if node >= 0 && newNodeSel(sl.Spec.NodeSelector).match(0, s.nodes[node]) {
				return true
			}
		case ptr.Deref(sl.Spec.PerDeviceNodeSelection, false):
			for di := range sl.Spec.Devices {
				dv := &sl.Spec.Devices[di]
				if ptr.Deref(dv.NodeName, "") == name && name != "" || ptr.Deref(dv.AllNodes, false) ||
					dv.NodeSelector != nil && node >= 0 && newNodeSel(dv.NodeSelector).match(0, s.nodes[node]) {
					return true
				}
			}
		}
	}
	return false
}
