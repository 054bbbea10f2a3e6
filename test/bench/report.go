package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
)

func writeJSON(w io.Writer, rows []Row) error {
	if rows == nil {
		rows = []Row{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rows)
}

// writeTable prints one line per engine, workload and mode; the native
// row carries the native/upstream ratio: of claims per second in central
// mode, of calls per second in per-node mode (where p50 and p99 are per
// call).
func writeTable(w io.Writer, rows []Row) error {
	upstream := map[[2]string]float64{}
	for _, r := range rows {
		if r.Engine == "upstream" {
			upstream[[2]string{r.Workload, r.Mode}] = rate(r)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tengine\tmode\tclaims\tallocated\tunsat\tbound\tfailed\ttimed out\tseconds\tclaims/s\tcalls/s\truns (claims/s range)\tp50\tp99\tp99 alloc\tp99 unsat\tsetup\tnative/upstream\t")
	for _, r := range rows {
		ratio := "-"
		if up, ok := upstream[[2]string{r.Workload, r.Mode}]; ok && r.Engine != "upstream" && up > 0 {
			ratio = fmt.Sprintf("%.0fx", rate(r)/up)
		}
		runs := fmt.Sprintf("%d", r.Runs)
		if r.Runs > 1 {
			runs = fmt.Sprintf("%d (%.0f-%.0f)", r.Runs, r.MinClaimsPerSecond, r.MaxClaimsPerSecond)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.2f\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
			r.Workload, r.Engine, r.Mode, r.Claims, r.Allocated, r.Unsatisfiable, r.SearchBound, r.Failed, r.TimedOut,
			r.Seconds, r.ClaimsPerSecond, r.CallsPerSecond, runs, seconds(r.P50Seconds), seconds(r.P99Seconds),
			optSeconds(r.Allocated, r.P99AllocatedSeconds), optSeconds(r.Unsatisfiable, r.P99UnsatisfiableSeconds), seconds(r.SetupSeconds), ratio)
	}
	return tw.Flush()
}

// rate is what the ratio compares: claims per second in central mode,
// calls per second in per-node mode.
func rate(r Row) float64 {
	if r.Mode == modePerNode {
		return r.CallsPerSecond
	}
	return r.ClaimsPerSecond
}

// optSeconds is "-" when no claim had the outcome.
func optSeconds(n int, s float64) string {
	if n == 0 {
		return "-"
	}
	return seconds(s)
}

// seconds formats a duration in seconds with a unit people read easily.
func seconds(s float64) string {
	switch {
	case s >= 1:
		return fmt.Sprintf("%.2fs", s)
	case s >= 1e-3:
		return fmt.Sprintf("%.2fms", s*1e3)
	default:
		return fmt.Sprintf("%.0fµs", s*1e6)
	}
}
