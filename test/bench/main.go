// Command bench runs the allocation benchmark of issue 3: identical inputs,
// both engines in the same process, claims in the same order, every result
// recorded as allocated before the next claim, a time budget per engine and
// workload, and a per-claim timeout (kube-scheduler's default filterTimeout).
//
//	go run ./test/bench                      # table, 60 s per engine and workload
//	go run ./test/bench -quick -format json  # JSON for scripts, 20 s budgets
//	go run ./test/bench -workloads steady-500n,multihost -engines upstream
//	go run ./test/bench -modes per-node      # one call per claim and node, as Filter
//	go run ./test/bench -min-time 0 -cpuprofile cpu.out -workloads match-100n
//	go run ./test/bench -fragmentation       # issue 27: arrivals and departures, see test/bench/frag
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/native"
	"github.com/drastack/drastack/internal/allocator/upstream"
	"github.com/drastack/drastack/test/bench/workload"
)

const (
	defaultBudget       = 60 * time.Second
	quickBudget         = 20 * time.Second
	defaultClaimTimeout = 10 * time.Second
	// defaultMinTime makes a native run that finishes in milliseconds a
	// median of many runs: one GC cycle or one preemption by another
	// process would otherwise swing it by a third.
	defaultMinTime = 2 * time.Second
)

// engines are the engines the harness knows, by name. Each run gets a new
// engine, so no cache survives from one workload to the next.
var engines = map[string]func() allocator.Engine{
	"native": func() allocator.Engine { return native.New() },
	// native-pack is the native engine under the Pack placement policy,
	// the operator's default (the plain native row is FirstFit, what
	// kube-scheduler's allocator does).
	"native-pack": func() allocator.Engine { return withPolicy{native.New(), allocator.PlacementPack} },
	"upstream":    upstream.New,
}

// engineOrder is the order engines run in and appear in the output.
var engineOrder = []string{"native", "native-pack", "upstream"}

// Modes: central (one call per claim, the engine picks the node) and
// per-node (one call per claim and node, the node in the request, as
// kube-scheduler's Filter calls the allocator).
const (
	modeCentral = "central"
	modePerNode = "per-node"
)

var modeOrder = []string{modeCentral, modePerNode}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	budget := fs.Duration("budget", defaultBudget, "time budget per engine and workload (20s with -quick unless set)")
	quick := fs.Bool("quick", false, "short budgets, for CI and scripts")
	format := fs.String("format", "table", "output format: table or json")
	only := fs.String("workloads", "", "comma-separated workloads to run (default all)")
	engineList := fs.String("engines", strings.Join(engineOrder, ","), "comma-separated engines to run")
	modeList := fs.String("modes", strings.Join(modeOrder, ","), "comma-separated modes: central (the engine picks the node) and per-node (one call per claim and node, as kube-scheduler's Filter)")
	timeout := fs.Duration("timeout", defaultClaimTimeout, "per-claim timeout; a claim that hits it counts as timed out")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	minTime := fs.Duration("min-time", defaultMinTime, "repeat a workload that finishes sooner (fresh engine and session each time) until this much measured time has passed, and report the median run (also with -quick)")
	fragmentation := fs.Bool("fragmentation", false, "run the fragmentation benchmark instead (test/bench/frag): -arrivals, -load, -seed, -sequences and -placers apply")
	fragOpts := fragFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *fragmentation {
		return runFragmentation(*fragOpts, *format, stdout, stderr)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "bench: start CPU profile: %v\n", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *quick && !set["budget"] {
		*budget = quickBudget
	}
	if *format != "table" && *format != "json" {
		fmt.Fprintf(stderr, "bench: -format must be table or json, not %q\n", *format)
		return 2
	}
	specs, err := selectWorkloads(*only)
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 2
	}
	names, err := selectEngines(*engineList)
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 2
	}

	modes, err := selectModes(*modeList)
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 2
	}

	ctx := context.Background()
	var rows []Row
	for _, mode := range modes {
		for _, spec := range specs {
			for _, name := range names {
				if spec.NativeOnly && name == "upstream" {
					continue
				}
				fmt.Fprintf(stderr, "bench: %s on %s, %s (budget %s)...\n", name, spec.Name, mode, *budget)
				row, err := runRepeated(ctx, spec, name, mode, *budget, *timeout, *minTime, stderr)
				if err != nil {
					fmt.Fprintf(stderr, "bench: %s on %s: %v\n", name, spec.Name, err)
					return 1
				}
				fmt.Fprintf(stderr, "bench:   %d claims, %d allocated, %d timed out, %.1f claims/s, %.1f calls/s (median of %d runs, %.1f-%.1f claims/s)\n",
					row.Claims, row.Allocated, row.TimedOut, row.ClaimsPerSecond, row.CallsPerSecond, row.Runs, row.MinClaimsPerSecond, row.MaxClaimsPerSecond)
				rows = append(rows, row)
			}
		}
	}
	if *format == "json" {
		err = writeJSON(stdout, rows)
	} else {
		err = writeTable(stdout, rows)
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench: write output: %v\n", err)
		return 1
	}
	return 0
}

func selectWorkloads(list string) ([]workload.Spec, error) {
	if list == "" {
		return workload.All(), nil
	}
	var out []workload.Spec
	for _, name := range strings.Split(list, ",") {
		s, err := workload.Lookup(strings.TrimSpace(name))
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func selectModes(list string) ([]string, error) {
	want := map[string]bool{}
	for _, m := range strings.Split(list, ",") {
		m = strings.TrimSpace(m)
		if m != modeCentral && m != modePerNode {
			return nil, fmt.Errorf("unknown mode %q (have %s)", m, strings.Join(modeOrder, ", "))
		}
		want[m] = true
	}
	var out []string
	for _, m := range modeOrder {
		if want[m] {
			out = append(out, m)
		}
	}
	return out, nil
}

func selectEngines(list string) ([]string, error) {
	want := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if _, ok := engines[name]; !ok {
			return nil, fmt.Errorf("unknown engine %q (have %s)", name, strings.Join(engineOrder, ", "))
		}
		want[name] = true
	}
	var out []string
	for _, name := range engineOrder {
		if want[name] {
			out = append(out, name)
		}
	}
	return out, nil
}
