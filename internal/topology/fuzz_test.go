package topology

import (
	"strings"
	"testing"
)

// FuzzParseShape: no input panics, and every accepted shape has exactly
// one spelling (it is part of device names).
func FuzzParseShape(f *testing.F) {
	for _, s := range []string{"2x4", "4x4x2", "1", "", "x", "0x1", "02x2", "2x2x2x2", "65535x1", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		shape, err := ParseShape(s)
		if err != nil {
			return
		}
		if len(shape) < 1 || len(shape) > MaxDims {
			t.Fatalf("ParseShape(%q) = %v: wrong number of dimensions", s, shape)
		}
		for _, n := range shape {
			if n < 1 || n >= maxAxis {
				t.Fatalf("ParseShape(%q) = %v: size out of range", s, shape)
			}
		}
		if back := formatShape(toCoord(shape), len(shape)); back != s {
			t.Fatalf("ParseShape(%q) = %v, which formats as %q", s, shape, back)
		}
	})
}

// FuzzParseCoords: no input panics, and accepted coordinates round-trip.
func FuzzParseCoords(f *testing.F) {
	for _, s := range []string{"1.0", "1.0.2", "3", "", ".", "1..2", "-1.0", "01.1"} {
		f.Add(s, uint8(2))
	}
	f.Fuzz(func(t *testing.T, s string, dims uint8) {
		c, err := ParseCoords(s, int(dims))
		if err != nil {
			return
		}
		if back := FormatCoords(c, int(dims)); back != s {
			t.Fatalf("ParseCoords(%q, %d) = %v, which formats as %q", s, dims, c, back)
		}
	})
}

// FuzzGenerate drives the whole path from user input (shape strings) and
// node labels (coordinates) on small grids: nothing panics, and whatever
// Generate returns without error is a valid pool (Generate checks it with
// internal/pool; checkSlices checks it again independently).
func FuzzGenerate(f *testing.F) {
	f.Add("2x2,2x4,4x4", "0.0 0.1 1.0 1.1", uint8(2), uint8(2), uint8(2), uint8(2), false)
	f.Add("1x1,2x2", "0.0 0.1 1.0 1.0 5.5 x", uint8(2), uint8(2), uint8(1), uint8(1), true)
	f.Add("1x2x1,2x2x2", "0.0.0 1.1.1", uint8(2), uint8(2), uint8(2), uint8(2), true)
	f.Add("4", "0 1 2 3", uint8(4), uint8(0), uint8(2), uint8(0), false)
	f.Fuzz(func(t *testing.T, shapes, coords string, h0, h1, c0, c1 uint8, publishAvailable bool) {
		hostGrid := []int{1 + int(h0)%6}
		cph := []int{1 + int(c0)%4}
		if h1 > 0 {
			hostGrid = append(hostGrid, int(h1)%6+1)
			cph = append(cph, int(c1)%4+1)
		}
		if strings.Count(shapes, ",") > 8 || len(coords) > 400 {
			return
		}
		var entries []HostEntry
		for i, c := range strings.Fields(coords) {
			entries = append(entries, HostEntry{Node: "n" + strings.Repeat("x", i%3) + string(rune('a'+i%26)), Coordinates: c})
		}
		hm, err := BuildHosts(hostGrid, entries)
		if err != nil {
			t.Fatalf("BuildHosts on a valid grid: %v", err)
		}
		spec := Spec{
			Driver: "acc.example.com", Pool: "fuzz", Domain: "d",
			HostGrid: hostGrid, ChipsPerHost: cph, Partitions: strings.Split(shapes, ","),
			Hosts: hm,
		}
		if publishAvailable {
			spec.MissingHosts = PublishAvailable
		}
		res, err := Generate(spec, 1)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if res.Summary.Withheld {
			if len(res.Slices) != 0 {
				t.Fatalf("withheld pool with %d slices", len(res.Slices))
			}
			return
		}
		checkSlices(t, spec, res.Slices)
	})
}
