package topology

import (
	"slices"
	"strings"
	"testing"
)

func TestParseShape(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr string
	}{
		{in: "4", want: []int{4}},
		{in: "2x4", want: []int{2, 4}},
		{in: "4x4x2", want: []int{4, 4, 2}},
		{in: "16x1", want: []int{16, 1}},
		{in: "", wantErr: "empty"},
		{in: "2x", wantErr: "dimension 1: missing number"},
		{in: "x2", wantErr: "dimension 0: missing number"},
		{in: "2X4", wantErr: "not a non-negative decimal number"},
		{in: "2 x4", wantErr: "not a non-negative decimal number"},
		{in: "-2x4", wantErr: "not a non-negative decimal number"},
		{in: "+2x4", wantErr: "not a non-negative decimal number"},
		{in: "0x4", wantErr: "at least 1"},
		{in: "02x4", wantErr: "leading zero"},
		{in: "2x2x2x2", wantErr: "4 dimensions; at most 3"},
		{in: "99999999999999999999x1", wantErr: "larger than"},
		{in: "65536", wantErr: "larger than 65535"},
		{in: "65535", want: []int{65535}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseShape(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseShape(%q) error = %v, want one containing %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseShape(%q): %v", tt.in, err)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("ParseShape(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseCoords(t *testing.T) {
	tests := []struct {
		in      string
		dims    int
		want    Coord
		wantErr string
	}{
		{in: "3", dims: 1, want: Coord{3}},
		{in: "1.0", dims: 2, want: Coord{1, 0}},
		{in: "1.0.2", dims: 3, want: Coord{1, 0, 2}},
		{in: "0.0", dims: 2, want: Coord{}},
		{in: "1.0", dims: 3, wantErr: "have 2 dimensions; the grid has 3"},
		{in: "1.0.2", dims: 2, wantErr: "have 3 dimensions; the grid has 2"},
		{in: "", dims: 2, wantErr: "empty"},
		{in: "1.", dims: 2, wantErr: "dimension 1: missing number"},
		{in: "1,0", dims: 2, wantErr: "have 1 dimensions"},
		{in: "a.0", dims: 2, wantErr: "not a non-negative decimal number"},
		{in: "-1.0", dims: 2, wantErr: "not a non-negative decimal number"},
		{in: "01.0", dims: 2, wantErr: "leading zero"},
		{in: "1.0", dims: 0, wantErr: "want 1 to 3"},
		{in: "1.0.0.0", dims: 4, wantErr: "want 1 to 3"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseCoords(tt.in, tt.dims)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseCoords(%q, %d) error = %v, want one containing %q", tt.in, tt.dims, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseCoords(%q, %d): %v", tt.in, tt.dims, err)
			}
			if got != tt.want {
				t.Fatalf("ParseCoords(%q, %d) = %v, want %v", tt.in, tt.dims, got, tt.want)
			}
			if back := FormatCoords(got, tt.dims); back != tt.in {
				t.Fatalf("FormatCoords(ParseCoords(%q)) = %q", tt.in, back)
			}
		})
	}
}
