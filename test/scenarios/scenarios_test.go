package scenarios

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/verify"
)

// TestScenarios runs the worked examples of the seed KEPs on every engine.
func TestScenarios(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(".", "*", "cluster.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 5 {
		t.Fatalf("found %d scenarios, want at least 5", len(dirs))
	}
	refused := map[string]int{} // engine -> claims answered ErrNotSupported
	for _, path := range dirs {
		sc, err := loadScenario(filepath.Dir(path))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range engines() {
			t.Run(sc.name+"/"+e.Name(), func(t *testing.T) { refused[e.Name()] += runScenario(t, e, sc) })
		}
	}
	// The CEL scenarios must have put every engine without CEL constraints
	// to the test, or the ErrNotSupported assertion checks nothing.
	for _, e := range engines() {
		if !e.celConstraints && refused[e.Name()] == 0 {
			t.Errorf("%s: no scenario claim with CEL constraints was tried", e.Name())
		}
	}
}

// runScenario runs the steps of sc on e and returns how many claims e
// refused as not supported.
func runScenario(t *testing.T, e engineUnderTest, sc *scenario) int {
	ctx := context.Background()
	s, err := e.NewSession(ctx, sc.inputs)
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	checker := verify.New(sc.inputs)
	allocated := slices.Clone(sc.inputs.Allocated)
	unsupported, refused := "", 0
	for _, st := range sc.expect.Steps {
		c, ok := sc.claims[st.Claim]
		if !ok {
			t.Fatalf("expect.yaml names claim %q that cluster.yaml does not have", st.Claim)
		}
		res, err := s.Allocate(ctx, []*resourceapi.ResourceClaim{c}, allocator.Options{Node: st.OnNode})
		if _, hasCEL := c.Annotations[allocator.CELConstraintsAnnotation]; hasCEL && !e.celConstraints {
			// The engine lacks CEL constraints: it must say so instead of
			// answering without them.
			if !errors.Is(err, allocator.ErrNotSupported) {
				t.Fatalf("claim %s has CEL constraints: want ErrNotSupported from %s, got %v (%v)", st.Claim, e.Name(), err, describe(res))
			}
			unsupported = st.Claim
			refused++
			continue
		}
		if unsupported != "" {
			// Later steps depend on the state the unsupported claim would
			// have left; a scenario must not mix the two.
			t.Fatalf("claim %s follows claim %s, which %s does not support: split the scenario", st.Claim, unsupported, e.Name())
		}
		if st.Unsatisfiable {
			if !errors.Is(err, allocator.ErrUnsatisfiable) {
				t.Fatalf("claim %s: want unsatisfiable, got %v (%v)", st.Claim, err, describe(res))
			}
			continue
		}
		if err != nil {
			t.Fatalf("claim %s: %v", st.Claim, err)
		}
		got := describe(res)
		want := slices.Sorted(slices.Values(st.Devices))
		if !slices.Equal(got, want) {
			t.Errorf("claim %s: devices %v, want %v", st.Claim, got, want)
		}
		if st.Node != nil && res[0].Node != *st.Node {
			t.Errorf("claim %s: node %q, want %q", st.Claim, res[0].Node, *st.Node)
		}
		if len(st.NodeSelectorValues) > 0 {
			checkSelector(t, st, res[0].Allocation)
		}
		node := st.OnNode
		if node == "" {
			node = res[0].Node
		}
		for _, v := range checker.Check(c, res[0].Allocation, node) {
			t.Errorf("claim %s: verifier: %v", st.Claim, v)
		}
		done := c.DeepCopy()
		done.Status.Allocation = res[0].Allocation
		if err := s.Record(done); err != nil {
			t.Fatalf("Record %s: %v", st.Claim, err)
		}
		// The verifier checks each step against the state it was made in.
		allocated = append(allocated, done)
		in := sc.inputs
		in.Allocated = allocated
		checker = verify.New(in)
	}
	return refused
}

func describe(res []allocator.Result) []string {
	var out []string
	for _, r := range res {
		for _, d := range r.Allocation.Devices.Results {
			out = append(out, d.Request+"="+d.Driver+"/"+d.Pool+"/"+d.Device)
		}
	}
	slices.Sort(out)
	return out
}

func checkSelector(t *testing.T, st step, a *resourceapi.AllocationResult) {
	t.Helper()
	if a.NodeSelector == nil || len(a.NodeSelector.NodeSelectorTerms) != 1 {
		t.Fatalf("claim %s: node selector %v, want one term", st.Claim, a.NodeSelector)
	}
	var values []string
	for _, r := range a.NodeSelector.NodeSelectorTerms[0].MatchExpressions {
		values = append(values, r.Values...)
	}
	if !slices.Equal(slices.Sorted(slices.Values(values)), slices.Sorted(slices.Values(st.NodeSelectorValues))) {
		t.Errorf("claim %s: node selector values %v, want %v", st.Claim, values, st.NodeSelectorValues)
	}
}
