package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/explain"
)

// ExplainOutput is the JSON and YAML output of simulate --explain
// (docs/cli-explain.md).
type ExplainOutput struct {
	// Engine is always "native": explanations come from the native engine.
	Engine string `json:"engine"`
	// Pod is namespace/name when a pod's claims are explained (live).
	Pod string `json:"pod,omitempty"`
	// Features says where the feature gates of a live explanation come
	// from: the DRAStack's cluster probe, a probe of the CLI's own, or
	// Kubernetes 1.37's defaults.
	Features string `json:"features,omitempty"`
	// Explanations, one per claim that had no allocation, in document
	// order; each claim is explained in the state left by the claims
	// before it (allocated where they fit).
	Explanations []*explain.Report `json:"explanations"`
	// Gang is the gang of an explained pod (live), explained as the
	// operator places it: all members together or none.
	Gang *GangOutput `json:"gang,omitempty"`
}

// simulateExplain runs simulate --explain: every unallocated claim is
// explained, then allocated as simulate would, so that later claims see it.
func (a *App) simulateExplain(ctx context.Context, in *inputSet, engine allocator.Engine, timeout time.Duration, features allocator.Features, output string) error {
	out, err := runExplain(ctx, engine, in, timeout, features)
	if err != nil {
		return err
	}
	if output != outputTable {
		return writeStructured(a.Stdout, output, out)
	}
	if len(out.Explanations) == 0 {
		fmt.Fprintln(a.Stderr, "No claims to explain (every claim already has status.allocation).")
		return nil
	}
	return writeExplainTable(a.Stdout, out)
}

// runExplain explains and then allocates the unallocated claims of in one
// by one, each with its own deadline.
func runExplain(ctx context.Context, engine allocator.Engine, in *inputSet, timeout time.Duration, features allocator.Features) (*ExplainOutput, error) {
	var allocated, pending []*resourceapi.ResourceClaim
	for _, c := range in.Claims {
		if c.Status.Allocation != nil {
			allocated = append(allocated, c)
		} else {
			pending = append(pending, c)
		}
	}
	inputs := allocator.Inputs{
		Slices:     in.Slices,
		Classes:    in.Classes,
		Nodes:      withSliceNodes(in.Nodes, in.Slices),
		TaintRules: in.TaintRules,
		Features:   &features,
	}
	out := &ExplainOutput{Engine: engine.Name(), Explanations: []*explain.Report{}}
	for _, c := range pending {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("explanation interrupted at claim %s: %w", allocator.ClaimKey(c), err)
		}
		inputs.Allocated = allocated
		if err := checkCELConstraintsAnnotation(c); err != nil {
			r := ClaimResult{}
			in.markInvalid(&r, err)
			out.Explanations = append(out.Explanations, &explain.Report{
				Claims: []string{allocator.ClaimKey(c)}, Invalid: true, Reason: r.Reason, Verdict: r.Reason, Groups: []explain.NodeGroup{},
			})
			continue
		}
		rep, err := explain.Explain(ctx, engine, inputs, []*resourceapi.ResourceClaim{c}, explain.Options{Timeout: timeout})
		if err != nil {
			return nil, in.claimError(err, c)
		}
		if rep.Groups == nil {
			rep.Groups = []explain.NodeGroup{}
		}
		out.Explanations = append(out.Explanations, rep)
		if !rep.Fits {
			continue
		}
		// Allocate it as simulate would, for the claims after it.
		session, err := engine.NewSession(ctx, inputs)
		if err != nil {
			return nil, in.claimError(err, nil)
		}
		res, err := session.Allocate(ctx, []*resourceapi.ResourceClaim{c}, allocator.Options{})
		if err != nil {
			if errors.Is(err, allocator.ErrUnsatisfiable) {
				return nil, fmt.Errorf("claim %s: explained as fitting but not allocated: %w", allocator.ClaimKey(c), err)
			}
			return nil, in.claimError(err, c)
		}
		done := c.DeepCopy()
		done.Status.Allocation = res[0].Allocation
		allocated = append(allocated[:len(allocated):len(allocated)], done)
	}
	return out, nil
}

// writeExplainTable prints, per claim, the verdict and then one table per
// node group: a row per step of every request's funnel.
func writeExplainTable(w io.Writer, out *ExplainOutput) error {
	if out.Gang != nil {
		writeGangTable(w, out.Gang)
	}
	for i, r := range out.Explanations {
		if i > 0 {
			fmt.Fprintln(w)
		}
		what := "Claim"
		if len(r.Claims) > 1 {
			what = "Claims"
		}
		if out.Pod != "" {
			fmt.Fprintf(w, "Pod %s, ", out.Pod)
			what = strings.ToLower(what)
		}
		fmt.Fprintf(w, "%s %s: %s\n", what, strings.Join(r.Claims, ", "), r.Verdict)
		if r.StoppedEarly != "" {
			fmt.Fprintf(w, "Stopped early: %s\n", r.StoppedEarly)
		}
		if len(r.NodeFilters) > 0 {
			fmt.Fprintf(w, "\nNode filters: %s\n", r.FilterSummary)
			for _, f := range r.NodeFilters {
				fmt.Fprintf(w, "  %s: %s\n", f.Node, f.Reason)
			}
		}
		for _, g := range r.Groups {
			if err := writeGroup(w, &g); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeGroup prints one node group.
func writeGroup(w io.Writer, g *explain.NodeGroup) error {
	nodes := "(no node)"
	if len(g.Nodes) > 0 {
		nodes = strings.Join(g.Nodes, ", ")
	}
	fits := "does not fit"
	if g.Fits {
		fits = "fits"
	}
	fmt.Fprintf(w, "\nNodes %s: %s\n", nodes, fits)
	for _, d := range g.Devices {
		fmt.Fprintf(w, "  %s\n", d)
	}
	if g.Message != "" {
		fmt.Fprintf(w, "  %s\n", g.Message)
	}
	for _, p := range g.SkippedPools {
		fmt.Fprintf(w, "  pool not used: %s (%s)\n", p.Pool, p.Why)
	}
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "  REQUEST\tNEED\tSTEP\tLEFT\tREMOVED\tDETAIL")
	for _, q := range g.Requests {
		need := strconv.Itoa(q.Count)
		if q.Count == 0 {
			need = "all"
		}
		name := q.Request
		if q.Error != "" {
			fmt.Fprintf(tw, "  %s\t%s\terror\t\t\t%s\n", name, need, q.Error)
			continue
		}
		for _, s := range q.Steps {
			step := s.Step
			if s.Selector != nil {
				step += " " + strconv.Itoa(*s.Selector+1)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%d\t%s\n", name, need, step, s.Left, s.Removed, stepDetail(s))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, l := range strings.SplitAfter(buf.String(), "\n") {
		if l == "" {
			continue
		}
		if _, err := io.WriteString(w, strings.TrimRight(l, " \n")+"\n"); err != nil {
			return err
		}
	}
	return nil
}

// stepDetail is the DETAIL column of a step.
func stepDetail(s explain.Step) string {
	switch {
	case s.Expression != "":
		return s.Expression
	case len(s.Holders) > 0:
		return "held by " + strings.Join(s.Holders, ", ")
	case len(s.Counters) > 0:
		var c []string
		for _, cs := range s.Counters {
			c = append(c, fmt.Sprintf("%s %s/%s: needs %s, %s left", cs.Pool, cs.CounterSet, cs.Counter, cs.Needed, cs.Left))
		}
		return strings.Join(c, "; ")
	case len(s.Reasons) > 0:
		return strings.Join(s.Reasons, "; ")
	case len(s.Capacities) > 0:
		var c []string
		for _, cs := range s.Capacities {
			c = append(c, cs.String())
		}
		return strings.Join(c, "; ")
	}
	return ""
}
