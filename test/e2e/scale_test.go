//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/drastack/drastack/internal/eventlimit"
	"github.com/drastack/drastack/test/scale"
)

// Bounds of TestScale100, from `make bench-scale` runs (docs/performance.md).
const (
	// maxStatusWrites: one status write per allocation, and a few more
	// for the conflicts and ambiguous answers a loaded API server gives.
	maxStatusWrites = 1.1
	// maxPoolWrites: the claims of a burst fill the GPU pools two by two,
	// and a pool's status is written once per batch (pool.DefaultClaimBatch),
	// so about one write per two allocations.
	maxPoolWrites = 0.75
	// maxGrowth bounds how much more each node of the second publication
	// step may add to the operator's memory than each node of the first.
	maxGrowth = 1.5
	// memorySlack absorbs what one measurement of 50 nodes' worth of
	// memory can be off by (the runtime's own structures, the pages a
	// collection leaves resident).
	memorySlack = 4 << 20
)

// TestScale100 is the small version of `make bench-scale` (package
// test/scale) on a cluster of its own: 100 kwok nodes with two simulated
// drivers each, two multi-host domains, the operator under its own RBAC in
// a child process. It asserts that every DevicePool agrees with the pure
// pool model after the publication, after a burst of 100 immediate claims
// (all allocated, no device twice) and after 10 nodes republish under a
// new generation; that the API server refused none of the operator's
// requests; that an allocation costs one claim write and no more than the
// Event budget and batched pool writes allow; and that the operator's
// memory per node does not grow with the nodes: the nodes are published
// in two steps of 50, and the second may add at most maxGrowth times what
// the first added per node.
func TestScale100(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	crd, deploy := scale.RepoDirs(filepath.Join("..", ".."))
	var logDir string
	if d := os.Getenv(LogDirEnv); d != "" {
		logDir = filepath.Join(d, "scale")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const nodes, claims = 100, 100
	rep, err := scale.Run(ctx, scale.Config{
		Nodes: nodes, Domains: 2, Claims: claims, RepublishPercent: 10, PublishSteps: 2,
		CRDDir: crd, DeployDir: deploy, LogDir: logDir, OperatorExecutable: exe,
		PhaseTimeout: 2 * time.Minute, CheckInterval: 500 * time.Millisecond,
		Logf: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Problems {
		t.Error(p)
	}
	if rep.Republished != 10 {
		t.Errorf("%d nodes republished, want 10", rep.Republished)
	}
	if want := 2*nodes + 2; rep.Pools != want {
		t.Errorf("%d DevicePools, want %d (two per node, one per domain)", rep.Pools, want)
	}
	t.Logf("timing: control plane %s, nodes %s, last slice to correct %s, burst %.0f/s p50 %s p99 %s, republish converged %s after its last slice",
		rep.ClusterStart.Round(time.Millisecond), rep.NodesReady.Round(time.Millisecond), rep.SyncCorrect.Round(time.Millisecond),
		rep.Burst.Rate, rep.Burst.P50.Round(time.Millisecond), rep.Burst.P99.Round(time.Millisecond), rep.RepublishCorrect.Round(time.Millisecond))

	checkRequestsPerAllocation(t, rep, claims)
	checkMemoryPerNode(t, rep.Memory)
}

// checkRequestsPerAllocation: the burst wrote each allocation once and
// nothing else on the claims, held its Events to the budget, and wrote
// each pool's status once per batch.
func checkRequestsPerAllocation(t *testing.T, rep *scale.Report, claims int) {
	t.Helper()
	per := rep.PerAllocation()
	if per == nil {
		t.Fatal("no claim burst phase in the report")
	}
	t.Logf("requests per allocation: %v", per)
	if got := per["patch resourceclaims/status.resource.k8s.io"]; got < 1 || got > maxStatusWrites {
		t.Errorf("%.2f status writes per allocation, want 1 to %.2f", got, maxStatusWrites)
	}
	for _, k := range []string{"patch resourceclaims.resource.k8s.io", "update resourceclaims.resource.k8s.io", "update resourceclaims/status.resource.k8s.io"} {
		if got := per[k]; got > 0 {
			t.Errorf("%.2f %q per allocation, want none (the claim webhook puts the finalizer on at creation)", got, k)
		}
	}
	burst, _ := rep.Phase(scale.PhaseBurst)
	events := burst.Requests.ByVerbResource["create events.events.k8s.io"]
	if budget := eventlimit.DefaultBurst + int(eventlimit.DefaultQPS*burst.Wall.Seconds()) + 2; events > budget {
		t.Errorf("%d Events in a burst of %d allocations (%s), want at most %d (eventlimit's burst and rate, and a summary)", events, claims, burst.Wall.Round(time.Millisecond), budget)
	}
	if got := per["patch devicepools/status.drastack.io"]; got > maxPoolWrites {
		t.Errorf("%.2f DevicePool status writes per allocation, want at most %.2f (batched per pool)", got, maxPoolWrites)
	}
}

// checkMemoryPerNode: the second step of nodes cost the operator, per
// node, no more than maxGrowth times what the first did.
func checkMemoryPerNode(t *testing.T, m scale.MemoryReport) {
	t.Helper()
	if !m.Measured || len(m.Steps) != 2 {
		t.Fatalf("operator memory not measured in two steps: %+v", m)
	}
	kib := func(b float64) string { return fmt.Sprintf("%.1f KiB", b/1024) }
	rss1, heap1 := m.PerNode(0)
	rss2, heap2 := m.PerNode(1)
	t.Logf("operator memory per node: RSS %s then %s, live heap %s then %s (before: RSS %d MiB, heap %d MiB)",
		kib(rss1), kib(rss2), kib(heap1), kib(heap2), m.Before.RSS>>20, m.Before.HeapLive>>20)
	if heap1 <= 0 {
		t.Errorf("the first step of %d nodes added %s of live heap: nothing measured", m.StepNodes[0], kib(heap1))
	}
	slack := float64(memorySlack) / float64(m.StepNodes[1])
	if heap2 > maxGrowth*heap1+slack {
		t.Errorf("live heap per node grew from %s to %s, want at most %.1fx", kib(heap1), kib(heap2), maxGrowth)
	}
	if rss2 > maxGrowth*max(rss1, heap1)+slack {
		t.Errorf("RSS per node grew from %s to %s, want at most %.1fx", kib(rss1), kib(rss2), maxGrowth)
	}
}
