package topology

import (
	"reflect"
	"strings"
	"testing"
)

func TestBuildHosts(t *testing.T) {
	type problem struct {
		reason ProblemReason
		coords string
		node   string
	}
	tests := []struct {
		name     string
		grid     []int
		entries  []HostEntry
		want     map[Coord]Host
		problems []problem
	}{
		{
			name: "complete 2x2 grid",
			grid: []int{2, 2},
			entries: []HostEntry{
				{Node: "n3", Coordinates: "1.0"}, {Node: "n1", Coordinates: "0.0"},
				{Node: "n2", Hostname: "host-2", Coordinates: "0.1"}, {Node: "n4", Coordinates: "1.1"},
			},
			want: map[Coord]Host{
				{0, 0}: {Node: "n1"}, {0, 1}: {Node: "n2", Hostname: "host-2"},
				{1, 0}: {Node: "n3"}, {1, 1}: {Node: "n4"},
			},
		},
		{
			name:    "3-D coordinates",
			grid:    []int{2, 2, 2},
			entries: []HostEntry{{Node: "a", Coordinates: "1.0.1"}},
			want:    map[Coord]Host{{1, 0, 1}: {Node: "a"}},
		},
		{
			name: "two nodes claim one position: the position is left empty",
			grid: []int{2},
			entries: []HostEntry{
				{Node: "b", Coordinates: "1"}, {Node: "a", Coordinates: "1"}, {Node: "c", Coordinates: "0"},
			},
			want:     map[Coord]Host{{0}: {Node: "c"}},
			problems: []problem{{ReasonDuplicateCoordinates, "1", "a,b"}},
		},
		{
			name:     "coordinates outside the grid",
			grid:     []int{2, 2},
			entries:  []HostEntry{{Node: "a", Coordinates: "2.0"}, {Node: "b", Coordinates: "0.1"}},
			want:     map[Coord]Host{{0, 1}: {Node: "b"}},
			problems: []problem{{ReasonCoordinatesOutOfGrid, "2.0", "a"}},
		},
		{
			name: "coordinates that do not parse or have the wrong dimensions",
			grid: []int{2, 2},
			entries: []HostEntry{
				{Node: "a", Coordinates: "x.0"}, {Node: "b", Coordinates: "1"}, {Node: "c", Coordinates: ""},
			},
			want: map[Coord]Host{},
			problems: []problem{
				{ReasonInvalidCoordinates, "", "c"},
				{ReasonInvalidCoordinates, "1", "b"},
				{ReasonInvalidCoordinates, "x.0", "a"},
			},
		},
		{
			name:     "one node listed twice is left out",
			grid:     []int{2},
			entries:  []HostEntry{{Node: "a", Coordinates: "0"}, {Node: "a", Coordinates: "1"}},
			want:     map[Coord]Host{},
			problems: []problem{{ReasonDuplicateHost, "", "a"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hm, err := BuildHosts(tt.grid, tt.entries)
			if err != nil {
				t.Fatalf("BuildHosts: %v", err)
			}
			if !reflect.DeepEqual(hm.Hosts, tt.want) {
				t.Errorf("hosts = %v, want %v", hm.Hosts, tt.want)
			}
			var got []problem
			for _, p := range hm.Problems {
				got = append(got, problem{p.Reason, p.Coordinates, p.Node})
				if p.Message == "" {
					t.Errorf("problem %v has no message", p)
				}
			}
			if !reflect.DeepEqual(got, tt.problems) {
				t.Errorf("problems = %v, want %v", got, tt.problems)
			}
		})
	}
}

func TestBuildHostsRejectsInvalidGrid(t *testing.T) {
	for _, grid := range [][]int{nil, {0}, {2, 2, 2, 2}, {-1, 2}} {
		if _, err := BuildHosts(grid, nil); err == nil || !strings.Contains(err.Error(), "host grid") {
			t.Errorf("BuildHosts(%v) error = %v, want a host grid error", grid, err)
		}
		if _, err := FullHostMap(grid, func(string) string { return "n" }); err == nil || !strings.Contains(err.Error(), "host grid") {
			t.Errorf("FullHostMap(%v) error = %v, want a host grid error", grid, err)
		}
	}
}

func TestFullHostMap(t *testing.T) {
	hm, err := FullHostMap([]int{2, 1, 3}, func(coords string) string { return "node-" + coords })
	if err != nil {
		t.Fatal(err)
	}
	if len(hm.Hosts) != 6 || len(hm.Problems) != 0 {
		t.Fatalf("%d hosts, problems %v; want 6 and none", len(hm.Hosts), hm.Problems)
	}
	if got := hm.Hosts[Coord{1, 0, 2}].Node; got != "node-1.0.2" {
		t.Errorf("host at 1.0.2 = %q, want node-1.0.2", got)
	}
}
