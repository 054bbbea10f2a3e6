// Command scalebench runs the cluster-scale check (package test/scale)
// with the operator in a child process, and prints its figures as
// Markdown. Run it from the repository root: make bench-scale.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/drastack/drastack/test/scale"
)

func main() {
	// The same binary is the operator's child process.
	if child, err := scale.OperatorProcessMain(); child {
		if err != nil {
			fmt.Fprintln(os.Stderr, "scalebench operator:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "scalebench:", err)
		os.Exit(1)
	}
}

func run() error {
	var cfg scale.Config
	flag.IntVar(&cfg.Nodes, "nodes", 1000, "kwok nodes")
	flag.IntVar(&cfg.Domains, "domains", 4, "multi-host domains of 16 hosts")
	flag.IntVar(&cfg.Claims, "claims", 0, "immediate claims in the burst, one whole GPU each (default: one per node)")
	flag.IntVar(&cfg.RepublishPercent, "republish-percent", 10, "percentage of nodes that republish under a new generation")
	flag.DurationVar(&cfg.NodeHeartbeat, "node-heartbeat", time.Minute, "kwok node heartbeat and lease renewal interval")
	flag.DurationVar(&cfg.PhaseTimeout, "phase-timeout", 20*time.Minute, "bound of each wait")
	flag.StringVar(&cfg.LogDir, "log-dir", "", "keep component and operator logs here")
	flag.StringVar(&cfg.HeapProfile, "heap-profile", "", "write the operator's in-use heap profile here when it stops")
	flag.StringVar(&cfg.CPUProfile, "cpu-profile", "", "write the operator's CPU profile of the whole run here")
	root := flag.String("root", ".", "repository root (for config/)")
	timeout := flag.Duration("timeout", 90*time.Minute, "bound of the whole run")
	flag.Parse()
	cfg.CRDDir, cfg.DeployDir = scale.RepoDirs(*root)
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cfg.OperatorExecutable = exe
	cfg.Logf = func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
	if cfg.LogDir != "" {
		if err := os.MkdirAll(cfg.LogDir, 0o755); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	rep, err := scale.Run(ctx, cfg)
	if err != nil {
		return err
	}
	write(os.Stdout, rep)
	if len(rep.Problems) > 0 {
		return fmt.Errorf("%d problem(s)", len(rep.Problems))
	}
	return nil
}

func write(w io.Writer, r *scale.Report) {
	c := r.Config
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	fmt.Fprintf(w, "Machine: %d CPUs (GOMAXPROCS %d), load average %s before, %s after.\n\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), r.LoadBefore, r.LoadAfter)
	fmt.Fprintf(w, "| measure | value |\n|---|---|\n")
	rows := [][2]string{
		{"nodes / multi-host domains", fmt.Sprintf("%d / %d (16 hosts each)", c.Nodes, c.Domains)},
		{"pools / slices / devices", fmt.Sprintf("%d / %d / %d", r.Pools, r.Slices, r.Devices)},
		{"control plane up / nodes Ready", ms(r.ClusterStart) + " / " + ms(r.NodesReady)},
		{"simulated driver: start to last slice", ms(r.Publish)},
		{"last slice to every DevicePool correct", ms(r.SyncCorrect)},
		{fmt.Sprintf("burst of %d immediate claims: allocations per second", c.Claims), fmt.Sprintf("%.1f (all in %s)", r.BurstRate, ms(r.BurstWall))},
		{"burst latency p50 / p99 / max (create to allocation seen)", ms(r.BurstP50) + " / " + ms(r.BurstP99) + " / " + ms(r.BurstMax)},
		{"last allocation to every DevicePool correct", ms(r.BurstPoolsCorrect)},
		{fmt.Sprintf("republish of %d nodes: last slice to correct / relabel to correct", r.Republished), ms(r.RepublishCorrect) + " / " + ms(r.RepublishFromEdit)},
	}
	if r.Usage.Measured {
		rows = append(rows, [2]string{"operator CPU time / peak RSS", fmt.Sprintf("%.1f s / %.0f MiB", r.Usage.CPU.Seconds(), float64(r.Usage.PeakRSS)/(1<<20))})
	}
	rows = append(rows, [2]string{"operator API requests", fmt.Sprint(r.Requests.Total())})
	for _, row := range rows {
		fmt.Fprintf(w, "| %s | %s |\n", row[0], row[1])
	}
	fmt.Fprintf(w, "\n| phase | wall | operator CPU | operator requests |\n|---|---|---|---|\n")
	for _, p := range r.Phases {
		fmt.Fprintf(w, "| %s | %s | %.1f s | %d |\n", p.Name, ms(p.Wall), p.CPU.Seconds(), p.Requests.Total())
	}
	fmt.Fprintf(w, "\n| operator requests by verb and resource | %s |\n|---|%s\n", strings.Join(phaseNames(r), " | "), strings.Repeat("---|", len(r.Phases)+1))
	for _, k := range r.Requests.Sorted() {
		cells := []string{fmt.Sprint(r.Requests.ByVerbResource[k])}
		for _, p := range r.Phases {
			cells = append(cells, fmt.Sprint(p.Requests.ByVerbResource[k]))
		}
		fmt.Fprintf(w, "| %s | %s |\n", k, strings.Join(cells, " | "))
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "\nPROBLEM: %s\n", p)
	}
}

func phaseNames(r *scale.Report) []string {
	names := []string{"total"}
	for _, p := range r.Phases {
		names = append(names, p.Name)
	}
	return names
}
