package topology

import (
	"fmt"
	"strings"
)

// A counter set holds the counters of one block of hosts: an aligned box of
// block[d] hosts along every dimension, starting at multiples of block[d]
// (the last block along a dimension is cut short when block[d] does not
// divide the grid). Blocks are the natural grouping for aligned
// placements: a placement that fits in a block whose size is a multiple of
// its own lies in exactly one. A block size need not divide the grid: on a
// 5x7 host grid with rows (1x7) and columns (5x1) as shapes, blocks of 3x7
// keep every device within 2 sets while no divisor does.
// chooseBlock picks the block size; Generate then names one counter set per
// block.

// blockChoice is a candidate block size with its cost.
type blockChoice struct {
	block Coord
	// consumptions is the number of counter-set consumptions of all
	// placements of all shapes: fewer means fewer devices that span sets.
	consumptions int
	sets         int
}

// chooseBlock returns the block size that keeps every placement of every
// shape within maxConsumptionsPerDevice counter sets and every set within
// maxCountersPerSet counters, preferring the fewest consumptions and then
// the fewest sets. Among equals the first in enumeration order wins, so
// the choice is deterministic.
func (p *plan) chooseBlock() (Coord, error) {
	best, ok := p.bestBlock(p.shapes)
	if ok {
		return best.block, nil
	}
	// Explain: name the shapes that cannot be grouped even on their own.
	var alone []string
	for _, si := range p.shapes {
		if _, ok := p.bestBlock([]shapeInfo{si}); !ok {
			alone = append(alone, fmt.Sprintf("%s (spans %s hosts)", si.name, formatShape(si.hostSpan, p.dims)))
		}
	}
	if len(alone) > 0 {
		return Coord{}, fmt.Errorf("partitions %s: no grouping of the %s hosts into counter sets of at most %d hosts (ResourceSliceMaxCountersPerCounterSet) keeps each device within %d counter sets (ResourceSliceMaxDeviceCounterConsumptionsPerDevice)",
			strings.Join(alone, ", "), formatShape(p.hostGrid, p.dims), maxCountersPerSet, maxConsumptionsPerDevice)
	}
	names := make([]string, len(p.shapes))
	for i, si := range p.shapes {
		names[i] = si.name
	}
	return Coord{}, fmt.Errorf("partitions %s: each can be grouped into counter sets of at most %d hosts on its own, but no single grouping of the %s hosts keeps every device of all of them within %d counter sets; drop one of the shapes",
		strings.Join(names, ", "), maxCountersPerSet, formatShape(p.hostGrid, p.dims), maxConsumptionsPerDevice)
}

// bestBlock searches every block size of at most maxCountersPerSet hosts.
func (p *plan) bestBlock(shapes []shapeInfo) (blockChoice, bool) {
	var best blockChoice
	found := false
	h := p.hostGrid
	for b0 := 1; b0 <= min(h[0], maxCountersPerSet); b0++ {
		for b1 := 1; b1 <= min(h[1], maxCountersPerSet/b0); b1++ {
			for b2 := 1; b2 <= min(h[2], maxCountersPerSet/(b0*b1)); b2++ {
				block := Coord{b0, b1, b2}
				c, ok := p.evaluate(block, shapes)
				if !ok {
					continue
				}
				if !found || c.consumptions < best.consumptions ||
					c.consumptions == best.consumptions && c.sets < best.sets {
					best, found = c, true
				}
			}
		}
	}
	return best, found
}

// evaluate computes the cost of a block size, or false when some placement
// would consume from more counter sets than a device may.
func (p *plan) evaluate(block Coord, shapes []shapeInfo) (blockChoice, bool) {
	c := blockChoice{block: block, sets: 1}
	for d := 0; d < MaxDims; d++ {
		c.sets *= (p.hostGrid[d] + block[d] - 1) / block[d]
	}
	for _, si := range shapes {
		// Placements are a product of per-dimension origins, so the sets a
		// placement touches are a product of per-dimension counts.
		worst, total := 1, 1
		for d := 0; d < MaxDims; d++ {
			w, t := p.touched(si, d, block[d])
			worst *= w
			total *= t
		}
		if worst > maxConsumptionsPerDevice {
			return blockChoice{}, false
		}
		c.consumptions += total
	}
	return c, true
}

// touched returns, along dimension d, the most blocks of size b that one
// placement of si overlaps and the sum of that number over all placement
// origins along d.
func (p *plan) touched(si shapeInfo, d, b int) (worst, total int) {
	if d >= p.dims {
		return 1, 1
	}
	span := si.hostSpan[d]
	for chip := 0; chip < p.chipGrid[d]; chip += si.size[d] {
		first := chip / p.cph[d]
		n := (first+span-1)/b - first/b + 1
		worst = max(worst, n)
		total += n
	}
	return worst, total
}
