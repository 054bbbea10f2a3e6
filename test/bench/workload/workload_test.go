package workload

import (
	"context"
	"errors"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/native"
	"github.com/drastack/drastack/internal/allocator/upstream"
	"github.com/drastack/drastack/internal/allocator/verify"
	"github.com/drastack/drastack/internal/pool"
)

// TestWorkloadsAreWellFormed checks what the benchmark relies on: the sizes
// the issue specifies, and pools that are complete and valid (a generator
// mistake would otherwise show up as "unsatisfiable" in the numbers).
func TestWorkloadsAreWellFormed(t *testing.T) {
	want := map[string]struct{ nodes, claims, devices int }{
		"steady-500n":        {500, 4000, 4000},
		"partitionable-100n": {100, 2000, 100 * 8 * 15},
		"match-100n":         {100, 800, 100 * 24},
		"consumable-100n":    {100, 3000, 100 * 12},
		"multihost":          {128, 40, 2 * 13},
		"unsatisfiable":      {1, 20, 32},
		"cel-contiguous":     {20, 150, 10*32 + 10*16},
	}
	for _, spec := range All() {
		t.Run(spec.Name, func(t *testing.T) {
			w := spec.Build()
			if w.Name != spec.Name || w.NativeOnly != spec.NativeOnly {
				t.Errorf("built %q (native only %v) for spec %q (%v)", w.Name, w.NativeOnly, spec.Name, spec.NativeOnly)
			}
			devices := 0
			for _, p := range pool.Group(w.Inputs.Slices) {
				if !p.Allocatable() {
					t.Errorf("pool %s is not allocatable: complete %v, problems %+v", p.ID, p.Complete(), p.Problems)
				}
				for _, pr := range p.Problems {
					t.Errorf("pool %s: %s %s", p.ID, pr.Reason, pr.Message)
				}
				devices += len(p.Devices)
			}
			got := struct{ nodes, claims, devices int }{len(w.Inputs.Nodes), len(w.Claims), devices}
			if got != want[spec.Name] {
				t.Errorf("nodes, claims, devices = %v, want %v", got, want[spec.Name])
			}
			if w2 := spec.Build(); w2.Claims[0] == w.Claims[0] || w2.Inputs.Slices[0] == w.Inputs.Slices[0] {
				t.Error("two builds share objects")
			}
		})
	}
}

// TestUpstreamAllocatesFirstClaims runs the upstream engine on the first
// claims of each workload it supports and verifies every result, so the
// workloads mean what they say (selectors match, constraints satisfiable).
func TestUpstreamAllocatesFirstClaims(t *testing.T) {
	first := map[string]int{"steady-500n": 3, "partitionable-100n": 10, "match-100n": 3, "consumable-100n": 6, "multihost": 6}
	for _, spec := range All() {
		n, ok := first[spec.Name]
		if !ok {
			continue
		}
		t.Run(spec.Name, func(t *testing.T) {
			w := spec.Build()
			ctx := context.Background()
			sess, err := upstream.New().NewSession(ctx, w.Inputs)
			if err != nil {
				t.Fatal(err)
			}
			in := w.Inputs
			for _, claim := range w.Claims[:n] {
				results, err := sess.Allocate(ctx, []*resourceapi.ResourceClaim{claim}, allocator.Options{})
				if err != nil {
					t.Fatalf("claim %s: %v", claim.Name, err)
				}
				for _, e := range verify.Check(in, claim, results[0].Allocation, results[0].Node) {
					t.Errorf("claim %s: %v", claim.Name, e)
				}
				done := claim.DeepCopy()
				done.Status.Allocation = results[0].Allocation
				if err := sess.Record(done); err != nil {
					t.Fatal(err)
				}
				in.Allocated = append(in.Allocated[:len(in.Allocated):len(in.Allocated)], done)
			}
		})
	}
}

// TestNativeResultsVerify runs the native engine on the first claims of
// every workload (all of cel-contiguous, the only check of its CEL
// constraints against an independent evaluator) and verifies each result.
func TestNativeResultsVerify(t *testing.T) {
	first := map[string]int{"steady-500n": 20, "partitionable-100n": 15, "match-100n": 20, "consumable-100n": 60, "multihost": 40, "unsatisfiable": 2, "cel-contiguous": 150}
	want := map[string]int{"multihost": 7, "unsatisfiable": 0, "cel-contiguous": 96}
	for _, spec := range All() {
		t.Run(spec.Name, func(t *testing.T) {
			w := spec.Build()
			ctx := context.Background()
			sess, err := native.New().NewSession(ctx, w.Inputs)
			if err != nil {
				t.Fatal(err)
			}
			in := w.Inputs
			allocated := 0
			for _, claim := range w.Claims[:first[spec.Name]] {
				results, err := sess.Allocate(ctx, []*resourceapi.ResourceClaim{claim}, allocator.Options{})
				if errors.Is(err, allocator.ErrUnsatisfiable) {
					continue
				}
				if err != nil {
					t.Fatalf("claim %s: %v", claim.Name, err)
				}
				allocated++
				for _, e := range verify.Check(in, claim, results[0].Allocation, results[0].Node) {
					t.Errorf("claim %s: %v", claim.Name, e)
				}
				done := claim.DeepCopy()
				done.Status.Allocation = results[0].Allocation
				if err := sess.Record(done); err != nil {
					t.Fatal(err)
				}
				in.Allocated = append(in.Allocated[:len(in.Allocated):len(in.Allocated)], done)
			}
			if n, ok := want[spec.Name]; ok && allocated != n {
				t.Errorf("allocated %d claims, want %d", allocated, n)
			} else if !ok && allocated != first[spec.Name] {
				t.Errorf("allocated %d of the first %d claims, want all", allocated, first[spec.Name])
			}
		})
	}
}

// TestUnsatisfiableIsUnsatisfiable bounds the upstream search: the claim is
// provably impossible, so a bounded search must not find an allocation.
func TestUnsatisfiableIsUnsatisfiable(t *testing.T) {
	w := Unsatisfiable()
	sess, err := upstream.New().NewSession(context.Background(), w.Inputs)
	if err != nil {
		t.Fatal(err)
	}
	_, err = sess.Allocate(context.Background(), w.Claims[:1], allocator.Options{MaxSteps: 10_000})
	if !errors.Is(err, allocator.ErrSearchBound) {
		t.Errorf("want the bounded search to give up, got %v", err)
	}
}
