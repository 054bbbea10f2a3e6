package topology

import (
	"slices"
	"strings"
	"testing"
)

// reasons lists the reasons of problems with their coordinates.
func reasons(ps []Problem) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = string(p.Reason) + "@" + p.Coordinates
		if p.Message == "" {
			out[i] += "(no message)"
		}
	}
	return out
}

// deviceNames lists the device names of a result.
func deviceNames(res *Result) []string {
	var out []string
	for _, d := range allDevices(res.Slices) {
		out = append(out, d.Name)
	}
	return out
}

func TestMissingHostPolicies(t *testing.T) {
	without := func(spec Spec, at ...Coord) Spec {
		hosts := map[Coord]Host{}
		for c, h := range spec.Hosts.Hosts {
			if !slices.Contains(at, c) {
				hosts[c] = h
			}
		}
		spec.Hosts = HostMap{Hosts: hosts, Problems: spec.Hosts.Problems}
		return spec
	}
	tests := []struct {
		name     string
		spec     Spec
		withheld bool
		devices  []string
		sets     int
		problems []string
	}{
		{
			name:    "complete grid, default policy: everything is published",
			spec:    kepSpec(),
			devices: []string{"tpu-2x2-at-0-0", "tpu-2x2-at-0-2", "tpu-2x2-at-2-0", "tpu-2x2-at-2-2", "tpu-2x4-at-0-0", "tpu-2x4-at-2-0", "tpu-4x4-at-0-0"},
			sets:    1,
		},
		{
			name:     "missing host, default policy (Withhold): nothing is published",
			spec:     without(kepSpec(), Coord{1, 1}),
			withheld: true,
			problems: []string{"MissingHost@1.1", "PoolWithheld@"},
		},
		{
			name: "missing host, PublishAvailable: only devices whose hosts all exist",
			spec: func() Spec {
				s := without(kepSpec(), Coord{1, 1})
				s.MissingHosts = PublishAvailable
				return s
			}(),
			devices:  []string{"tpu-2x2-at-0-0", "tpu-2x2-at-0-2", "tpu-2x2-at-2-0", "tpu-2x4-at-0-0"},
			sets:     1,
			problems: []string{"MissingHost@1.1"},
		},
		{
			name: "no host at all, PublishAvailable: one empty slice keeps the pool visible",
			spec: func() Spec {
				s := without(kepSpec(), Coord{0, 0}, Coord{0, 1}, Coord{1, 0}, Coord{1, 1})
				s.MissingHosts = PublishAvailable
				return s
			}(),
			problems: []string{"MissingHost@0.0", "MissingHost@0.1", "MissingHost@1.0", "MissingHost@1.1"},
		},
		{
			name: "duplicate coordinates from BuildHosts make a missing host and are reported",
			spec: func() Spec {
				s := kepSpec()
				hm, err := BuildHosts(s.HostGrid, []HostEntry{
					{Node: "node-1", Coordinates: "0.0"}, {Node: "node-2", Coordinates: "0.1"},
					{Node: "node-5", Coordinates: "1.0"}, {Node: "node-6", Coordinates: "1.0"},
					{Node: "node-7", Coordinates: "0.2"},
				})
				if err != nil {
					t.Fatal(err)
				}
				s.Hosts, s.MissingHosts = hm, PublishAvailable
				return s
			}(),
			devices:  []string{"tpu-2x2-at-0-0", "tpu-2x2-at-0-2", "tpu-2x4-at-0-0"},
			sets:     1,
			problems: []string{"CoordinatesOutOfGrid@0.2", "DuplicateCoordinates@1.0", "MissingHost@1.0", "MissingHost@1.1"},
		},
		{
			name: "a stray node outside the grid does not withhold a complete pool",
			spec: func() Spec {
				s := kepSpec()
				s.Hosts.Hosts[Coord{2, 0}] = Host{Node: "node-9"}
				return s
			}(),
			devices:  []string{"tpu-2x2-at-0-0", "tpu-2x2-at-0-2", "tpu-2x2-at-2-0", "tpu-2x2-at-2-2", "tpu-2x4-at-0-0", "tpu-2x4-at-2-0", "tpu-4x4-at-0-0"},
			sets:     1,
			problems: []string{"CoordinatesOutOfGrid@2.0"},
		},
		{
			name: "a host map key with a coordinate in a dimension the grid lacks",
			spec: func() Spec {
				s := kepSpec()
				s.Hosts.Hosts[Coord{1, 1, 3}] = Host{Node: "node-9"}
				return s
			}(),
			devices:  []string{"tpu-2x2-at-0-0", "tpu-2x2-at-0-2", "tpu-2x2-at-2-0", "tpu-2x2-at-2-2", "tpu-2x4-at-0-0", "tpu-2x4-at-2-0", "tpu-4x4-at-0-0"},
			sets:     1,
			problems: []string{"CoordinatesOutOfGrid@1.1.3"},
		},
		{
			name: "one node at two positions: both positions are missing",
			spec: func() Spec {
				s := kepSpec()
				s.Hosts.Hosts[Coord{1, 1}] = Host{Node: "node-5"}
				s.MissingHosts = PublishAvailable
				return s
			}(),
			devices:  []string{"tpu-2x2-at-0-0", "tpu-2x2-at-0-2", "tpu-2x4-at-0-0"},
			sets:     1,
			problems: []string{"DuplicateHost@1.0,1.1", "MissingHost@1.0", "MissingHost@1.1"},
		},
		{
			name: "two nodes with one hostname: both positions are missing",
			spec: func() Spec {
				s := kepSpec()
				s.Hosts.Hosts[Coord{0, 0}] = Host{Node: "node-1", Hostname: "same"}
				s.Hosts.Hosts[Coord{0, 1}] = Host{Node: "node-2", Hostname: "same"}
				s.MissingHosts = PublishAvailable
				return s
			}(),
			devices:  []string{"tpu-2x2-at-2-0", "tpu-2x2-at-2-2", "tpu-2x4-at-2-0"},
			sets:     1,
			problems: []string{"DuplicateHost@0.0,0.1", "MissingHost@0.0", "MissingHost@0.1"},
		},
		{
			name: "invalid node name and hostname: the positions are missing",
			spec: func() Spec {
				s := kepSpec()
				s.Hosts.Hosts[Coord{0, 0}] = Host{Node: "Node_1"}
				s.Hosts.Hosts[Coord{0, 1}] = Host{Node: "node-2", Hostname: "bad hostname"}
				s.Hosts.Hosts[Coord{1, 0}] = Host{Node: strings.Repeat("n", 70)}
				s.MissingHosts = PublishAvailable
				return s
			}(),
			devices:  []string{"tpu-2x2-at-2-2"},
			sets:     1,
			problems: []string{"InvalidHost@0.0", "InvalidHost@0.1", "InvalidHost@1.0", "MissingHost@0.0", "MissingHost@0.1", "MissingHost@1.0"},
		},
		{
			name: "a node name too long for the hosts list is fine without the list",
			spec: func() Spec {
				s := kepSpec()
				s.Hosts.Hosts[Coord{1, 0}] = Host{Node: strings.Repeat("n", 70), Hostname: "node-5"}
				s.OmitHostsAttribute = true
				return s
			}(),
			devices: []string{"tpu-2x2-at-0-0", "tpu-2x2-at-0-2", "tpu-2x2-at-2-0", "tpu-2x2-at-2-2", "tpu-2x4-at-0-0", "tpu-2x4-at-2-0", "tpu-4x4-at-0-0"},
			sets:    1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Generate(tt.spec, 3)
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			sum := res.Summary
			if sum.Withheld != tt.withheld {
				t.Errorf("withheld = %v, want %v", sum.Withheld, tt.withheld)
			}
			if got := reasons(sum.Problems); !slices.Equal(got, tt.problems) {
				t.Errorf("problems = %q, want %q", got, tt.problems)
			}
			if got := deviceNames(res); !slices.Equal(got, tt.devices) {
				t.Errorf("devices = %q, want %q", got, tt.devices)
			}
			if sum.Devices != len(tt.devices) || sum.CounterSets != tt.sets || sum.Slices != len(res.Slices) {
				t.Errorf("summary devices/sets/slices = %d/%d/%d, want %d/%d/%d", sum.Devices, sum.CounterSets, sum.Slices, len(tt.devices), tt.sets, len(res.Slices))
			}
			if sum.GridHosts != 4 {
				t.Errorf("grid hosts = %d, want 4", sum.GridHosts)
			}
			if tt.withheld {
				if len(res.Slices) != 0 {
					t.Errorf("withheld pool has %d slices", len(res.Slices))
				}
				return
			}
			checkSlices(t, tt.spec, res.Slices)
			for _, s := range res.Slices {
				if s.Spec.Pool.Generation != 3 {
					t.Errorf("slice %s: generation %d, want 3", s.Name, s.Spec.Pool.Generation)
				}
			}
		})
	}
}
