package scenarios

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
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
	for _, path := range dirs {
		sc, err := loadScenario(filepath.Dir(path))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range engines() {
			t.Run(sc.name+"/"+e.Name(), func(t *testing.T) { runScenario(t, e, sc) })
		}
	}
}

func runScenario(t *testing.T, e allocator.Engine, sc *scenario) {
	ctx := context.Background()
	s, err := e.NewSession(ctx, sc.inputs)
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	for _, st := range sc.expect.Steps {
		c, ok := sc.claims[st.Claim]
		if !ok {
			t.Fatalf("expect.yaml names claim %q that cluster.yaml does not have", st.Claim)
		}
		res, err := s.Allocate(ctx, []*resourceapi.ResourceClaim{c}, allocator.Options{Node: st.OnNode})
		if errors.Is(err, allocator.ErrNotSupported) {
			// An engine may lack a feature (upstream: CEL constraints); it
			// must say so instead of answering wrongly.
			t.Logf("claim %s: %v", st.Claim, err)
			return
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
		done := c.DeepCopy()
		done.Status.Allocation = res[0].Allocation
		if err := s.Record(done); err != nil {
			t.Fatalf("Record %s: %v", st.Claim, err)
		}
	}
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
