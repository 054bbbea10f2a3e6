package topology

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// placementsByFormula is the number of aligned placements of a shape:
// the product over dimensions of chip grid / shape.
func placementsByFormula(hostGrid, cph []int, shape []int) int {
	n := 1
	for d := range hostGrid {
		n *= hostGrid[d] * cph[d] / shape[d]
	}
	return n
}

func TestPlacementCounts(t *testing.T) {
	tests := []struct {
		name     string
		hostGrid []int
		cph      []int
		shapes   []string
	}{
		{"1-D ring of 8 hosts with 4 chips", []int{8}, []int{4}, []string{"2", "4", "8", "16", "32"}},
		{"1-D, one chip per host", []int{12}, []int{1}, []string{"1", "3", "4", "6", "12"}},
		{"2-D 4x4 hosts of 2x2 chips (KEP-4815 pod)", []int{4, 4}, []int{2, 2}, []string{"2x2", "2x4", "4x2", "4x4", "4x8", "8x4", "8x8"}},
		{"2-D with a partial shape", []int{2, 4}, []int{2, 4}, []string{"2x2", "2x4", "4x8", "4x16"}},
		{"2-D non-square", []int{3, 2}, []int{1, 4}, []string{"1x4", "3x4", "1x8", "3x8"}},
		{"3-D 2x2x4 hosts of 2x2x1 chips (TPU v4 cube)", []int{2, 2, 4}, []int{2, 2, 1}, []string{"2x2x1", "2x2x2", "2x2x4", "4x4x4", "4x4x2"}},
		{"3-D with a partial shape", []int{2, 2, 2}, []int{2, 2, 2}, []string{"1x1x2", "2x2x2", "4x4x4"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := Spec{
				Driver: "tpu.example.com", Pool: "p", Domain: "d",
				HostGrid: tt.hostGrid, ChipsPerHost: tt.cph, Partitions: tt.shapes,
				Hosts: fullGrid(tt.hostGrid),
			}
			res, err := Generate(spec, 1)
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			checkSlices(t, spec, res.Slices)
			counted := map[string]int{}
			dims := len(tt.hostGrid)
			for _, d := range allDevices(res.Slices) {
				b := deviceBox(t, dims, d)
				for dd := 0; dd < dims; dd++ {
					if b.origin[dd]+b.size[dd] > tt.hostGrid[dd]*tt.cph[dd] {
						t.Errorf("device %s leaves the grid", d.Name)
					}
				}
				counted[*d.Attributes[AttrShape].StringValue]++
			}
			total := 0
			for _, s := range tt.shapes {
				shape, _ := ParseShape(s)
				want := placementsByFormula(tt.hostGrid, tt.cph, shape)
				total += want
				if counted[s] != want {
					t.Errorf("shape %s: %d devices, want %d", s, counted[s], want)
				}
			}
			if res.Summary.Devices != total {
				t.Errorf("summary: %d devices, want %d", res.Summary.Devices, total)
			}
			for _, ss := range res.Summary.Shapes {
				if ss.Devices != counted[ss.Shape] || ss.Placements != counted[ss.Shape] {
					t.Errorf("summary of %s: %+v, want %d devices and placements", ss.Shape, ss, counted[ss.Shape])
				}
			}
		})
	}
}

// randomSpec draws a small valid-looking topology: 1 to 3 dimensions, a
// few hosts and chips per dimension, and random shapes that follow the
// alignment rule (at most one of them partial). Some draws are rejected by
// Generate (no counter-set grouping); callers count the accepted ones.
func randomSpec(r *rand.Rand) Spec {
	dims := 1 + r.IntN(3)
	hostGrid, cph := make([]int, dims), make([]int, dims)
	for d := range dims {
		hostGrid[d] = []int{1, 2, 3, 4, 6, 8}[r.IntN(6)]
		cph[d] = []int{1, 2, 4}[r.IntN(3)]
	}
	for hosts := product(hostGrid); hosts > 96; hosts = product(hostGrid) {
		hostGrid[r.IntN(dims)] = 1
	}
	seen := map[string]bool{}
	var shapes []string
	partial := false
	for range 1 + r.IntN(5) {
		shape := make([]int, dims)
		isPartial := false
		for d := range dims {
			var options []int
			for z := 1; z <= cph[d]; z++ {
				if cph[d]%z == 0 && (z == cph[d] || !partial) {
					options = append(options, z)
				}
			}
			for k := 2; k <= hostGrid[d]; k++ {
				if hostGrid[d]%k == 0 {
					options = append(options, k*cph[d])
				}
			}
			shape[d] = options[r.IntN(len(options))]
			if shape[d] < cph[d] {
				isPartial = true
			}
		}
		s := formatShape(toCoord(shape), dims)
		if seen[s] {
			continue
		}
		seen[s] = true
		partial = partial || isPartial
		shapes = append(shapes, s)
	}
	return Spec{
		Driver: "acc.example.com", Pool: "random", Domain: "d",
		HostGrid: hostGrid, ChipsPerHost: cph, Partitions: shapes,
		Hosts:              fullGrid(hostGrid),
		OmitHostsAttribute: r.IntN(2) == 0,
	}
}

func product(v []int) int {
	n := 1
	for _, x := range v {
		n *= x
	}
	return n
}

// fits reports whether devices with the given consumptions can be
// allocated together as far as counters go: for every counter, the sum
// they consume is at most its value.
func fits(counters map[counterKey]int64, consumptions ...map[counterKey]int64) bool {
	used := map[counterKey]int64{}
	for _, c := range consumptions {
		for k, v := range c {
			used[k] += v
			if used[k] > counters[k] {
				return false
			}
		}
	}
	return true
}

// sharesCounter reports whether two consumptions name a common counter.
func sharesCounter(a, b map[counterKey]int64) bool {
	for k := range a {
		if _, ok := b[k]; ok {
			return true
		}
	}
	return false
}

// TestGeneratedPoolProperties checks, on many random topologies, that every
// generated pool is valid and that the counters say exactly what the
// topology means:
//   - two devices consume a common counter exactly when they share a host;
//   - two devices fit the counters together exactly when they share no chip;
//   - a random set of devices fits exactly when no two share a chip.
func TestGeneratedPoolProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(4815, 7))
	accepted := 0
	outcomes := map[bool]int{}
	for i := range 300 {
		spec := randomSpec(r)
		name := fmt.Sprintf("%d/%v/%v/%v", i, spec.HostGrid, spec.ChipsPerHost, spec.Partitions)
		res, err := Generate(spec, int64(i))
		if err != nil {
			continue
		}
		accepted++
		t.Run(name, func(t *testing.T) {
			checkSlices(t, spec, res.Slices)
			dims := len(spec.HostGrid)
			devices := allDevices(res.Slices)
			counters := poolCounters(res.Slices)
			boxes := make([]box, len(devices))
			hosts := make([]map[Coord]bool, len(devices))
			cons := make([]map[counterKey]int64, len(devices))
			for j, d := range devices {
				cons[j] = consumption(d)
				boxes[j] = deviceBox(t, dims, d)
				hosts[j] = map[Coord]bool{}
				for _, h := range boxes[j].hosts(spec.ChipsPerHost) {
					hosts[j][h] = true
				}
			}
			for a := range devices {
				for b := a + 1; b < len(devices); b++ {
					shareHost := false
					for h := range hosts[a] {
						shareHost = shareHost || hosts[b][h]
					}
					if got := sharesCounter(cons[a], cons[b]); got != shareHost {
						t.Fatalf("%s and %s: share a counter = %v, share a host = %v", devices[a].Name, devices[b].Name, got, shareHost)
					}
					overlap := boxes[a].overlaps(boxes[b])
					if got := fits(counters, cons[a], cons[b]); got == overlap {
						t.Fatalf("%s and %s: fit the counters together = %v, share a chip = %v", devices[a].Name, devices[b].Name, got, overlap)
					}
				}
			}
			for trial := range 50 {
				// A greedy disjoint set in random order, then (every other
				// trial) one more random device, which usually overlaps.
				var set []int
				var setBoxes []box
				for _, j := range r.Perm(len(devices)) {
					free := true
					for _, b := range setBoxes {
						free = free && !b.overlaps(boxes[j])
					}
					if free {
						set = append(set, j)
						setBoxes = append(setBoxes, boxes[j])
					}
				}
				if trial%2 == 1 {
					keep := r.IntN(len(set) + 1)
					set, setBoxes = set[:keep], setBoxes[:keep]
					j := r.IntN(len(devices))
					if !slices.Contains(set, j) {
						set = append(set, j)
						setBoxes = append(setBoxes, boxes[j])
					}
				}
				disjoint := true
				for a := range setBoxes {
					for b := a + 1; b < len(setBoxes); b++ {
						disjoint = disjoint && !setBoxes[a].overlaps(setBoxes[b])
					}
				}
				setCons := make([]map[counterKey]int64, len(set))
				for k, j := range set {
					setCons[k] = cons[j]
				}
				if got := fits(counters, setCons...); got != disjoint {
					t.Fatalf("a set of %d devices fits the counters = %v, pairwise disjoint = %v", len(set), got, disjoint)
				}
				outcomes[disjoint]++
			}
		})
	}
	// Both answers must occur, or the set check proves nothing.
	if outcomes[true] < 1000 || outcomes[false] < 1000 {
		t.Errorf("device sets that fit / do not fit: %d / %d; want both common", outcomes[true], outcomes[false])
	}
	t.Logf("%d of 300 random specs accepted; device sets that fit / do not: %d / %d", accepted, outcomes[true], outcomes[false])
	if accepted < 200 {
		t.Errorf("only %d of 300 random specs were accepted; the generator of test specs or the grouping search is off", accepted)
	}
}
