//go:build uptable

// Package allocatortesting is upstream's allocator test table, which
// hack/upstream-table.sh copies from the module cache into a build overlay
// (it is not part of this repository). This file is the one piece of the
// package that is drastack's: how the native engine's answers are judged.
package allocatortesting

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/onsi/gomega"
	"github.com/onsi/gomega/types"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/difftest/uptable/internal"
)

// checkError replaces the table's exact error match. The native engine
// words its errors itself and reports a claim that cannot be allocated as
// allocator.ErrUnsatisfiable, where upstream returns no result and no
// error, or an error when it gives up early. So: where upstream expects an
// error, the native engine must fail too (unsatisfiable or invalid; the
// differential test compares the same way); where upstream expects none,
// the native engine may only say unsatisfiable, and the expected results
// (then none) are compared by the table as usual.
func checkError(g gomega.Gomega, err error, expect types.GomegaMatcher) {
	if expect != nil {
		g.Expect(err).To(gomega.HaveOccurred(), "upstream expects an error here")
		return
	}
	g.Expect(ignoreUnsatisfiable(err)).ToNot(gomega.HaveOccurred())
}

// ignoreUnsatisfiable is nil for allocator.ErrUnsatisfiable, which
// upstream reports as no result and no error.
func ignoreUnsatisfiable(err error) error {
	if errors.Is(err, allocator.ErrUnsatisfiable) {
		return nil
	}
	return err
}

// stepsCounted is the number of search steps a case expects, or 0 for an
// allocator that does not count them (the native engine searches in
// another way): such a case then runs without that check instead of being
// skipped.
func stepsCounted(a Allocator, steps int64) int64 {
	if _, ok := a.(internal.AllocatorExtended); !ok {
		return 0
	}
	return steps
}

// departure is a case where the native engine answers otherwise on
// purpose: why, and the results it gives instead.
type departure struct {
	why     string
	results func() []any
}

// departures are the table's cases with another answer by design.
var departures = map[string]departure{
	"partitionable-devices-multiple-counters": {
		why: "the native engine tries partitions with the smallest share of their counters first (KEP-4815: fill the smallest first); " +
			"device-3 uses less than device-2, and both results are valid",
		results: func() []any {
			return []any{allocationResult(localNodeSelector(node1),
				deviceAllocationResult(req0, driverA, pool1, device3, false),
				deviceAllocationResult(req1, driverA, pool1, device2, false))}
		},
	},
	"multi-host-resource-pool-complete-update-from-node-1-to-node-2": {
		why: "only the newest generation of a pool counts (internal/pool, as for DevicePools), so node-1 sees no device; " +
			"the case's own comment says upstream would like not to allocate here",
		results: func() []any { return nil },
	},
	"multi-host-resource-pool-incomplete-update-from-node-1-to-node-2": {
		why:     "as multi-host-resource-pool-complete-update-from-node-1-to-node-2: the newest generation, incomplete, is what counts",
		results: func() []any { return nil },
	},
}

var (
	seenMu sync.Mutex
	seen   = map[string]bool{}
)

// checkResults replaces the table's comparison of results: the expected
// ones, or for a departure the native engine's own.
func checkResults(t *testing.T, g gomega.Gomega, name string, results any, expect []any) {
	if d, ok := departures[name]; ok {
		seenMu.Lock()
		seen[name] = true
		seenMu.Unlock()
		t.Logf("departure from upstream's expectation: %s", d.why)
		expect = d.results()
	}
	g.Expect(results).To(gomega.ConsistOf(expect...))
}

// UnmetDepartures lists the departures whose case the table no longer has.
func UnmetDepartures() []string {
	seenMu.Lock()
	defer seenMu.Unlock()
	var out []string
	for name := range departures {
		if !seen[name] {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}
