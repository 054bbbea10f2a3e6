//go:build e2e

package e2e

import (
	"context"
	"sync"
	"testing"

	"github.com/drastack/drastack/internal/operator"
	"github.com/drastack/drastack/test/cluster"
)

// runOperator runs the operator in-process, exactly as cmd/manager wires
// it, and returns the func that stops it (safe to call twice). probeNS is
// an existing namespace for the cluster probe's dry-run claims.
func runOperator(ctx context.Context, t *testing.T, c *cluster.Cluster, probeNS string) func() {
	t.Helper()
	mgr, err := operator.New(c.Config, operator.Options{
		MetricsAddr: "0", ProbeAddr: "0", ProbeNamespace: probeNS,
		// Suites run one after another in this process, each with a manager.
		SkipNameValidation: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	opCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- mgr.Start(opCtx) }()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("operator: %v", err)
			}
		})
	}
}
