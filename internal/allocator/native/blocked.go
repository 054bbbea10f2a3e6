package native

import (
	"k8s.io/utils/ptr"
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
	var name string
	if node >= 0 {
		name = s.nodes[node].Name
	}
	for _, bp := range s.badPools {
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
	}
	return false
}
