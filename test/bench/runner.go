package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/test/bench/workload"
)

// Row is one engine's result on one workload. The JSON field names are the
// contract for scripts (issue 3, section 6).
type Row struct {
	Workload string `json:"workload"`
	Engine   string `json:"engine"`
	// Mode is "central" (one call per claim, the engine picks the node)
	// or "per-node" (one call per claim and node, as kube-scheduler's
	// Filter makes them); in per-node mode the latencies are per call.
	Mode            string  `json:"mode"`
	Claims          int     `json:"claims"`
	Allocated       int     `json:"allocated"`
	TimedOut        int     `json:"timedOut"`
	Seconds         float64 `json:"seconds"`
	ClaimsPerSecond float64 `json:"claimsPerSecond"`
	P50Seconds      float64 `json:"p50Seconds"`
	P99Seconds      float64 `json:"p99Seconds"`
	// P99AllocatedSeconds and P99UnsatisfiableSeconds split P99Seconds by
	// outcome: finding an allocation and proving there is none are
	// different searches with different targets (0 when no claim had that
	// outcome).
	P99AllocatedSeconds     float64 `json:"p99AllocatedSeconds"`
	P99UnsatisfiableSeconds float64 `json:"p99UnsatisfiableSeconds"`
	// Calls is the number of Allocate calls, CallsPerSecond their rate
	// (per-node mode; in central mode one call per claim).
	Calls          int     `json:"calls"`
	CallsPerSecond float64 `json:"callsPerSecond"`

	// Table only: how many runs the row is the median of (see -min-time)
	// and their range of claims/s, why the other claims were not
	// allocated, and the time to build the session (not part of Seconds).
	Runs               int     `json:"-"`
	MinClaimsPerSecond float64 `json:"-"`
	MaxClaimsPerSecond float64 `json:"-"`
	Unsatisfiable      int     `json:"-"`
	SearchBound        int     `json:"-"`
	Failed             int     `json:"-"`
	// Total is the number of claims in the workload.
	Total        int     `json:"-"`
	SetupSeconds float64 `json:"-"`
}

// runRepeated runs one engine on a workload, again and again (a fresh
// engine and workload build each time) while the runs finish every claim
// and their measured time stays under minTime, and returns the run with
// the median claims/s, with each latency percentile replaced by its median
// over the runs (a run that happens to share the machine with a burst of
// other work moves them all up). A run that uses up the budget is never
// repeated.
func runRepeated(ctx context.Context, spec workload.Spec, name, mode string, budget, timeout, minTime time.Duration, log io.Writer) (Row, error) {
	var runs []Row
	measured := 0.0
	for {
		run := runOne
		if mode == modePerNode {
			run = runPerNode
		}
		row, err := run(ctx, spec, name, engines[name](), budget, timeout, log)
		if err != nil {
			return row, err
		}
		runs = append(runs, row)
		measured += row.Seconds
		if measured >= minTime.Seconds() || row.Claims < row.Total || measured >= budget.Seconds() {
			break
		}
	}
	median := func(f func(Row) float64) float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	p50 := median(func(r Row) float64 { return r.P50Seconds })
	p99 := median(func(r Row) float64 { return r.P99Seconds })
	p99a := median(func(r Row) float64 { return r.P99AllocatedSeconds })
	p99u := median(func(r Row) float64 { return r.P99UnsatisfiableSeconds })
	slices.SortFunc(runs, func(a, b Row) int { return cmp.Compare(a.ClaimsPerSecond, b.ClaimsPerSecond) })
	out := runs[len(runs)/2]
	out.P50Seconds, out.P99Seconds, out.P99AllocatedSeconds, out.P99UnsatisfiableSeconds = p50, p99, p99a, p99u
	out.Runs = len(runs)
	out.MinClaimsPerSecond, out.MaxClaimsPerSecond = runs[0].ClaimsPerSecond, runs[len(runs)-1].ClaimsPerSecond
	return out, nil
}

// runOne runs one engine on a fresh build of one workload: claims in order,
// one Allocate call each with a per-claim timeout, each result recorded
// before the next claim, until the claims or the budget run out. The budget
// is checked before each claim, so the last claim may overrun it by up to
// the per-claim timeout.
func runOne(ctx context.Context, spec workload.Spec, name string, eng allocator.Engine, budget, timeout time.Duration, log io.Writer) (Row, error) {
	w, sess, row, err := prepare(ctx, spec, name, eng, modeCentral)
	if err != nil {
		return row, err
	}

	var latencies, allocated, unsatisfiable []time.Duration
	start := time.Now()
	for _, claim := range w.Claims {
		if time.Since(start) >= budget {
			break
		}
		claimCtx, cancel := context.WithTimeout(ctx, timeout)
		t0 := time.Now()
		results, err := sess.Allocate(claimCtx, []*resourceapi.ResourceClaim{claim}, allocator.Options{})
		took := time.Since(t0)
		latencies = append(latencies, took)
		timedOut := claimCtx.Err() != nil
		cancel()
		row.Claims++
		switch {
		case err == nil:
			row.Allocated++
			allocated = append(allocated, took)
			if err := record(sess, claim, results[0].Allocation); err != nil {
				return row, err
			}
		case errors.Is(err, context.DeadlineExceeded) || timedOut:
			row.TimedOut++
		case errors.Is(err, allocator.ErrUnsatisfiable):
			row.Unsatisfiable++
			unsatisfiable = append(unsatisfiable, took)
		case errors.Is(err, allocator.ErrSearchBound):
			row.SearchBound++
		default:
			row.Failed++
			if row.Failed <= 3 {
				fmt.Fprintf(log, "bench:   %s on %s: claim %s: %v\n", name, spec.Name, claim.Name, err)
			}
		}
	}
	row.Calls = row.Claims
	row.finish(start, latencies, allocated, unsatisfiable)
	return row, nil
}

// runPerNode runs one engine on a fresh build of one workload as
// kube-scheduler's Filter would: for each claim, one Allocate call per node
// of the workload, in node order, with the node in the request
// (Options.Node) and the per-claim timeout applied to each call (Filter's
// filterTimeout is per call). Every node is asked, as Filter asks every
// node; the first node that fits gets the claim, whose result is recorded
// before the next claim. Latencies are per call: "alloc" for calls that
// found an allocation, "unsat" for calls that proved there is none on
// that node. The budget is checked before each call.
func runPerNode(ctx context.Context, spec workload.Spec, name string, eng allocator.Engine, budget, timeout time.Duration, log io.Writer) (Row, error) {
	w, sess, row, err := prepare(ctx, spec, name, eng, modePerNode)
	if err != nil {
		return row, err
	}

	var latencies, allocated, unsatisfiable []time.Duration
	start := time.Now()
claims:
	for _, claim := range w.Claims {
		var first *resourceapi.AllocationResult
		var timedOut, bound, failed bool
		for _, node := range w.Inputs.Nodes {
			if time.Since(start) >= budget {
				break claims
			}
			callCtx, cancel := context.WithTimeout(ctx, timeout)
			t0 := time.Now()
			results, err := sess.Allocate(callCtx, []*resourceapi.ResourceClaim{claim}, allocator.Options{Node: node.Name})
			took := time.Since(t0)
			hitTimeout := callCtx.Err() != nil
			cancel()
			row.Calls++
			latencies = append(latencies, took)
			switch {
			case err == nil:
				allocated = append(allocated, took)
				if first == nil {
					first = results[0].Allocation
				}
			case errors.Is(err, context.DeadlineExceeded) || hitTimeout:
				timedOut = true
			case errors.Is(err, allocator.ErrUnsatisfiable):
				unsatisfiable = append(unsatisfiable, took)
			case errors.Is(err, allocator.ErrSearchBound):
				bound = true
			default:
				if !failed && row.Failed < 3 {
					fmt.Fprintf(log, "bench:   %s on %s (per node): claim %s, node %s: %v\n", name, spec.Name, claim.Name, node.Name, err)
				}
				failed = true
			}
		}
		row.Claims++
		switch {
		case first != nil:
			row.Allocated++
			if err := record(sess, claim, first); err != nil {
				return row, err
			}
		case timedOut:
			row.TimedOut++
		case failed:
			row.Failed++
		case bound:
			row.SearchBound++
		default:
			row.Unsatisfiable++
		}
	}
	row.finish(start, latencies, allocated, unsatisfiable)
	return row, nil
}

// prepare builds a fresh workload and its engine session for one row,
// timing the session as setup.
func prepare(ctx context.Context, spec workload.Spec, name string, eng allocator.Engine, mode string) (*workload.Workload, allocator.Session, Row, error) {
	w := spec.Build()
	row := Row{Workload: spec.Name, Engine: name, Mode: mode, Total: len(w.Claims)}
	setup := time.Now()
	sess, err := eng.NewSession(ctx, w.Inputs)
	if err != nil {
		return w, nil, row, fmt.Errorf("new session: %w", err)
	}
	row.SetupSeconds = time.Since(setup).Seconds()
	// Garbage from building the workload and the session is not the
	// claims' to pay for: collect it before the clock starts.
	runtime.GC()
	return w, sess, row, nil
}

// record adds a claim's allocation to the session before the next claim.
func record(sess allocator.Session, claim *resourceapi.ResourceClaim, alloc *resourceapi.AllocationResult) error {
	done := claim.DeepCopy()
	done.Status.Allocation = alloc
	if err := sess.Record(done); err != nil {
		return fmt.Errorf("record claim %s: %w", claim.Name, err)
	}
	return nil
}

// finish sets the row's rates and latency percentiles from a run that
// started at start.
func (row *Row) finish(start time.Time, latencies, allocated, unsatisfiable []time.Duration) {
	row.Seconds = time.Since(start).Seconds()
	if row.Seconds > 0 {
		row.ClaimsPerSecond = float64(row.Claims) / row.Seconds
		row.CallsPerSecond = float64(row.Calls) / row.Seconds
	}
	row.P50Seconds = percentile(latencies, 0.50).Seconds()
	row.P99Seconds = percentile(latencies, 0.99).Seconds()
	row.P99AllocatedSeconds = percentile(allocated, 0.99).Seconds()
	row.P99UnsatisfiableSeconds = percentile(unsatisfiable, 0.99).Seconds()
}

// percentile is the nearest-rank percentile; zero for no samples.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	rank := int(p*float64(len(s))+0.999999) - 1
	return s[max(0, min(rank, len(s)-1))]
}
