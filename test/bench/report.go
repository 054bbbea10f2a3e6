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

// writeTable prints one line per engine and workload; the native row of a
// workload carries the native/upstream ratio of claims per second.
func writeTable(w io.Writer, rows []Row) error {
	upstream := map[string]float64{}
	for _, r := range rows {
		if r.Engine == "upstream" {
			upstream[r.Workload] = r.ClaimsPerSecond
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tengine\tclaims\tallocated\tunsat\tbound\tfailed\ttimed out\tseconds\tclaims/s\truns (claims/s range)\tp50\tp99\tp99 alloc\tp99 unsat\tsetup\tnative/upstream\t")
	for _, r := range rows {
		ratio := "-"
		if up, ok := upstream[r.Workload]; ok && r.Engine == "native" && up > 0 {
			ratio = fmt.Sprintf("%.0fx", r.ClaimsPerSecond/up)
		}
		runs := fmt.Sprintf("%d", r.Runs)
		if r.Runs > 1 {
			runs = fmt.Sprintf("%d (%.0f-%.0f)", r.Runs, r.MinClaimsPerSecond, r.MaxClaimsPerSecond)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.2f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
			r.Workload, r.Engine, r.Claims, r.Allocated, r.Unsatisfiable, r.SearchBound, r.Failed, r.TimedOut,
			r.Seconds, r.ClaimsPerSecond, runs, seconds(r.P50Seconds), seconds(r.P99Seconds),
			optSeconds(r.Allocated, r.P99AllocatedSeconds), optSeconds(r.Unsatisfiable, r.P99UnsatisfiableSeconds), seconds(r.SetupSeconds), ratio)
	}
	return tw.Flush()
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
