package explain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/native"
)

// DefaultTimeout bounds an explanation when Options.Timeout is 0: the
// time kube-scheduler gives one Filter call, since an explanation runs one
// allocation per candidate node.
const DefaultTimeout = 10 * time.Second

// Options tune Explain.
type Options struct {
	// Timeout bounds the whole explanation; 0 means DefaultTimeout. Nodes
	// not reached in time are left out and Report.StoppedEarly says so.
	Timeout time.Duration
	// MaxSteps bounds each allocation (allocator.Options.MaxSteps).
	MaxSteps int64
	// NodeFilter maps the nodes a pod's node filters rule out (cordoned,
	// tainted, outside its affinity, full: package placement) to the
	// reason, in kube-scheduler's words. Those nodes are not tried, as
	// kube-scheduler runs the DRA filter only on nodes that passed the
	// others, and the claims fit only where some remaining node fits.
	NodeFilter map[string]string
	// NodesTotal is the number of nodes the pod's filters looked at, for
	// the summary of the verdict ("0/5 nodes are available: ..."); 0
	// counts the candidate nodes.
	NodesTotal int
	// Namespace, when set, is the only namespace whose claims the report
	// names: holders in other namespaces are only counted. The operator's
	// Events on a tenant's claim set it, so that one tenant never learns
	// another's claim names.
	Namespace string
}

// Explain explains the allocation of claims (one claim, or the claims of a
// pod, allocated together) in the cluster state in. The engine is the
// native one; a fresh engine is used when e is nil. The error is for
// state that cannot be read; an invalid or unsatisfiable claim is a Report.
func Explain(ctx context.Context, e allocator.Engine, in allocator.Inputs, claims []*resourceapi.ResourceClaim, opts Options) (*Report, error) {
	if e == nil {
		e = native.New()
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	r := &Report{}
	for _, c := range claims {
		r.Claims = append(r.Claims, allocator.ClaimKey(c))
	}
	as, err := e.NewSession(ctx, in)
	switch {
	case err != nil && ctx.Err() != nil:
		r.StoppedEarly = fmt.Sprintf("deadline of %s reached while reading the cluster state", timeout)
		r.Verdict = "not explained: " + r.StoppedEarly
		return r, nil
	case err != nil:
		return nil, fmt.Errorf("explain: %w", err)
	}
	s, err := native.AsSession(as)
	if err != nil {
		return nil, err
	}
	x := &explainer{s: s, claims: claims, facts: newFacts(in), opts: opts}
	x.facts.namespace = opts.Namespace

	res, err := s.Allocate(ctx, claims, allocator.Options{MaxSteps: opts.MaxSteps})
	var invalid *allocator.InvalidClaimError
	switch {
	case errors.As(err, &invalid):
		r.Invalid, r.Reason = true, err.Error()
		r.Verdict = "invalid claim: " + err.Error()
		return r, nil
	case err != nil && ctx.Err() != nil:
		r.Reason = err.Error()
		r.StoppedEarly = fmt.Sprintf("deadline of %s reached before any node was explained", timeout)
		r.Verdict = "not explained: " + r.StoppedEarly
		return r, nil
	case err != nil:
		r.Reason = err.Error()
	default:
		r.Fits = true
		r.Node = res[0].Node
		r.Devices = devices(res)
	}

	nodes := s.CandidateNodes()
	if len(opts.NodeFilter) > 0 {
		nodes = r.filterNodes(nodes, opts)
		if len(nodes) == 0 {
			r.Fits, r.Node, r.Devices = false, "", nil
			r.Verdict = "no node passes the pod's node filters: " + r.FilterSummary
			return r, nil
		}
	}
	if len(nodes) == 0 {
		nodes = []string{""}
	}
	r.NodesTotal = len(nodes)
	keys := map[string]int{}
	for _, node := range nodes {
		if ctx.Err() != nil {
			r.StoppedEarly = fmt.Sprintf("deadline of %s reached after %d of %d nodes", timeout, r.NodesExamined, len(nodes))
			break
		}
		g, err := x.node(ctx, node)
		if err != nil {
			if ctx.Err() != nil {
				r.StoppedEarly = fmt.Sprintf("deadline of %s reached after %d of %d nodes", timeout, r.NodesExamined, len(nodes))
				break
			}
			// A claim that cannot be planned (its class does not exist)
			// has no funnel anywhere: the engine's reason says it all,
			// in the verdicts' shape ("request NAME: ..."), the claim
			// being named already.
			r.Verdict = strings.TrimPrefix(err.Error(), allocator.ErrUnsatisfiable.Error()+": ")
			if len(claims) == 1 {
				r.Verdict = strings.TrimPrefix(r.Verdict, "claim "+allocator.ClaimKey(claims[0])+", ")
			}
			r.Reason = err.Error()
			return r, nil
		}
		r.NodesExamined++
		k := groupKey(g, node)
		if i, ok := keys[k]; ok {
			r.Groups[i].Nodes = append(r.Groups[i].Nodes, node)
			continue
		}
		keys[k] = len(r.Groups)
		r.Groups = append(r.Groups, *g)
	}
	if len(r.NodeFilters) > 0 {
		r.fitFromGroups()
	}
	r.Verdict = verdict(r)
	return r, nil
}

// explainer holds what one Explain call shares between nodes.
type explainer struct {
	s      *native.Session
	claims []*resourceapi.ResourceClaim
	facts  *facts
	opts   Options
}

// node explains the claims on one node ("" for devices that need none).
func (x *explainer) node(ctx context.Context, node string) (*NodeGroup, error) {
	g := &NodeGroup{}
	if node != "" {
		g.Nodes = []string{node}
	}
	res, err := x.s.Allocate(ctx, x.claims, allocator.Options{Node: node, MaxSteps: x.opts.MaxSteps})
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, err
	case err != nil:
		g.Message = err.Error()
	default:
		g.Fits = true
		g.Devices = devices(res)
	}
	for _, c := range x.claims {
		funnels, err := x.s.Funnel(ctx, c, node)
		if err != nil {
			return nil, err
		}
		for _, f := range funnels {
			g.Requests = append(g.Requests, x.facts.request(allocator.ClaimKey(c), f))
		}
	}
	for _, p := range x.s.SkippedPools(node) {
		g.SkippedPools = append(g.SkippedPools, SkippedPool{Pool: p.Driver + "/" + p.Pool, Why: p.Why})
	}
	return g, nil
}

// groupKey is what makes two nodes look alike: the same outcome, the same
// message and the same funnels once the node's name is taken out.
// Devices chosen are left out (node-local pools are usually named after
// their node); the group shows those of its first node.
func groupKey(g *NodeGroup, node string) string {
	k := *g
	k.Nodes, k.Devices = nil, nil
	data, _ := json.Marshal(k)
	if node == "" {
		return string(data)
	}
	return strings.ReplaceAll(string(data), node, "\x00")
}

// devices lists the devices of allocation results.
func devices(res []allocator.Result) []string {
	var out []string
	for _, r := range res {
		if r.Allocation == nil {
			continue
		}
		for _, d := range r.Allocation.Devices.Results {
			out = append(out, fmt.Sprintf("%s %s: %s/%s/%s", allocator.ClaimKey(r.Claim), d.Request, d.Driver, d.Pool, d.Device))
		}
	}
	return out
}

// request turns an engine funnel into its report, with holders and
// counters from the pool model.
func (f *facts) request(claim string, fn native.Funnel) Request {
	r := Request{Claim: claim, Request: fn.Request, Class: fn.Class, Count: fn.Count}
	if fn.Err != nil {
		r.Error = fn.Err.Error()
	}
	prev := 0
	for i, st := range fn.Stages {
		step := Step{Step: st.Step, Expression: st.Expression, Left: st.Left}
		if i > 0 {
			step.Removed = prev - st.Left
		}
		prev = st.Left
		if st.Step == native.StepClassSelector || st.Step == native.StepSelector {
			step.Selector = &st.Selector
		}
		switch st.Step {
		case native.StepAllocated:
			step.Holders = f.holders(st.Removed, f.namespace)
		case native.StepCounters:
			step.Counters = f.short(st.Removed)
		case native.StepGates:
			step.Reasons = st.Reasons
		case native.StepCapacity:
			for _, c := range st.Capacity {
				step.Capacities = append(step.Capacities, CapacityShort{
					Device: c.Device.String(), Capacity: c.Capacity, Needed: c.Needed, Left: c.Left, Reason: c.Reason,
				})
			}
		}
		r.Steps = append(r.Steps, step)
	}
	return r
}

// sortedUnique sorts and deduplicates.
func sortedUnique(in []string) []string {
	slices.Sort(in)
	return slices.Compact(in)
}
