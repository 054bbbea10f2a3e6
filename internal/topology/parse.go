package topology

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxDims is the largest number of grid dimensions: TPU-like interconnects
// are 1-D rings, 2-D or 3-D tori.
const MaxDims = 3

// maxAxis bounds every number in a shape or a coordinate. It keeps parsing
// of user input and node labels free of overflow; no real grid is close.
const maxAxis = 1 << 16

// Coord is a position or a size on a grid of up to MaxDims dimensions.
// Dimensions beyond the grid's are zero, so a Coord can key a map.
type Coord [MaxDims]int

// join formats the first dims entries of c separated by sep.
func (c Coord) join(dims int, sep string) string {
	parts := make([]string, dims)
	for d := 0; d < dims; d++ {
		parts[d] = strconv.Itoa(c[d])
	}
	return strings.Join(parts, sep)
}

// FormatCoords writes host coordinates the way the coordinates label holds
// them ("1.0", "1.0.2"), so that problems name a host as its label does.
func FormatCoords(c Coord, dims int) string { return c.join(dims, ".") }

// ParseShape parses a partition shape such as "2x4" or "4x4x2": 1 to
// MaxDims positive numbers separated by "x", without signs, spaces or
// leading zeros, so that every shape has exactly one spelling (the
// spelling is part of device names and of the shape attribute).
func ParseShape(s string) ([]int, error) {
	if s == "" {
		return nil, fmt.Errorf("shape is empty; want sizes in chips like \"2x4\"")
	}
	parts := strings.Split(s, "x")
	if len(parts) > MaxDims {
		return nil, fmt.Errorf("shape %q has %d dimensions; at most %d are supported", s, len(parts), MaxDims)
	}
	shape := make([]int, len(parts))
	for i, p := range parts {
		n, err := parseNumber(p)
		if err != nil {
			return nil, fmt.Errorf("shape %q, dimension %d: %w", s, i, err)
		}
		if n == 0 {
			return nil, fmt.Errorf("shape %q, dimension %d: size must be at least 1", s, i)
		}
		shape[i] = n
	}
	return shape, nil
}

// formatShape is the canonical spelling of a shape ("2x4").
func formatShape(shape Coord, dims int) string { return shape.join(dims, "x") }

// ParseCoords parses host coordinates as the coordinates label holds them:
// dims non-negative numbers separated by "." ("3", "1.0", "1.0.2"). It does
// not check the grid bounds; BuildHosts does.
func ParseCoords(s string, dims int) (Coord, error) {
	if dims < 1 || dims > MaxDims {
		return Coord{}, fmt.Errorf("grid has %d dimensions; want 1 to %d", dims, MaxDims)
	}
	if s == "" {
		return Coord{}, fmt.Errorf("coordinates are empty; want %d numbers separated by \".\"", dims)
	}
	parts := strings.Split(s, ".")
	if len(parts) != dims {
		return Coord{}, fmt.Errorf("coordinates %q have %d dimensions; the grid has %d", s, len(parts), dims)
	}
	var c Coord
	for i, p := range parts {
		n, err := parseNumber(p)
		if err != nil {
			return Coord{}, fmt.Errorf("coordinates %q, dimension %d: %w", s, i, err)
		}
		c[i] = n
	}
	return c, nil
}

// parseNumber accepts the decimal spelling of 0..maxAxis-1 and nothing else.
func parseNumber(p string) (int, error) {
	if p == "" {
		return 0, fmt.Errorf("missing number")
	}
	for _, r := range p {
		if r < '0' || r > '9' {
			return 0, fmt.Errorf("%q is not a non-negative decimal number", p)
		}
	}
	if len(p) > 1 && p[0] == '0' {
		return 0, fmt.Errorf("%q has a leading zero", p)
	}
	if len(p) > len(strconv.Itoa(maxAxis)) {
		return 0, fmt.Errorf("%q is larger than %d", p, maxAxis-1)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		return 0, fmt.Errorf("%q: %w", p, err)
	}
	if n >= maxAxis {
		return 0, fmt.Errorf("%q is larger than %d", p, maxAxis-1)
	}
	return n, nil
}
