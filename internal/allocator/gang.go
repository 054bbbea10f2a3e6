package allocator

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
)

// A gang is the pods of one workload that must start together: their claims
// are allocated together, in one search across pods and nodes, or none are.

// Gang is one allocation request for all members of a gang.
type Gang struct {
	// Name identifies the gang in messages (for example namespace/name of
	// its PodGroup, or the drastack gang label's value).
	Name string
	// Members are the gang's pods that need operator claims allocated, in
	// a stable order (for example by pod name): the search tries them in
	// this order, and the same gang in the same state gives the same
	// placement.
	Members []GangMember
	// Constraints hold across all members (see GangConstraint).
	Constraints []GangConstraint
}

// GangMember is one pod of a gang.
type GangMember struct {
	// Name identifies the pod in messages (namespace/name).
	Name string
	// Claims are the pod's claims to allocate together on the pod's node,
	// as one Allocate call would. A member without claims is placed by
	// kube-scheduler alone and is not part of the search.
	Claims []*resourceapi.ResourceClaim
	// Nodes are the nodes the pod may run on, in preference order: the
	// nodes its own constraints (node selector, affinity, taints, room
	// for its requests) allow, as internal/placement computes them. Nodes
	// missing from the session's inputs are taken by name, as Options.Node
	// is. Nil means every node of the session's inputs.
	Nodes []string
}

// GangConstraint is one constraint across all members, evaluated like a
// claim's matchAttribute across its requests. Exactly one field is set.
type GangConstraint struct {
	// MatchAttribute: every device allocated to any member (for the
	// requests named in Requests) has this attribute, with one value shared
	// by all of them (for list attributes, one value every device lists).
	// A fully qualified name, as in DeviceConstraint.MatchAttribute: for
	// example "gpu.nvidia.com/cliqueID" for one NVLink domain.
	MatchAttribute string
	// Requests limits MatchAttribute to the requests with these names (in
	// any member's claims; "req/sub" names a subrequest); empty means all.
	Requests []string
	// NodeLabel: every member runs on a node that has this label, all with
	// the same value (for example "topology.kubernetes.io/rack", or the
	// label that names a multi-host domain). Like kube-scheduler's
	// TopologyConstraint of a PodGroup.
	NodeLabel string
}

// Validate reports a constraint with no or two fields set.
func (c GangConstraint) Validate() error {
	switch {
	case c.MatchAttribute == "" && c.NodeLabel == "":
		return fmt.Errorf("gang constraint: one of matchAttribute and nodeLabel must be set")
	case c.MatchAttribute != "" && c.NodeLabel != "":
		return fmt.Errorf("gang constraint: only one of matchAttribute (%s) and nodeLabel (%s) may be set", c.MatchAttribute, c.NodeLabel)
	case c.NodeLabel != "" && len(c.Requests) > 0:
		return fmt.Errorf("gang constraint: nodeLabel %s applies to pods, not to requests", c.NodeLabel)
	}
	return nil
}

// MemberResult is the allocation of one member.
type MemberResult struct {
	// Member is the member's Name.
	Member string
	// Node is the node the member's claims were allocated for: the pod
	// must run there (the caller pins it when the allocations alone do
	// not, for example for devices of several hosts). Empty for a member
	// without claims.
	Node string
	// Results are the member's claims' results, in the order of its Claims.
	Results []Result
}

// GangSession is implemented by sessions that allocate gangs.
type GangSession interface {
	// AllocateGang allocates the claims of every member together, or none:
	// each member's claims on one of its nodes, as one Allocate call with
	// that node would, all members at once, with every constraint of the
	// gang holding. The search backtracks across members, nodes and
	// devices, so a gang is refused only when no placement exists (or the
	// search exceeds opts.MaxSteps, which it reports as ErrSearchBound).
	// opts.Node must be empty; opts.Policy orders the choices. Nothing is
	// recorded: the caller records every result it keeps.
	AllocateGang(ctx context.Context, gang Gang, opts Options) ([]MemberResult, error)
}
