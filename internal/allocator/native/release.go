package native

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

var _ allocator.Releaser = &Session{}

// releaseState is what Release needs beyond the session: per pool, the
// nodes whose candidate lists can hold its devices.
type releaseState struct {
	// poolNodes lists, per pool, the node indexes of its node-local
	// devices; nil entries are not computed yet. A pool with a device that
	// is not node-local (node selector, all nodes) is reachable from any
	// node: anyNode marks it.
	poolNodes [][]int32
	anyNode   []bool
	done      []bool
	// nodes is len(Session.nodes) when the lists were computed: a node
	// added since (Options.Node naming a node that was not an input) may
	// hold devices of a pool, so the lists are computed again.
	nodes int
}

// Release implements allocator.Releaser: it undoes Record for claim. The
// devices of claim.Status.Allocation become free (a share gives back what
// it consumed), a device that no longer has a holder gives its counters
// back, and the candidate lists that Record pruned are restored for every
// node that can see the device's pool, so later Allocate calls may choose
// it (and the partitions it blocked) again.
//
// A device that two recorded claims hold exclusively (a double allocation,
// which Record keeps as one) is freed by the first of them to be released.
func (s *Session) Release(claim *resourceapi.ResourceClaim) error {
	if claim == nil || claim.Status.Allocation == nil {
		return nil
	}
	key := string(claim.UID)
	if key == "" {
		key = claim.Namespace + "/" + claim.Name
	}
	if !s.recorded[key] {
		return nil
	}
	delete(s.recorded, key)
	for _, r := range claim.Status.Allocation.Devices.Results {
		if ptr.Deref(r.AdminAccess, false) {
			continue
		}
		i, ok := s.byID[deviceID{r.Driver, r.Pool, r.Device}]
		if !ok {
			continue
		}
		if r.ShareID != nil {
			if s.shares[i] == 0 {
				continue
			}
			s.shares[i]--
			s.releaseShare(i, r.ConsumedCapacity)
		} else {
			if !s.inUse[i] {
				continue
			}
			s.inUse[i] = false
		}
		if s.inUse[i] || s.shares[i] > 0 {
			continue
		}
		d := &s.devs[i]
		s.pools[d.pool].overdrawn -= s.refund(d)
		s.compat.dirty = true
		s.packTouch(i)
		s.revive(d.pool)
	}
	return nil
}

// releaseShare gives back what a recorded share consumed of device d.
func (s *Session) releaseShare(d int32, consumed map[resourceapi.QualifiedName]resource.Quantity) {
	caps := s.devs[d].caps
	if len(consumed) == 0 || len(caps) == 0 || s.capUsed[d] == nil {
		return
	}
	q := make([]resource.Quantity, len(caps))
	for k := range caps {
		if v, ok := consumed[caps[k].name]; ok {
			q[k] = v
		}
	}
	s.addShare(d, q, -1)
}

// refund gives back what dev consumes and returns how many balances went
// from negative to non-negative (the opposite of charge's count).
func (s *Session) refund(dev *device) (recovered int32) {
	for _, c := range dev.consumes {
		if c.big != nil {
			r := s.bigRemaining[c.counter]
			before := r.Sign() < 0
			r.Add(r, c.big)
			if before && r.Sign() >= 0 {
				recovered++
			}
			continue
		}
		before := s.remaining[c.counter] < 0
		s.remaining[c.counter] += c.amount
		if before && s.remaining[c.counter] >= 0 {
			recovered++
		}
	}
	return recovered
}

// revive restores the live candidates that prune dropped, on every node that
// can see a device of pool pi: freeing a device can make it and every device
// sharing its counters allocatable again. The cursors of the candidate sets
// (candSet.firstLive) move back to the first such node.
func (s *Session) revive(pi int32) {
	nodes, any := s.poolNodes(pi)
	for _, cs := range s.cands {
		if cs.none != nil {
			reviveCands(cs.none)
		}
		if any {
			for _, nc := range cs.nodes {
				if nc != nil {
					reviveCands(nc)
				}
			}
			cs.firstLive = 0
			continue
		}
		for _, ni := range nodes {
			if int(ni) < len(cs.nodes) && cs.nodes[ni] != nil {
				reviveCands(cs.nodes[ni])
			}
			cs.firstLive = min(cs.firstLive, int(ni))
		}
	}
}

func reviveCands(nc *nodeCands) {
	nc.live = append(nc.live[:0], nc.all...)
	nc.liveLocal = nc.local
}

// poolNodes returns the node indexes of pool pi's node-local devices, or
// any=true when a device of the pool is reachable otherwise.
func (s *Session) poolNodes(pi int32) (nodes []int32, any bool) {
	rs := s.release
	if rs == nil || rs.nodes != len(s.nodes) {
		rs = &releaseState{
			poolNodes: make([][]int32, len(s.pools)),
			anyNode:   make([]bool, len(s.pools)),
			done:      make([]bool, len(s.pools)),
			nodes:     len(s.nodes),
		}
		s.release = rs
	}
	if !rs.done[pi] {
		for d := range s.devs {
			dev := &s.devs[d]
			if dev.pool != pi {
				continue
			}
			switch {
			case dev.node == "":
				rs.anyNode[pi] = true
			case dev.nodeIdx >= 0:
				if !containsInt32(rs.poolNodes[pi], dev.nodeIdx) {
					rs.poolNodes[pi] = append(rs.poolNodes[pi], dev.nodeIdx)
				}
			}
		}
		rs.done[pi] = true
	}
	return rs.poolNodes[pi], rs.anyNode[pi]
}

func containsInt32(list []int32, v int32) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
