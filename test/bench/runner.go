package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/test/bench/workload"
)

// Row is one engine's result on one workload. The JSON field names are the
// contract for scripts (issue 3, section 6).
type Row struct {
	Workload        string  `json:"workload"`
	Engine          string  `json:"engine"`
	Claims          int     `json:"claims"`
	Allocated       int     `json:"allocated"`
	TimedOut        int     `json:"timedOut"`
	Seconds         float64 `json:"seconds"`
	ClaimsPerSecond float64 `json:"claimsPerSecond"`
	P50Seconds      float64 `json:"p50Seconds"`
	P99Seconds      float64 `json:"p99Seconds"`

	// Table only: why the other claims were not allocated, and the time to
	// build the session (not part of Seconds).
	Unsatisfiable int     `json:"-"`
	SearchBound   int     `json:"-"`
	Failed        int     `json:"-"`
	SetupSeconds  float64 `json:"-"`
}

// runOne runs one engine on a fresh build of one workload: claims in order,
// one Allocate call each with a per-claim timeout, each result recorded
// before the next claim, until the claims or the budget run out. The budget
// is checked before each claim, so the last claim may overrun it by up to
// the per-claim timeout.
func runOne(ctx context.Context, spec workload.Spec, name string, eng allocator.Engine, budget, timeout time.Duration, log io.Writer) (Row, error) {
	w := spec.Build()
	row := Row{Workload: spec.Name, Engine: name}

	setup := time.Now()
	sess, err := eng.NewSession(ctx, w.Inputs)
	if err != nil {
		return row, fmt.Errorf("new session: %w", err)
	}
	row.SetupSeconds = time.Since(setup).Seconds()

	var latencies []time.Duration
	start := time.Now()
	for _, claim := range w.Claims {
		if time.Since(start) >= budget {
			break
		}
		claimCtx, cancel := context.WithTimeout(ctx, timeout)
		t0 := time.Now()
		results, err := sess.Allocate(claimCtx, []*resourceapi.ResourceClaim{claim}, allocator.Options{})
		latencies = append(latencies, time.Since(t0))
		timedOut := claimCtx.Err() != nil
		cancel()
		row.Claims++
		switch {
		case err == nil:
			row.Allocated++
			done := claim.DeepCopy()
			done.Status.Allocation = results[0].Allocation
			if err := sess.Record(done); err != nil {
				return row, fmt.Errorf("record claim %s: %w", claim.Name, err)
			}
		case errors.Is(err, context.DeadlineExceeded) || timedOut:
			row.TimedOut++
		case errors.Is(err, allocator.ErrUnsatisfiable):
			row.Unsatisfiable++
		case errors.Is(err, allocator.ErrSearchBound):
			row.SearchBound++
		default:
			row.Failed++
			if row.Failed <= 3 {
				fmt.Fprintf(log, "bench:   %s on %s: claim %s: %v\n", name, spec.Name, claim.Name, err)
			}
		}
	}
	row.Seconds = time.Since(start).Seconds()
	if row.Seconds > 0 {
		row.ClaimsPerSecond = float64(row.Claims) / row.Seconds
	}
	row.P50Seconds = percentile(latencies, 0.50).Seconds()
	row.P99Seconds = percentile(latencies, 0.99).Seconds()
	return row, nil
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
