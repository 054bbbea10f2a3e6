package explain

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/difftest"
	"github.com/drastack/drastack/internal/allocator/native"
)

// propertySeeds is how many random clusters the property test explains;
// each has several claims and nodes, so this is a few thousand Allocate
// calls, a couple of seconds on 2 cores.
const propertySeeds = 120

// TestExplanationAgreesWithAllocate is the property of issue 13: whenever an
// explanation says the claim fits on a node, Allocate for that node
// succeeds, whenever it says it does not, Allocate for that node fails, and
// whenever it says no node fits, a central Allocate fails.
func TestExplanationAgreesWithAllocate(t *testing.T) {
	ctx := context.Background()
	explained, fit, miss := 0, 0, 0
	for seed := uint64(1); seed <= propertySeeds; seed++ {
		c := difftest.Generate(seed)
		e := native.New()
		for _, claim := range c.Claims {
			rep, err := Explain(ctx, e, c.Inputs, []*resourceapi.ResourceClaim{claim}, Options{})
			if err != nil {
				t.Fatalf("seed %d, claim %s: %v", seed, allocator.ClaimKey(claim), err)
			}
			if rep.Invalid || rep.StoppedEarly != "" {
				continue
			}
			explained++
			if rep.Verdict == "" {
				t.Errorf("seed %d, claim %s: empty verdict", seed, allocator.ClaimKey(claim))
			}
			s, err := e.NewSession(ctx, c.Inputs)
			if err != nil {
				t.Fatal(err)
			}
			try := func(node string) error {
				_, err := s.Allocate(ctx, []*resourceapi.ResourceClaim{claim}, allocator.Options{Node: node})
				return err
			}
			anyFits := false
			for _, g := range rep.Groups {
				nodes := g.Nodes
				if len(nodes) == 0 {
					nodes = []string{""}
				}
				anyFits = anyFits || g.Fits
				if g.Fits {
					checkFunnelsAdmit(t, seed, g)
				}
				for _, n := range nodes {
					err := try(n)
					switch {
					case g.Fits && err != nil:
						t.Errorf("seed %d, claim %s: explained as fitting on node %q, Allocate: %v", seed, allocator.ClaimKey(claim), n, err)
					case !g.Fits && err == nil:
						t.Errorf("seed %d, claim %s: explained as not fitting on node %q (%s), Allocate succeeds", seed, allocator.ClaimKey(claim), n, g.Message)
					}
				}
			}
			err = try("")
			switch {
			case rep.Fits && err != nil:
				t.Errorf("seed %d, claim %s: explained as fitting (%s), central Allocate: %v", seed, allocator.ClaimKey(claim), rep.Verdict, err)
			case !rep.Fits && err == nil:
				t.Errorf("seed %d, claim %s: explained as not fitting (%s), central Allocate succeeds", seed, allocator.ClaimKey(claim), rep.Verdict)
			case !rep.Fits && !errors.Is(err, allocator.ErrUnsatisfiable) && !errors.Is(err, allocator.ErrSearchBound):
				t.Errorf("seed %d, claim %s: central Allocate: %v", seed, allocator.ClaimKey(claim), err)
			}
			if len(rep.Groups) > 0 && anyFits != rep.Fits {
				t.Errorf("seed %d, claim %s: some node fits: %v, claim fits: %v (%s)", seed, allocator.ClaimKey(claim), anyFits, rep.Fits, rep.Verdict)
			}
			if rep.Fits {
				fit++
			} else {
				miss++
			}
		}
	}
	t.Logf("%d claims explained: %d fit, %d do not", explained, fit, miss)
	if fit == 0 || miss == 0 {
		t.Errorf("the generator gave %d fitting and %d unfitting claims; both are needed", fit, miss)
	}
}

// checkFunnelsAdmit: on a node where the claim fits, every request has a
// request or subrequest whose funnel keeps enough candidates, since the
// funnel's steps are conditions every chosen device meets.
func checkFunnelsAdmit(t *testing.T, seed uint64, g NodeGroup) {
	t.Helper()
	ok := map[string]bool{}
	for _, q := range g.Requests {
		k := q.Claim + " " + strings.SplitN(q.Request, "/", 2)[0]
		ok[k] = ok[k] || failsAt(q) == len(q.Steps)
	}
	for k, v := range ok {
		if !v {
			t.Errorf("seed %d, nodes %v: the claim fits, but the funnels of %s keep too few candidates", seed, g.Nodes, k)
		}
	}
}

// TestExplainStopsAtDeadline: an explanation out of time says so instead
// of running on.
func TestExplainStopsAtDeadline(t *testing.T) {
	c := difftest.Generate(7)
	rep, err := Explain(context.Background(), nil, c.Inputs, c.Claims[:1], Options{Timeout: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	if rep.StoppedEarly == "" || !strings.Contains(rep.Verdict, "deadline") {
		t.Errorf("stoppedEarly %q, verdict %q: want the deadline named", rep.StoppedEarly, rep.Verdict)
	}
}
