package frag

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteTable prints one line per sequence and placer. "vs kube" is placed
// arrivals against kube-scheduler's first fit on the same sequence.
func WriteTable(w io.Writer, seqs []*Sequence, results []Result) error {
	kube := map[string]int{}
	for _, r := range results {
		if r.Placer == KubeScheduler {
			kube[r.Sequence] = r.Placed
		}
	}
	units := map[string]string{}
	for _, s := range seqs {
		switch {
		case s.Gangs:
			units[s.Name] = "GPUs"
		case strings.HasPrefix(s.Name, "mig"):
			units[s.Name] = "slices"
		default:
			units[s.Name] = "chips"
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "sequence\tplacer\tarrivals\tevents\tplaced\tvs kube\tplaced units\trefused\twith room\tgang placeable\trefused by kind\tlargest mean\tlargest min\tlargest free\tp50\tp99\tmax\tmissed\t")
	for _, r := range results {
		vs := "-"
		if k := kube[r.Sequence]; k > 0 && r.Placer != KubeScheduler {
			vs = fmt.Sprintf("%+.1f%%", 100*float64(r.Placed-k)/float64(k))
		}
		placeable := "-"
		for _, s := range seqs {
			if s.Name == r.Sequence && s.Gangs {
				placeable = fmt.Sprint(r.RefusedPlaceable)
			}
		}
		var kinds []string
		for _, s := range seqs {
			if s.Name != r.Sequence {
				continue
			}
			for _, k := range s.Kinds {
				if n := r.RefusedByKind[k.Name]; n > 0 {
					kinds = append(kinds, fmt.Sprintf("%s:%d", strings.SplitN(k.Name, ".", 2)[0], n))
				}
			}
		}
		byKind := strings.Join(kinds, " ")
		if byKind == "" {
			byKind = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%d %s\t%d\t%d\t%s\t%s\t%.1f\t%d\t%.1f\t%s\t%s\t%s\t%d\t\n",
			r.Sequence, r.Placer, r.Arrivals, r.Events, r.Placed, vs, r.PlacedUnits, units[r.Sequence], r.Refused, r.RefusedWithRoom, placeable, byKind,
			r.LargestMean, r.LargestMin, r.BigFreeMean, dur(r.P50Seconds), dur(r.P99Seconds), dur(r.MaxSeconds), r.Missed)
	}
	return tw.Flush()
}

func dur(s float64) string {
	switch {
	case s >= 1:
		return fmt.Sprintf("%.2fs", s)
	case s >= 1e-3:
		return fmt.Sprintf("%.2fms", s*1e3)
	default:
		return fmt.Sprintf("%.0fµs", s*1e6)
	}
}
