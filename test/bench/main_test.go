package main

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/native"
	"github.com/drastack/drastack/test/bench/workload"
)

func TestRunJSON(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"-format", "json", "-budget", "5s", "-min-time", "0", "-workloads", "unsatisfiable", "-engines", "native", "-modes", "central"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var rows []map[string]any
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Fatalf("output is not a JSON array: %v\n%s", err, out.String())
	}
	if len(rows) != 1 {
		t.Fatalf("want one row, got %d", len(rows))
	}
	keys := []string{"workload", "engine", "mode", "calls", "callsPerSecond", "claims", "allocated", "timedOut", "seconds", "claimsPerSecond", "p50Seconds", "p99Seconds",
		"p99AllocatedSeconds", "p99UnsatisfiableSeconds"}
	if len(rows[0]) != len(keys) {
		t.Errorf("row has fields %v, want exactly %v", rows[0], keys)
	}
	for _, k := range keys {
		if _, ok := rows[0][k]; !ok {
			t.Errorf("row lacks %q: %v", k, rows[0])
		}
	}
	if rows[0]["workload"] != "unsatisfiable" || rows[0]["engine"] != "native" || rows[0]["allocated"] != 0.0 {
		t.Errorf("unexpected row %v", rows[0])
	}
	// Every claim is unsatisfiable: its p99 is the split's, and no claim
	// was allocated.
	if rows[0]["p99AllocatedSeconds"] != 0.0 || rows[0]["p99UnsatisfiableSeconds"] == 0.0 {
		t.Errorf("split p99s wrong: %v", rows[0])
	}
}

func TestRunTableSkipsUpstreamForNativeOnlyWorkloads(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"-budget", "2s", "-min-time", "0", "-workloads", "cel-contiguous", "-engines", "upstream"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "workload") {
		t.Errorf("want only the header, got %q", out.String())
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-format", "xml"},
		{"-workloads", "nope"},
		{"-engines", "nope"},
		{"-modes", "nope"},
		{"-no-such-flag"},
	} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	tests := []struct {
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 0.5, 0},
		{ms(7), 0.99, 7 * time.Millisecond},
		{ms(4, 1, 3, 2), 0.5, 2 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 100), 0.99, 100 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 100), 0.5, 5 * time.Millisecond},
	}
	for _, tc := range tests {
		if got := percentile(tc.in, tc.p); got != tc.want {
			t.Errorf("percentile(%v, %v) = %v, want %v", tc.in, tc.p, got, tc.want)
		}
	}
}

// BenchmarkNative measures the native engine's claims loop on each
// workload, one op per claim, without the harness's budget and timeouts:
//
//	go test ./test/bench -run '^$' -bench Native -benchtime 20x
func BenchmarkNative(b *testing.B) {
	for _, spec := range workload.All() {
		b.Run(spec.Name, func(b *testing.B) {
			claims := 0
			for range b.N {
				b.StopTimer()
				w := spec.Build()
				sess, err := native.New().NewSession(context.Background(), w.Inputs)
				if err != nil {
					b.Fatal(err)
				}
				runtime.GC()
				b.StartTimer()
				for _, claim := range w.Claims {
					results, err := sess.Allocate(context.Background(), []*resourceapi.ResourceClaim{claim}, allocator.Options{})
					if err != nil {
						continue
					}
					done := claim.DeepCopy()
					done.Status.Allocation = results[0].Allocation
					if err := sess.Record(done); err != nil {
						b.Fatal(err)
					}
				}
				claims += len(w.Claims)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(claims), "ns/claim")
		})
	}
}

// TestRunRepeatedReportsTheMedian: a workload that finishes quickly is run
// again until -min-time has passed, and the row is the median run.
func TestRunRepeatedReportsTheMedian(t *testing.T) {
	spec, err := workload.Lookup("unsatisfiable")
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	row, err := runRepeated(context.Background(), spec, "native", modeCentral, time.Minute, time.Second, 20*time.Millisecond, &log)
	if err != nil {
		t.Fatal(err)
	}
	if row.Runs < 2 {
		t.Errorf("ran %d times, want repeats until 20ms were measured", row.Runs)
	}
	if row.MinClaimsPerSecond > row.ClaimsPerSecond || row.ClaimsPerSecond > row.MaxClaimsPerSecond {
		t.Errorf("median %.0f outside [%.0f, %.0f]", row.ClaimsPerSecond, row.MinClaimsPerSecond, row.MaxClaimsPerSecond)
	}
	if row.Claims != 20 || row.Unsatisfiable != 20 {
		t.Errorf("row %+v: want all 20 claims unsatisfiable", row)
	}
}

// TestEveryWorkloadRunsInBothModes is the quick mode of the whole harness:
// every workload, both engines, central and per-node, with tiny budgets.
// Each row must have made progress, a per-node row must have asked nodes
// one by one (more calls than claims where the workload has several
// nodes), and the consumable workload must allocate its first claims
// under both engines.
func TestEveryWorkloadRunsInBothModes(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"-format", "json", "-budget", "200ms", "-timeout", "100ms", "-min-time", "0"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var rows []Row
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Fatalf("output is not a JSON array of rows: %v\n%s", err, out.String())
	}
	seen := map[[3]string]Row{}
	for _, r := range rows {
		seen[[3]string{r.Workload, r.Engine, r.Mode}] = r
	}
	for _, spec := range workload.All() {
		for _, mode := range modeOrder {
			for _, eng := range engineOrder {
				if spec.NativeOnly && eng == "upstream" {
					continue
				}
				r, ok := seen[[3]string{spec.Name, eng, mode}]
				switch {
				case !ok:
					t.Errorf("%s %s %s: no row", spec.Name, eng, mode)
				case r.Calls == 0 || r.CallsPerSecond <= 0:
					t.Errorf("%s %s %s: no calls: %+v", spec.Name, eng, mode, r)
				case mode == modePerNode && r.Claims > 1 && spec.Name != "unsatisfiable" && r.Calls <= r.Claims:
					t.Errorf("%s %s per-node: %d calls for %d claims, want one per node", spec.Name, eng, r.Calls, r.Claims)
				case spec.Name == "consumable-100n" && r.Allocated == 0:
					t.Errorf("%s %s %s: nothing allocated: %+v", spec.Name, eng, mode, r)
				}
			}
		}
	}
}

func TestRunFragmentation(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"-fragmentation", "-arrivals", "300", "-sequences", "multihost", "-format", "json"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var rows []map[string]any
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Fatalf("output is not a JSON array: %v\n%s", err, out.String())
	}
	if len(rows) != 4 {
		t.Fatalf("want a row per placer, got %d", len(rows))
	}
	for _, r := range rows {
		if r["sequence"] != "multihost" || r["arrivals"] != 300.0 || r["placed"].(float64) == 0 {
			t.Errorf("unexpected row %v", r)
		}
	}
	if code := run([]string{"-fragmentation", "-sequences", "nope"}, &out, &errOut); code != 2 {
		t.Errorf("unknown sequence: exit %d, want 2", code)
	}
	if code := run([]string{"-fragmentation", "-placers", "best"}, &out, &errOut); code != 2 {
		t.Errorf("unknown placer: exit %d, want 2", code)
	}
}
