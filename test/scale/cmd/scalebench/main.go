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
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strconv"
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
	sizes := flag.String("nodes", "1000", "kwok nodes; a comma-separated list runs one cluster per size, one after the other, and prints one table each")
	flag.IntVar(&cfg.Domains, "domains", 4, "multi-host domains of 16 hosts")
	flag.IntVar(&cfg.Claims, "claims", 0, "immediate claims in the burst, one whole GPU each (default: one per node)")
	flag.IntVar(&cfg.RepublishPercent, "republish-percent", 10, "percentage of nodes that republish under a new generation")
	flag.BoolVar(&cfg.SchedulerBurst, "scheduler-burst", true, "after the operator's burst, as many pods whose NIC claims kube-scheduler allocates, with the ratio of the two")
	flag.Func("scheduler-qps", "kube-scheduler's client-side limit of requests per second (default: the operator's)", func(v string) error {
		f, err := strconv.ParseFloat(v, 32)
		cfg.SchedulerQPS = float32(f)
		return err
	})
	flag.IntVar(&cfg.SchedulerQPSBurst, "scheduler-qps-burst", 0, "kube-scheduler's client-side burst (default: the operator's)")
	flag.IntVar(&cfg.PublishSteps, "publish-steps", 1, "create the nodes in this many steps, measuring the operator's memory after each")
	flag.DurationVar(&cfg.NodeHeartbeat, "node-heartbeat", time.Minute, "kwok node heartbeat and lease renewal interval")
	flag.DurationVar(&cfg.PhaseTimeout, "phase-timeout", 20*time.Minute, "bound of each wait")
	flag.Func("kube-api-qps", "the operator's client-side limit of requests per second (default: the operator's; negative: none)", func(v string) error {
		f, err := strconv.ParseFloat(v, 32)
		cfg.Tuning.KubeAPIQPS = float32(f)
		return err
	})
	flag.IntVar(&cfg.Tuning.KubeAPIBurst, "kube-api-burst", 0, "the operator's client-side burst (default: the operator's)")
	flag.IntVar(&cfg.Tuning.ClaimWorkers, "claim-workers", 0, "immediate claims the operator allocates at once (default: the operator's)")
	flag.Func("memory-limit-mib", "the operator's container memory limit (default: the Deployment's; -1: none)", func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		cfg.Tuning.MemoryLimit = n << 20
		if n < 0 {
			cfg.Tuning.MemoryLimit = -1
		}
		return err
	})
	flag.IntVar(&cfg.Tuning.PoolWorkers, "pool-workers", 0, "pools the operator validates and writes at once (default: the operator's)")
	logDir := flag.String("log-dir", "", "keep component and operator logs here (one folder per size)")
	heap := flag.String("heap-profile", "", "write the operator's in-use heap profile here when it stops (suffixed with the size)")
	cpu := flag.String("cpu-profile", "", "write the operator's CPU profile of the whole run here (suffixed with the size)")
	harnessHeap := flag.String("harness-heap-profile", "", "write this process's in-use heap profile here after the publication (suffixed with the size)")
	harnessLimit := flag.Int64("harness-memory-limit-mib", 0, "soft memory limit of this process (the simulated driver and the checks; not the operator), for sizes whose harness would not fit otherwise")
	root := flag.String("root", ".", "repository root (for config/)")
	timeout := flag.Duration("timeout", 3*time.Hour, "bound of the whole run")
	flag.Parse()
	if *harnessLimit > 0 {
		debug.SetMemoryLimit(*harnessLimit << 20)
	}
	var nodes []int
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return fmt.Errorf("-nodes %q: %q is not a positive number", *sizes, f)
		}
		nodes = append(nodes, n)
	}
	cfg.CRDDir, cfg.DeployDir = scale.RepoDirs(*root)
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cfg.OperatorExecutable = exe
	cfg.Logf = func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var reports []*scale.Report
	problems := 0
	for _, n := range nodes {
		c := cfg
		c.Nodes = n
		suffix := func(path string) string {
			if path == "" || len(nodes) == 1 {
				return path
			}
			ext := filepath.Ext(path)
			return fmt.Sprintf("%s-%d%s", strings.TrimSuffix(path, ext), n, ext)
		}
		c.HeapProfile, c.CPUProfile = suffix(*heap), suffix(*cpu)
		if *logDir != "" {
			c.LogDir = *logDir
			if len(nodes) > 1 {
				c.LogDir = filepath.Join(*logDir, strconv.Itoa(n))
			}
			if err := os.MkdirAll(c.LogDir, 0o755); err != nil {
				return err
			}
		}
		if *harnessHeap != "" {
			path := suffix(*harnessHeap)
			c.PhaseEnded = func(phase string) {
				if strings.HasPrefix(phase, "publish") {
					if err := writeHeap(path); err != nil {
						cfg.Logf("harness heap profile: %v", err)
					}
				}
			}
		}
		cfg.Logf("%d nodes", n)
		rep, err := scale.Run(ctx, c)
		if err != nil {
			return fmt.Errorf("%d nodes: %w", n, err)
		}
		write(os.Stdout, rep)
		reports = append(reports, rep)
		problems += len(rep.Problems)
	}
	growth(os.Stdout, reports)
	if problems > 0 {
		return fmt.Errorf("%d problem(s)", problems)
	}
	return nil
}

// writeHeap writes this process's in-use heap profile.
func writeHeap(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func kib(b float64) string { return fmt.Sprintf("%.1f KiB", b/1024) }

// write prints one run as Markdown: the summary table, the processes by
// phase, and the operator's requests by verb and resource.
func write(w io.Writer, r *scale.Report) {
	c := r.Config
	fmt.Fprintf(w, "### %d nodes\n\n", c.Nodes)
	fmt.Fprintf(w, "Machine: %d CPUs (GOMAXPROCS %d), load average %s before, %s after.\n\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), r.LoadBefore, r.LoadAfter)
	fmt.Fprintf(w, "| measure | value |\n|---|---|\n")
	rows := [][2]string{
		{"nodes / multi-host domains / publication steps", fmt.Sprintf("%d / %d (16 hosts each) / %d", c.Nodes, c.Domains, c.PublishSteps)},
		{"operator tuning", c.Tuning.String()},
		{"pools / slices / devices", fmt.Sprintf("%d / %d / %d", r.Pools, r.Slices, r.Devices)},
		{"control plane up / nodes Ready", ms(r.ClusterStart) + " / " + ms(r.NodesReady)},
		{"simulated driver: start to last slice", ms(r.Publish)},
		{"**pools right after the last slice**", ms(r.SyncCorrect)},
		{fmt.Sprintf("**burst of %d immediate claims: claims/s** (first create to last allocation seen)", c.Claims), fmt.Sprintf("%.1f (all in %s; created in %s)", r.Burst.Rate, ms(r.Burst.Wall), ms(r.Burst.Create))},
		{"**burst latency p50 / p99** / max (create to allocation seen)", ms(r.Burst.P50) + " / " + ms(r.Burst.P99) + " / " + ms(r.Burst.Max)},
		{"**requests per allocation** (operator requests in the burst / claims)", perAllocation(r)},
		{"pools right after the last allocation", ms(r.BurstPoolsCorrect)},
	}
	if b := r.SchedulerBurst; b != nil {
		rows = append(rows,
			[2]string{fmt.Sprintf("**kube-scheduler: burst of %d pods**, each with its own claim for one NIC: claims/s (first claim created to last allocation seen; kube-scheduler's client limit %g/s, burst %d)", b.Claims, c.SchedulerQPS, c.SchedulerQPSBurst),
				fmt.Sprintf("%.1f (all in %s; created in %s); **operator / kube-scheduler: %.2fx**", b.Rate, ms(b.Wall), ms(b.Create), r.Burst.Rate/b.Rate)},
			[2]string{"kube-scheduler: latency p50 / p99 / max (claim create to allocation seen)", fmt.Sprintf("%s / %s / %s; operator / kube-scheduler p99: %.2fx", ms(b.P50), ms(b.P99), ms(b.Max), r.Burst.P99.Seconds()/b.P99.Seconds())})
	}
	rows = append(rows, [][2]string{
		{fmt.Sprintf("**relabel of %d nodes: pools right** after the last slice / after the relabel", r.Republished), ms(r.RepublishCorrect) + " / " + ms(r.RepublishFromEdit)},
		{"relabel: the simulated driver's first / last slice after the relabel", ms(r.RepublishFirstSlice) + " / " + ms(r.RepublishLastSlice)},
	}...)
	if r.Usage.Measured {
		var cpu, rss []string
		var anon int64
		for _, p := range r.Phases {
			u := p.Processes[scale.Operator]
			cpu = append(cpu, fmt.Sprintf("%.1f s", u.CPU.Seconds()))
			rss = append(rss, mib(u.PeakRSS)+" ("+mib(u.PeakAnon)+")")
			anon = max(anon, u.PeakAnon)
		}
		rows = append(rows,
			[2]string{"**operator CPU**: whole run (" + strings.Join(phaseNames(r), " / ") + ")", fmt.Sprintf("%.1f s (%s)", r.Usage.CPU.Seconds(), strings.Join(cpu, " / "))},
			[2]string{"**operator peak RSS** (anonymous: heap and stacks): whole run; " + strings.Join(phaseNames(r), " / "), fmt.Sprintf("%s (%s); %s", mib(r.Usage.PeakRSS), mib(anon), strings.Join(rss, " / "))})
	}
	if m := r.Memory; m.Measured {
		after := make([]string, len(m.Steps))
		for i, s := range m.Steps {
			after[i] = mib(s.RSS) + " / " + mib(s.HeapLive)
		}
		rss, heap := m.PerNodeAll()
		perNode := fmt.Sprintf("%s / %s", kib(rss), kib(heap))
		if len(m.Steps) > 1 {
			var steps []string
			for i := range m.Steps {
				rss, heap := m.PerNode(i)
				steps = append(steps, fmt.Sprintf("step %d: %s / %s", i+1, kib(rss), kib(heap)))
			}
			perNode += " (" + strings.Join(steps, "; ") + ")"
		}
		rows = append(rows,
			[2]string{"operator RSS / live heap after a full GC: before the publication; after it", mib(m.Before.RSS) + " / " + mib(m.Before.HeapLive) + "; " + strings.Join(after, "; ")},
			[2]string{"**operator memory per node** (RSS / live heap after a full GC, publication)", perNode})
	}
	rows = append(rows, [2]string{"operator API requests", fmt.Sprint(r.Requests.Total())})
	for _, row := range rows {
		fmt.Fprintf(w, "| %s | %s |\n", row[0], row[1])
	}

	fmt.Fprintf(w, "\n| process: CPU (cores) / peak RSS | %s |\n|---|%s\n", strings.Join(phaseWalls(r), " | "), strings.Repeat("---|", len(r.Phases)))
	for _, name := range processNames(r) {
		var cells []string
		for _, p := range r.Phases {
			u, ok := p.Processes[name]
			if !ok {
				cells = append(cells, "-")
				continue
			}
			cells = append(cells, fmt.Sprintf("%.1f s (%.2f) / %s", u.CPU.Seconds(), u.CPU.Seconds()/p.Wall.Seconds(), mib(u.PeakRSS)))
		}
		fmt.Fprintf(w, "| %s | %s |\n", name, strings.Join(cells, " | "))
	}

	names := append([]string{"total"}, phaseNames(r)...)
	fmt.Fprintf(w, "\n| operator requests by verb and resource | %s |\n|---|%s\n", strings.Join(names, " | "), strings.Repeat("---|", len(r.Phases)+1))
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
	fmt.Fprintln(w)
}

// perAllocation lists the requests per allocation of the burst, most
// first, with their sum.
func perAllocation(r *scale.Report) string {
	per := r.PerAllocation()
	if per == nil {
		return "-"
	}
	p, _ := r.Phase(scale.PhaseBurst)
	sum := 0.0
	var parts []string
	for _, k := range p.Requests.Sorted() {
		sum += per[k]
		if per[k] >= 0.005 {
			parts = append(parts, fmt.Sprintf("%s %.2f", k, per[k]))
		}
	}
	return fmt.Sprintf("%.2f: %s", sum, strings.Join(parts, ", "))
}

// growth compares the operator's memory after the publication across
// sizes: what each node beyond the smallest size added.
func growth(w io.Writer, reports []*scale.Report) {
	if len(reports) < 2 {
		return
	}
	first := reports[0]
	if !first.Memory.Measured || len(first.Memory.Steps) == 0 {
		return
	}
	a := first.Memory.Steps[len(first.Memory.Steps)-1]
	for _, r := range reports[1:] {
		if !r.Memory.Measured || len(r.Memory.Steps) == 0 {
			continue
		}
		b := r.Memory.Steps[len(r.Memory.Steps)-1]
		n := float64(r.Config.Nodes - first.Config.Nodes)
		fmt.Fprintf(w, "From %d to %d nodes the operator's memory after the publication (after a full GC) grew by %s RSS and %s live heap per node; its peak RSS went from %s to %s.\n\n",
			first.Config.Nodes, r.Config.Nodes, kib(float64(b.RSS-a.RSS)/n), kib(float64(b.HeapLive-a.HeapLive)/n), mib(first.Usage.PeakRSS), mib(r.Usage.PeakRSS))
	}
}

func phaseNames(r *scale.Report) []string {
	var names []string
	for _, p := range r.Phases {
		names = append(names, p.Name)
	}
	return names
}

func phaseWalls(r *scale.Report) []string {
	var names []string
	for _, p := range r.Phases {
		names = append(names, fmt.Sprintf("%s (%s)", p.Name, p.Wall.Round(100*time.Millisecond)))
	}
	return names
}

// processNames lists the processes of a run: the operator first, the
// harness last, the control plane between by name.
func processNames(r *scale.Report) []string {
	seen := map[string]bool{}
	var names []string
	for _, p := range r.Phases {
		for name := range p.Processes {
			if !seen[name] && name != scale.Operator && name != scale.Harness {
				seen[name] = true
				names = append(names, name)
			}
		}
	}
	sort.Strings(names)
	if seen[scale.Operator] || r.Usage.Measured {
		names = append([]string{scale.Operator}, names...)
	}
	return append(names, scale.Harness)
}
