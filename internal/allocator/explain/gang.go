package explain

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/native"
)

// GangMember is one pod of a gang to explain.
type GangMember struct {
	// Pod is namespace/name.
	Pod string
	// Claims are the pod's claims to allocate, as the engine gets them.
	Claims []*resourceapi.ResourceClaim
	// NodeFilter maps the nodes the pod's node filters rule out to the
	// reason (see Options.NodeFilter); the others are its candidates.
	NodeFilter map[string]string
}

// Gang is a gang to explain: its name, the members whose claims are not
// allocated, and the constraints across them.
type Gang struct {
	Name        string
	Members     []GangMember
	Constraints []allocator.GangConstraint
}

// GangReport explains a gang: whether all its members' claims fit
// together, and, when they do not, which member cannot be placed even
// alone, or that each fits alone but not all together.
type GangReport struct {
	// Gang is the gang's name (namespace/name).
	Gang string `json:"gang"`
	// Fits: one search places every member.
	Fits bool `json:"fits"`
	// Verdict is one line: where the members go, or the obstacle.
	Verdict string `json:"verdict"`
	// Reason is the engine's message when the gang does not fit.
	Reason string `json:"reason,omitempty"`
	// Members are the members in the gang's order.
	Members []GangMemberReport `json:"members"`
	// StoppedEarly says why not every member was explained alone.
	StoppedEarly string `json:"stoppedEarly,omitempty"`
}

// GangMemberReport is one member of a gang.
type GangMemberReport struct {
	// Pod is namespace/name.
	Pod string `json:"pod"`
	// Node is where the gang's placement puts the member (when it fits).
	Node string `json:"node,omitempty"`
	// Devices are the member's devices in that placement.
	Devices []string `json:"devices,omitempty"`
	// Alone explains the member's claims as if the rest of the gang did
	// not exist (when the gang does not fit).
	Alone *Report `json:"alone,omitempty"`
}

// ExplainGang explains a gang in the cluster state in with the native
// engine (a fresh one when e is nil). The gang is searched as the claim
// controller searches it (allocator.GangSession, the members' candidate
// nodes, the gang's constraints, opts.MaxSteps); when it does not fit,
// each member is explained alone (Explain, with its node filter), until
// one that fits nowhere is found or opts.Timeout runs out. opts.NodeFilter
// and opts.NodesTotal are ignored: each member has its own.
func ExplainGang(ctx context.Context, e allocator.Engine, in allocator.Inputs, g Gang, opts Options) (*GangReport, error) {
	if e == nil {
		e = native.New()
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	deadline := time.Now().Add(timeout)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()

	r := &GangReport{Gang: g.Name, Members: make([]GangMemberReport, len(g.Members))}
	as, err := e.NewSession(ctx, in)
	if err != nil {
		if ctx.Err() != nil {
			r.StoppedEarly = fmt.Sprintf("deadline of %s reached while reading the cluster state", timeout)
			r.Verdict = "not explained: " + r.StoppedEarly
			return r, nil
		}
		return nil, fmt.Errorf("explain gang %s: %w", g.Name, err)
	}
	gs, ok := as.(allocator.GangSession)
	if !ok {
		return nil, fmt.Errorf("explain gang %s: engine %s does not place gangs", g.Name, e.Name())
	}
	nodes := sessionNodes(as)
	ag := allocator.Gang{Name: g.Name, Constraints: g.Constraints}
	for i, m := range g.Members {
		r.Members[i].Pod = m.Pod
		ag.Members = append(ag.Members, allocator.GangMember{Name: m.Pod, Claims: m.Claims, Nodes: candidates(nodes, m.NodeFilter)})
	}
	res, err := gs.AllocateGang(ctx, ag, allocator.Options{MaxSteps: opts.MaxSteps})
	var invalid *allocator.InvalidClaimError
	switch {
	case err == nil:
		r.Fits = true
		var where []string
		for i, mr := range res {
			r.Members[i].Node = mr.Node
			r.Members[i].Devices = devices(mr.Results)
			if mr.Node != "" {
				where = append(where, fmt.Sprintf("%s on %s", g.Members[i].Pod, mr.Node))
			}
		}
		r.Verdict = fmt.Sprintf("gang %s fits: %s", g.Name, names(where))
		return r, nil
	case errors.As(err, &invalid):
		r.Reason = err.Error()
		r.Verdict = fmt.Sprintf("gang %s: invalid claim: %s", g.Name, err)
		return r, nil
	case ctx.Err() != nil:
		r.Reason = err.Error()
		r.StoppedEarly = fmt.Sprintf("deadline of %s reached while the gang was searched", timeout)
		r.Verdict = fmt.Sprintf("gang %s: not explained: %s", g.Name, r.StoppedEarly)
		return r, nil
	}
	r.Reason = err.Error()
	for i, m := range g.Members {
		left := time.Until(deadline)
		if left <= 0 {
			r.StoppedEarly = fmt.Sprintf("deadline of %s reached after %d of %d members were explained alone", timeout, i, len(g.Members))
			break
		}
		mo := opts
		mo.Timeout, mo.NodeFilter, mo.NodesTotal = left, m.NodeFilter, len(nodes)
		rep, err := Explain(ctx, e, in, m.Claims, mo)
		if err != nil {
			return nil, err
		}
		r.Members[i].Alone = rep
		if !rep.Fits && rep.StoppedEarly == "" {
			r.Verdict = fmt.Sprintf("gang %s: pod %s cannot be placed even alone: %s", g.Name, m.Pod, rep.Verdict)
			return r, nil
		}
	}
	msg := strings.TrimPrefix(r.Reason, allocator.ErrUnsatisfiable.Error()+": ")
	if r.StoppedEarly != "" {
		r.Verdict = fmt.Sprintf("gang %s does not fit (%s); %s", g.Name, msg, r.StoppedEarly)
		return r, nil
	}
	r.Verdict = fmt.Sprintf("gang %s: every member fits alone, but not all together (%s)", g.Name, msg)
	return r, nil
}

// sessionNodes are the nodes a session chooses among.
func sessionNodes(as allocator.Session) []string {
	if s, err := native.AsSession(as); err == nil {
		return s.CandidateNodes()
	}
	return nil
}

// candidates are the nodes a member may use: those no filter rules out,
// in the session's order; nil (every node) without a filter.
func candidates(nodes []string, filter map[string]string) []string {
	if len(filter) == 0 {
		return nil
	}
	out := []string{}
	for _, n := range nodes {
		if _, out2 := filter[n]; !out2 {
			out = append(out, n)
		}
	}
	return out
}
