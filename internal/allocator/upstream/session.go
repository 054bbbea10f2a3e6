package upstream

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drastack/drastack/internal/allocator"
)

// session is one snapshot of the cluster plus the claims recorded since.
type session struct {
	engine   *Engine
	features structured.Features
	celCache *cel.Cache
	in       allocator.Inputs
	classes  *classLister
	state    *allocatedState
	// nodeIndependent is true when every slice is reachable from every node
	// (allNodes, on the slice or on each device). Then every node gives the
	// same answer and one upstream call decides the claim.
	nodeIndependent bool
	// upstream is the upstream allocator for the current state. It caches
	// per-pool counter balances computed from the allocated devices, so it is
	// rebuilt after Record changes them. Building it only sorts slices by
	// node; the expensive work happens per Allocate call.
	upstream structured.Allocator
}

// Allocate implements allocator.Session.
//
// With opts.Node set it makes one upstream call for that node (like one
// kube-scheduler Filter call). The node object comes from Inputs.Nodes; a
// node that is not there is represented by an object with only its name,
// which is enough for node-local slices but matches no label selector.
//
// With opts.Node empty it tries Inputs.Nodes in order and returns the first
// node that fits, as a central allocator built on the upstream code would:
// the upstream allocator cannot be asked "on which node?", only "on this
// node?". Per-device node selection (multi-host devices) does not change
// that: a call for node N sees exactly the devices whose selector matches N,
// so the first node covered by a free device set wins, and the result keeps
// the devices' own node selector (Result.Node is then empty). When no slice
// depends on the node (only allNodes devices), one call decides for every
// node, so only the first node is tried. With no nodes at all, one call is
// made for a placeholder node without name or labels: only allNodes devices
// can match it.
//
// Per-claim timeouts come from ctx (a deadline); opts.MaxSteps bounds the
// number of upstream search steps (allocateOne invocations) over all nodes
// tried and is otherwise unbounded, as in kube-scheduler.
func (s *session) Allocate(ctx context.Context, claims []*resourceapi.ResourceClaim, opts allocator.Options) ([]allocator.Result, error) {
	if len(claims) == 0 {
		return nil, nil
	}
	if err := checkSupported(claims); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("upstream allocation: %w", err)
	}
	if err := s.ensureAllocator(ctx); err != nil {
		return nil, err
	}
	upstreamClaims := withDefaults(claims)
	nodes := s.candidateNodes(opts.Node)

	steps := newStepContext(ctx, opts.MaxSteps)
	var nodeReasons []string
	aborted := false
	for _, node := range nodes {
		results, err := s.upstream.Allocate(steps, node, upstreamClaims)
		if err != nil {
			if steps.exceeded() {
				return nil, fmt.Errorf("%w: more than %d upstream search steps for %s", allocator.ErrSearchBound, opts.MaxSteps, claimKeys(claims))
			}
			if ctxErr := ctx.Err(); ctxErr != nil {
				return nil, fmt.Errorf("upstream allocation of %s on node %q: %w", claimKeys(claims), node.Name, ctxErr)
			}
			if reason, stopped, ok := nodeFailure(err); ok {
				nodeReasons = appendUnique(nodeReasons, reason)
				aborted = aborted || stopped
				continue
			}
			if missingClass(err) {
				return nil, fmt.Errorf("%w: %w", allocator.ErrUnsatisfiable, err)
			}
			return nil, invalidClaims(claims, err, s.compiles)
		}
		if len(results) == 0 {
			continue
		}
		return makeResults(claims, results, node.Name)
	}
	return nil, unsatisfiable(claims, len(nodes), s.nodeIndependent && opts.Node == "", aborted, nodeReasons)
}

// Record implements allocator.Session.
func (s *session) Record(claim *resourceapi.ResourceClaim) error {
	if claim == nil || claim.Status.Allocation == nil {
		return fmt.Errorf("record claim %s: status.allocation is not set", keyOf(claim))
	}
	s.state.add(claim.Status.Allocation)
	// The upstream allocator caches counter balances per pool; start afresh.
	s.upstream = nil
	return nil
}

func (s *session) ensureAllocator(ctx context.Context) error {
	if s.upstream != nil {
		return nil
	}
	a, err := structured.NewAllocator(ctx, s.features, s.state.snapshot(), s.classes, s.in.Slices, s.celCache)
	if err != nil {
		return fmt.Errorf("create upstream allocator: %w", err)
	}
	s.upstream = a
	return nil
}

// candidateNodes lists the nodes to try, in order.
func (s *session) candidateNodes(name string) []*corev1.Node {
	if name != "" {
		for _, node := range s.in.Nodes {
			if node.Name == name {
				return []*corev1.Node{node}
			}
		}
		return []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: name}}}
	}
	if len(s.in.Nodes) == 0 {
		return []*corev1.Node{{}}
	}
	if s.nodeIndependent {
		return s.in.Nodes[:1]
	}
	return s.in.Nodes
}

// makeResults wraps upstream allocation results. Result.Node is the node when
// the allocation is pinned to it (a node-local device), otherwise empty.
func makeResults(claims []*resourceapi.ResourceClaim, results []resourceapi.AllocationResult, node string) ([]allocator.Result, error) {
	if len(results) != len(claims) {
		return nil, fmt.Errorf("upstream allocator returned %d results for %d claims", len(results), len(claims))
	}
	out := make([]allocator.Result, len(claims))
	for i := range claims {
		alloc := results[i].DeepCopy()
		out[i] = allocator.Result{Claim: claims[i], Allocation: alloc}
		if pinnedTo(alloc.NodeSelector, node) {
			out[i].Node = node
		}
	}
	return out, nil
}

// pinnedTo reports whether sel is the single-node selector the upstream
// allocator writes for node-local devices.
func pinnedTo(sel *corev1.NodeSelector, node string) bool {
	if sel == nil || node == "" || len(sel.NodeSelectorTerms) != 1 {
		return false
	}
	for _, req := range sel.NodeSelectorTerms[0].MatchFields {
		if req.Key == "metadata.name" && req.Operator == corev1.NodeSelectorOpIn &&
			len(req.Values) == 1 && req.Values[0] == node {
			return true
		}
	}
	return false
}

func unsatisfiable(claims []*resourceapi.ResourceClaim, nodes int, shortcut, aborted bool, reasons []string) error {
	where := fmt.Sprintf("on any of %d nodes", nodes)
	switch {
	case shortcut:
		where = "on any node (no device depends on the node)"
	case nodes == 1:
		where = "on the node"
	}
	msg := fmt.Sprintf("upstream allocator found no devices for %s %s", claimKeys(claims), where)
	for _, r := range reasons {
		msg += "; " + r
	}
	if aborted {
		return fmt.Errorf("%w: %s (%w)", allocator.ErrUnsatisfiable, msg, ErrAborted)
	}
	return fmt.Errorf("%w: %s", allocator.ErrUnsatisfiable, msg)
}

func appendUnique(list []string, s string) []string {
	for _, have := range list {
		if have == s {
			return list
		}
	}
	return append(list, s)
}

// compiles reports whether a selector expression compiles, to tell which
// selector an upstream compile error is about.
func (s *session) compiles(expr string) bool {
	return s.celCache.GetOrCompile(expr).Error == nil
}
