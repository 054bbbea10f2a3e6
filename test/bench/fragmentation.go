package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/drastack/drastack/test/bench/frag"
)

// fragOptions are the flags of -fragmentation.
type fragOptions struct {
	opts      frag.Options
	sequences string
	placers   string
}

func fragFlags(fs *flag.FlagSet) *fragOptions {
	o := &fragOptions{}
	fs.IntVar(&o.opts.Arrivals, "arrivals", 10_000, "-fragmentation: arrivals per sequence")
	fs.Float64Var(&o.opts.Load, "load", 1.0, "-fragmentation: offered load (mean capacity asked for over the cluster's)")
	fs.Int64Var(&o.opts.Seed, "seed", 27, "-fragmentation: seed of the arrivals")
	fs.StringVar(&o.sequences, "sequences", "", "-fragmentation: comma-separated sequences (default all)")
	fs.StringVar(&o.placers, "placers", strings.Join(frag.Placers, ","), "-fragmentation: comma-separated placers")
	return o
}

// runFragmentation replays every sequence with every placer, one after the
// other in this process, and prints the table (or JSON).
func runFragmentation(o fragOptions, format string, stdout, stderr io.Writer) int {
	seqs := frag.Sequences(o.opts)
	if o.sequences != "" {
		want := strings.Split(o.sequences, ",")
		seqs = slices.DeleteFunc(seqs, func(s *frag.Sequence) bool { return !slices.Contains(want, s.Name) })
		if len(seqs) == 0 {
			fmt.Fprintf(stderr, "bench: no sequence named in %q\n", o.sequences)
			return 2
		}
	}
	placers := strings.Split(o.placers, ",")
	for _, p := range placers {
		if !slices.Contains(frag.Placers, p) {
			fmt.Fprintf(stderr, "bench: unknown placer %q (have %s)\n", p, strings.Join(frag.Placers, ", "))
			return 2
		}
	}
	var results []frag.Result
	for _, s := range seqs {
		for _, p := range placers {
			fmt.Fprintf(stderr, "bench: %s with %s (%d arrivals, load %.2f)...\n", s.Name, p, len(s.Arrivals), s.Load)
			r, err := frag.Run(context.Background(), s, p)
			if err != nil {
				fmt.Fprintf(stderr, "bench: %v\n", err)
				return 1
			}
			fmt.Fprintf(stderr, "bench:   %d placed, %d refused, %.1fs\n", r.Placed, r.Refused, r.Seconds)
			results = append(results, r)
		}
	}
	var err error
	if format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(results)
	} else {
		err = frag.WriteTable(stdout, seqs, results)
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench: write output: %v\n", err)
		return 1
	}
	return 0
}
