package difftest

import (
	"context"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/native"
)

// packEngine is the native engine under the Pack placement policy.
type packEngine struct{ allocator.Engine }

func (packEngine) Name() string { return "native-pack" }

func (e packEngine) NewSession(ctx context.Context, in allocator.Inputs) (allocator.Session, error) {
	s, err := e.Engine.NewSession(ctx, in)
	return packSession{s}, err
}

type packSession struct{ allocator.Session }

func (s packSession) Allocate(ctx context.Context, claims []*resourceapi.ResourceClaim, opts allocator.Options) ([]allocator.Result, error) {
	opts.Policy = allocator.PlacementPack
	return s.Session.Allocate(ctx, claims, opts)
}

// TestPackAgrees: the Pack policy changes which node and devices are tried
// first, never whether a claim can be allocated. On generated cases native
// FirstFit and native Pack give the same verdict for every claim, and the
// verifier accepts every allocation of both.
func TestPackAgrees(t *testing.T) {
	n := min(numCases(t), 300)
	eng := [2]allocator.Engine{native.New(), packEngine{native.New()}}
	var total Stats
	for i := 0; i < n; i++ {
		c := GenerateWith(*seedFlag+uint64(i), caseFeatures(t))
		var out [2][]Outcome
		for k, e := range eng {
			o, err := Run(context.Background(), e, c)
			if err != nil {
				t.Fatalf("seed %d: %v", c.Seed, err)
			}
			out[k] = o
		}
		problems, st := Compare(c, [2]string{"native", "native-pack"}, out[0], out[1])
		total.Claims += st.Claims
		total.Allocated += st.Allocated
		total.Unsatisfiable += st.Unsatisfiable
		for _, p := range problems {
			t.Error(p)
		}
	}
	if total.Allocated == 0 || total.Unsatisfiable == 0 {
		t.Errorf("generator is degenerate: %d allocated, %d unsatisfiable of %d claims", total.Allocated, total.Unsatisfiable, total.Claims)
	}
}
