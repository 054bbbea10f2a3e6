package difftest

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/native"
	"github.com/drastack/drastack/internal/allocator/upstream"
)

var (
	casesFlag = flag.Int("difftest.cases", 0, "number of random cases (default 300, or $DIFFTEST_CASES); 10000 for the long run")
	seedFlag  = flag.Uint64("difftest.seed", 1, "seed of the first case; case i uses seed+i")
	dumpFlag  = flag.String("difftest.dump", "", "directory to write failing cases to as YAML (for kubectl dra simulate)")
	gatesFlag = flag.String("difftest.features", "", "feature gates of the generated cases, GATE=true|false,... applied to allocator.DefaultFeatures (all=true turns every gate on)")
)

// caseFeatures are the feature gates -difftest.features asks for.
func caseFeatures(t testing.TB) allocator.Features {
	f, err := allocator.ParseFeatures(allocator.DefaultFeatures(), *gatesFlag)
	if err != nil {
		t.Fatalf("-difftest.features: %v", err)
	}
	return f
}

const defaultCases = 300

func numCases(t testing.TB) int {
	if *casesFlag > 0 {
		return *casesFlag
	}
	if v := os.Getenv("DIFFTEST_CASES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("DIFFTEST_CASES=%q is not a positive number", v)
		}
		return n
	}
	return defaultCases
}

var engineNames = [2]string{"native", "upstream"}

func engines() [2]allocator.Engine { return [2]allocator.Engine{native.New(), upstream.New()} }

// runCase runs both engines on one case and returns the problems found.
func runCase(t testing.TB, eng [2]allocator.Engine, c *Case) ([]Problem, Stats) {
	t.Helper()
	ctx := context.Background()
	var out [2][]Outcome
	for i, e := range eng {
		o, err := Run(ctx, e, c)
		if err != nil {
			t.Fatalf("seed %d: %v", c.Seed, err)
		}
		out[i] = o
	}
	return Compare(c, engineNames, out[0], out[1])
}

// TestDifferential: native and upstream agree claim by claim, and the
// verifier accepts every allocation of either. Reproduce a failure with
// -difftest.seed=SEED -difftest.cases=1.
func TestDifferential(t *testing.T) {
	n := numCases(t)
	eng := engines()
	features := caseFeatures(t)
	t.Logf("feature gates: %s", features)
	var total Stats
	failed := 0
	for i := 0; i < n; i++ {
		c := GenerateWith(*seedFlag+uint64(i), features)
		problems, st := runCase(t, eng, c)
		total.Claims += st.Claims
		total.Agreed += st.Agreed
		total.Allocated += st.Allocated
		total.Unsatisfiable += st.Unsatisfiable
		total.Inconclusive += st.Inconclusive
		total.Aborted += st.Aborted
		total.OneEngine += st.OneEngine
		if len(problems) == 0 {
			continue
		}
		failed++
		for _, p := range problems {
			if failed <= 20 {
				t.Error(p)
			}
		}
		dump(t, c)
	}
	t.Logf("%d cases, %d claims: %d agreed (%d allocated, %d unsatisfiable, of which %d where upstream stopped early at an All request), %d with CEL constraints (native only, verified), %d inconclusive, %d cases with problems",
		n, total.Claims, total.Agreed, total.Allocated, total.Unsatisfiable, total.Aborted, total.OneEngine, total.Inconclusive, failed)
	// Both outcomes must occur, or the generator tests nothing.
	if total.Allocated == 0 || total.Unsatisfiable == 0 {
		t.Errorf("generator is degenerate: %d allocated, %d unsatisfiable", total.Allocated, total.Unsatisfiable)
	}
	if total.Inconclusive*100 > total.Claims {
		t.Errorf("%d of %d claims inconclusive (search bound or timeout): the comparison covers too little", total.Inconclusive, total.Claims)
	}
}

// FuzzDifferential explores seeds beyond the fixed range:
//
//	go test ./internal/allocator/difftest -run '^$' -fuzz FuzzDifferential -fuzztime 20s
func FuzzDifferential(f *testing.F) {
	for _, s := range []uint64{1, 2, 3, 42, 1 << 40} {
		f.Add(s)
	}
	eng := engines()
	// The seed also picks the gate set: the defaults, every gate on, or
	// the alpha gates off (beta and GA on).
	gateSets := []allocator.Features{allocator.DefaultFeatures(), allocator.AllFeatures(), fuzzAlphaOff()}
	f.Fuzz(func(t *testing.T, seed uint64) {
		c := GenerateWith(seed, gateSets[seed%uint64(len(gateSets))])
		problems, _ := runCase(t, eng, c)
		for _, p := range problems {
			t.Error(p)
		}
		if len(problems) > 0 {
			dump(t, c)
		}
	})
}

func dump(t testing.TB, c *Case) {
	t.Helper()
	if *dumpFlag == "" {
		return
	}
	data, err := Marshal(c)
	if err != nil {
		t.Errorf("dump seed %d: %v", c.Seed, err)
		return
	}
	path := filepath.Join(*dumpFlag, "seed-"+strconv.FormatUint(c.Seed, 10)+".yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Errorf("dump seed %d: %v", c.Seed, err)
		return
	}
	t.Logf("wrote %s", path)
}

// fuzzAlphaOff is every gate on but Kubernetes 1.37's alpha ones.
func fuzzAlphaOff() allocator.Features {
	f := allocator.AllFeatures()
	f.ListTypeAttributes, f.DerivedAttributes, f.CompatibilityGroups, f.OptionalNodeOperations = false, false, false, false
	return f
}
