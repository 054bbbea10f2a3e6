//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/drastack/drastack/test/scale"
)

// TestScale100 is the small version of `make bench-scale` (package
// test/scale) on a cluster of its own: 100 kwok nodes with two simulated
// drivers each, two multi-host domains, the operator under its own RBAC.
// It asserts correctness only: every DevicePool agrees with the pure pool
// model after the publication, after a burst of 100 immediate claims (all
// allocated, no device twice) and after 10 nodes republish under a new
// generation; the API server refused none of the operator's requests.
func TestScale100(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	crd, deploy := scale.RepoDirs(filepath.Join("..", ".."))
	var logDir string
	if d := os.Getenv(LogDirEnv); d != "" {
		logDir = filepath.Join(d, "scale")
	}
	rep, err := scale.Run(ctx, scale.Config{
		Nodes: 100, Domains: 2, Claims: 100, RepublishPercent: 10,
		CRDDir: crd, DeployDir: deploy, LogDir: logDir,
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
	if want := 2*100 + 2; rep.Pools != want {
		t.Errorf("%d DevicePools, want %d (two per node, one per domain)", rep.Pools, want)
	}
	t.Logf("timing: control plane %s, nodes %s, last slice to correct %s, burst %.0f/s p50 %s p99 %s, republish converged %s after its last slice",
		rep.ClusterStart.Round(time.Millisecond), rep.NodesReady.Round(time.Millisecond), rep.SyncCorrect.Round(time.Millisecond),
		rep.BurstRate, rep.BurstP50.Round(time.Millisecond), rep.BurstP99.Round(time.Millisecond), rep.RepublishCorrect.Round(time.Millisecond))
}
