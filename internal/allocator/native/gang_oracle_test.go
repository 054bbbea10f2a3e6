package native

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"testing"

	"github.com/drastack/drastack/internal/allocator"
)

// oracleCase is a small random gang problem that a brute-force search can
// decide: nodes in racks with GPUs of a type and a clique, some in use,
// and members that each want k GPUs (of type x, or any) on one node.
type oracleCase struct {
	racks   []string   // per node
	types   [][]string // per node and GPU
	cliques [][]string // per node and GPU
	held    [][]bool   // per node and GPU
	want    []int      // GPUs per member
	typeX   []bool     // per member: only type x
	nodesOf [][]int    // per member: candidate nodes (nil: all)
	rack    bool       // members share a rack
	clique  bool       // all GPUs share a clique
}

func randomOracleCase(r *rand.Rand) oracleCase {
	var c oracleCase
	n := 2 + r.Intn(4)
	// A third of the cases are symmetric: many alike nodes and GPUs, where
	// the gang search skips nodes and choices that look alike.
	alike := r.Intn(3) == 0
	if alike {
		n = 4 + r.Intn(5)
	}
	for i := 0; i < n; i++ {
		c.racks = append(c.racks, fmt.Sprintf("r%d", r.Intn(2)))
		g := 1 + r.Intn(4)
		var types, cliques []string
		var held []bool
		for j := 0; j < g; j++ {
			if alike {
				types, cliques = append(types, "x"), append(cliques, "A")
			} else {
				types = append(types, []string{"x", "y"}[r.Intn(3)/2])
				cliques = append(cliques, []string{"A", "B"}[r.Intn(2)])
			}
			held = append(held, r.Intn(5) == 0)
		}
		c.types, c.cliques, c.held = append(c.types, types), append(c.cliques, cliques), append(c.held, held)
	}
	m := 2 + r.Intn(3)
	if alike {
		m = 3 + r.Intn(4)
	}
	for i := 0; i < m; i++ {
		c.want = append(c.want, 1+r.Intn(3))
		c.typeX = append(c.typeX, r.Intn(3) == 0)
		var ns []int
		if r.Intn(3) == 0 {
			for j := 0; j < n; j++ {
				if r.Intn(2) == 0 {
					ns = append(ns, j)
				}
			}
			if ns == nil {
				ns = []int{r.Intn(n)}
			}
		}
		c.nodesOf = append(c.nodesOf, ns)
	}
	c.rack = r.Intn(2) == 0
	c.clique = r.Intn(3) == 0
	return c
}

// feasible decides the case by trying every node and GPU subset for each
// member in turn.
func (c oracleCase) feasible() bool {
	used := make([][]bool, len(c.held))
	for i := range c.held {
		used[i] = append([]bool(nil), c.held[i]...)
	}
	var try func(m int, rack, clique string) bool
	try = func(m int, rack, clique string) bool {
		if m == len(c.want) {
			return true
		}
		for n := range c.racks {
			if c.nodesOf[m] != nil && !containsInt(c.nodesOf[m], n) {
				continue
			}
			if c.rack && rack != "" && c.racks[n] != rack {
				continue
			}
			nr := rack
			if c.rack {
				nr = c.racks[n]
			}
			var pick func(g, k int, clique string) bool
			pick = func(g, k int, clique string) bool {
				if k == 0 {
					return try(m+1, nr, clique)
				}
				for ; g < len(c.types[n]); g++ {
					if used[n][g] || (c.typeX[m] && c.types[n][g] != "x") || (c.clique && clique != "" && c.cliques[n][g] != clique) {
						continue
					}
					nc := clique
					if c.clique {
						nc = c.cliques[n][g]
					}
					used[n][g] = true
					ok := pick(g+1, k-1, nc)
					used[n][g] = false
					if ok {
						return true
					}
				}
				return false
			}
			if pick(0, c.want[m], clique) {
				return true
			}
		}
		return false
	}
	return try(0, "", "")
}

func (c oracleCase) inputs() (allocator.Inputs, allocator.Gang) {
	var in allocator.Inputs
	for n := range c.racks {
		name := fmt.Sprintf("n%d", n)
		var attrs [][]any
		for g := range c.types[n] {
			attrs = append(attrs, []any{"type", c.types[n][g], "clique", c.cliques[n][g]})
		}
		in.Slices = append(in.Slices, gpus(name, len(c.types[n]), attrs...))
		in.Nodes = append(in.Nodes, node(name, map[string]string{"rack": c.racks[n]}))
		for g, h := range c.held[n] {
			if h {
				in.Allocated = append(in.Allocated, allocatedClaim(fmt.Sprintf("held-%d-%d", n, g), false, name, fmt.Sprintf("gpu-%d", g)))
			}
		}
	}
	gang := allocator.Gang{Name: "g"}
	for m, k := range c.want {
		p := fmt.Sprintf("p%d", m)
		r := req("gpu", int64(k))
		if c.typeX[m] {
			r = req("gpu", int64(k), `device.attributes["gpu.example.com"].type == "x"`)
		}
		var ns []string
		for _, n := range c.nodesOf[m] {
			ns = append(ns, fmt.Sprintf("n%d", n))
		}
		gang.Members = append(gang.Members, member(p, ns, claim(p, r)))
	}
	if c.rack {
		gang.Constraints = append(gang.Constraints, allocator.GangConstraint{NodeLabel: "rack"})
	}
	if c.clique {
		gang.Constraints = append(gang.Constraints, allocator.GangConstraint{MatchAttribute: drv + "/clique"})
	}
	return in, gang
}

// TestGangAgainstOracle: on random small cases, AllocateGang places a gang
// exactly when a brute-force search finds a placement, and what it returns
// is one: each member on one of its nodes with its count of free GPUs of
// its type, no GPU twice, the rack and clique shared.
func TestGangAgainstOracle(t *testing.T) {
	r := rand.New(rand.NewSource(27))
	placed, refused := 0, 0
	for i := 0; i < 900; i++ {
		c := randomOracleCase(r)
		in, gang := c.inputs()
		want := c.feasible()
		for _, policy := range []allocator.PlacementPolicy{allocator.PlacementFirstFit, allocator.PlacementPack} {
			s := newTestSession(t, in)
			got, err := s.AllocateGang(context.Background(), gang, allocator.Options{Policy: policy})
			if err != nil && !errors.Is(err, allocator.ErrUnsatisfiable) {
				t.Fatalf("case %d, %s: %v", i, policy, err)
			}
			if (err == nil) != want {
				t.Fatalf("case %d (%+v), %s: placed %v (%v), oracle says %v", i, c, policy, err == nil, err, want)
			}
			assertIdle(t, s)
			if err != nil {
				continue
			}
			checkPlacement(t, i, c, got)
		}
		if want {
			placed++
		} else {
			refused++
		}
	}
	// The generator must produce both outcomes, or the test tells little.
	if placed < 100 || refused < 100 {
		t.Errorf("cases: %d placeable, %d not; want at least 100 of each", placed, refused)
	}
}

func checkPlacement(t *testing.T, i int, c oracleCase, got []allocator.MemberResult) {
	t.Helper()
	taken := map[string]bool{}
	rack, clique := "", ""
	for m, res := range got {
		var n int
		if _, err := fmt.Sscanf(res.Node, "n%d", &n); err != nil {
			t.Fatalf("case %d: member %d on node %q", i, m, res.Node)
		}
		if c.nodesOf[m] != nil && !containsInt(c.nodesOf[m], n) {
			t.Errorf("case %d: member %d on n%d, not one of its nodes %v", i, m, n, c.nodesOf[m])
		}
		if c.rack {
			if rack != "" && c.racks[n] != rack {
				t.Errorf("case %d: member %d in rack %s, others in %s", i, m, c.racks[n], rack)
			}
			rack = c.racks[n]
		}
		results := res.Results[0].Allocation.Devices.Results
		if len(results) != c.want[m] {
			t.Errorf("case %d: member %d got %d GPUs, wants %d", i, m, len(results), c.want[m])
		}
		for _, d := range results {
			var g int
			if _, err := fmt.Sscanf(d.Device, "gpu-%d", &g); err != nil || d.Pool != res.Node {
				t.Fatalf("case %d: member %d got %s/%s on %s", i, m, d.Pool, d.Device, res.Node)
			}
			key := d.Pool + "/" + d.Device
			if taken[key] || c.held[n][g] {
				t.Errorf("case %d: %s given twice or held", i, key)
			}
			taken[key] = true
			if c.typeX[m] && c.types[n][g] != "x" {
				t.Errorf("case %d: member %d got %s of type %s", i, m, key, c.types[n][g])
			}
			if c.clique {
				if clique != "" && c.cliques[n][g] != clique {
					t.Errorf("case %d: %s in clique %s, others in %s", i, key, c.cliques[n][g], clique)
				}
				clique = c.cliques[n][g]
			}
		}
	}
}
