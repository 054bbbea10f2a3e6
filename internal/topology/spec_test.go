package topology

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
)

// fullGrid returns a HostMap with a node "h-<coords>" at every position.
func fullGrid(grid []int) HostMap {
	hm, err := FullHostMap(grid, func(coords string) string {
		return "h-" + strings.ReplaceAll(coords, ".", "-")
	})
	if err != nil {
		panic(err) // test grids are valid
	}
	return hm
}

// tpuSpec is a 4x4-host pool of 2x2-chip hosts with the shapes of the
// KEP-4815 motivating example (8x8 chips in all).
func tpuSpec() Spec {
	return Spec{
		Driver:       "tpu.example.com",
		Pool:         "tpu-a",
		Domain:       "domain-a",
		HostGrid:     []int{4, 4},
		ChipsPerHost: []int{2, 2},
		Partitions:   []string{"2x2", "2x4", "4x4", "4x8", "8x8"},
		Hosts:        fullGrid([]int{4, 4}),
	}
}

// TestGenerateRejectsInvalidSpecs lists what makes a spec invalid and what
// the error says about it.
func TestGenerateRejectsInvalidSpecs(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Spec)
		want   []string // substrings of the error
	}{
		{"no driver", func(s *Spec) { s.Driver = "" }, []string{"driver: required"}},
		{"driver not a DNS subdomain", func(s *Spec) { s.Driver = "TPU_example" }, []string{`driver "TPU_example"`}},
		{"no pool", func(s *Spec) { s.Pool = "" }, []string{"pool: required"}},
		{"pool not DNS subdomains", func(s *Spec) { s.Pool = "a//b" }, []string{"is not a DNS subdomain"}},
		{"no domain", func(s *Spec) { s.Domain = "" }, []string{"domain: required"}},
		{"domain too long for an attribute", func(s *Spec) { s.Domain = strings.Repeat("d", 65) }, []string{"longer than 64"}},
		{"bad device name prefix", func(s *Spec) { s.DeviceNamePrefix = "TPU" }, []string{`device name prefix "TPU"`}},
		{"bad chip name", func(s *Spec) { s.ChipName = "tpu-chips" }, []string{`chip name "tpu-chips"`}},
		{"unknown policy", func(s *Spec) { s.MissingHosts = "Sometimes" }, []string{`missing hosts policy "Sometimes"`}},
		{"no grid", func(s *Spec) { s.HostGrid = nil }, []string{"host grid []: want 1 to 3 dimensions"}},
		{"4-D grid", func(s *Spec) { s.HostGrid = []int{2, 2, 2, 2} }, []string{"want 1 to 3 dimensions"}},
		{"zero hosts along a dimension", func(s *Spec) { s.HostGrid = []int{4, 0} }, []string{"dimension 1 must be between 1"}},
		{"chips per host with other dimensions", func(s *Spec) { s.ChipsPerHost = []int{4} }, []string{"chips per host [4] has 1 dimensions but the host grid [4 4] has 2"}},
		{"too many hosts", func(s *Spec) { s.HostGrid = []int{1000, 1000} }, []string{"more than 16384 hosts"}},
		{"too many chips per host", func(s *Spec) { s.ChipsPerHost = []int{100, 100} }, []string{"more than 4096 chips per host"}},
		{"no partitions", func(s *Spec) { s.Partitions = nil }, []string{"at least one shape"}},
		{"unparsable shape", func(s *Spec) { s.Partitions = []string{"2x"} }, []string{`shape "2x", dimension 1: missing number`}},
		{"shape with other dimensions", func(s *Spec) { s.Partitions = []string{"2x2x2"} }, []string{"partition 2x2x2: has 3 dimensions but the grid has 2"}},
		{"shape larger than the grid", func(s *Spec) { s.Partitions = []string{"16x2"} }, []string{"partition 16x2: 16 chips along dimension 0, but the grid has 8"}},
		{"shape that does not divide the grid", func(s *Spec) { s.HostGrid = []int{3, 4}; s.Partitions = []string{"4x2"} }, []string{"partition 4x2: 4 chips along dimension 0 do not divide the grid's 6 evenly"}},
		{"shape that straddles hosts", func(s *Spec) {
			s.HostGrid, s.ChipsPerHost, s.Partitions = []int{3}, []int{4}, []string{"6"}
		}, []string{"partition 6: 6 chips along dimension 0 is neither a multiple nor a divisor of the 4 chips per host"}},
		{"shape listed twice", func(s *Spec) { s.Partitions = []string{"2x4", "2x4"} }, []string{"partition 2x4: listed twice"}},
		{"two partial shapes", func(s *Spec) { s.Partitions = []string{"1x1", "1x2", "2x2"} }, []string{"partitions 1x1, 1x2: each covers only part of a host", "at most one partial shape"}},
		{"a device would list too many hosts", func(s *Spec) {
			s.HostGrid, s.ChipsPerHost, s.Partitions = []int{8, 8}, []int{1, 1}, []string{"8x8"}
		}, []string{"partition 8x8: spans 64 hosts", "68 attribute values", "ResourceSliceMaxAttributeValuesPerDevice", "OmitHostsAttribute"}},
		{"a device would consume too many counters", func(s *Spec) {
			s.HostGrid, s.ChipsPerHost, s.Partitions, s.OmitHostsAttribute = []int{16, 8}, []int{1, 1}, []string{"16x8"}, true
		}, []string{"partition 16x8: spans 128 hosts, but a device can consume at most 64 counters"}},
		{"no block grouping for one shape", func(s *Spec) {
			s.HostGrid, s.ChipsPerHost, s.Partitions, s.OmitHostsAttribute = []int{7, 9}, []int{1, 1}, []string{"1x1", "7x9"}, true
		}, []string{"partitions 7x9 (spans 7x9 hosts): no grouping of the 7x9 hosts into counter sets of at most 32 hosts", "within 2 counter sets"}},
		{"no block grouping for two shapes together", func(s *Spec) {
			s.HostGrid, s.ChipsPerHost, s.Partitions, s.OmitHostsAttribute = []int{9, 9}, []int{1, 1}, []string{"3x9", "9x3"}, true
		}, []string{"partitions 3x9, 9x3: each can be grouped", "no single grouping of the 9x9 hosts"}},
		{"device names too long", func(s *Spec) { s.DeviceNamePrefix = strings.Repeat("p", 55) }, []string{"device names such as", "use a shorter DeviceNamePrefix"}},
		{"attribute with a bad name", func(s *Spec) {
			s.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"not-c": {StringValue: ptr.To("x")}}
		}, []string{`attribute "not-c"`, "C identifier"}},
		{"attribute that shadows a generated one", func(s *Spec) {
			s.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"tpu.example.com/shape": {StringValue: ptr.To("x")}}
		}, []string{`attribute "tpu.example.com/shape": the name is written by the multi-host publisher`}},
		{"attribute spelled twice", func(s *Spec) {
			s.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"gen": {StringValue: ptr.To("v5")}, "tpu.example.com/gen": {StringValue: ptr.To("v5")},
			}
		}, []string{"the same attribute of driver tpu.example.com spelled twice"}},
		{"attribute without a value", func(s *Spec) {
			s.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"gen": {}}
		}, []string{`attribute "gen": exactly one value must be set, found 0`}},
		{"attribute with two values", func(s *Spec) {
			s.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"gen": {StringValue: ptr.To("a"), IntValue: ptr.To[int64](1)}}
		}, []string{"found 2"}},
		{"attribute with an empty list", func(s *Spec) {
			s.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"gen": {StringValues: []string{}}}
		}, []string{"must not be empty"}},
		{"attribute value too long", func(s *Spec) {
			s.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"gen": {StringValue: ptr.To(strings.Repeat("v", 65))}}
		}, []string{"longer than 64"}},
		{"too many attributes", func(s *Spec) {
			s.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
			for i := 0; i < 27; i++ {
				s.Attributes[resourceapi.QualifiedName("a"+strings.Repeat("x", i))] = resourceapi.DeviceAttribute{BoolValue: ptr.To(true)}
			}
		}, []string{"33 attributes and capacities per device, more than the limit of 32"}},
		{"several reasons at once", func(s *Spec) { s.Driver = ""; s.Partitions = []string{"3x3"} }, []string{"driver: required", "partition 3x3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := tpuSpec()
			tt.modify(&spec)
			res, err := Generate(spec, 1)
			if err == nil {
				t.Fatalf("Generate accepted the spec and made %d slices; want an error", len(res.Slices))
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q:\n%v", w, err)
				}
			}
			if !strings.Contains(err.Error(), `pool "`+spec.Pool+`"`) {
				t.Errorf("error does not name the pool: %v", err)
			}
		})
	}
}

func TestGenerateRejectsNegativeGeneration(t *testing.T) {
	if _, err := Generate(tpuSpec(), -1); err == nil || !strings.Contains(err.Error(), "generation -1") {
		t.Fatalf("error = %v, want a generation error", err)
	}
}

// TestGenerateAcceptsLimitCases pins specs that sit exactly at a limit.
func TestGenerateAcceptsLimitCases(t *testing.T) {
	tests := []struct {
		name    string
		modify  func(*Spec)
		devices int
		sets    int
	}{
		{"a 64-host device without the hosts list uses two full counter sets", func(s *Spec) {
			s.HostGrid, s.ChipsPerHost, s.Partitions, s.OmitHostsAttribute = []int{8, 8}, []int{1, 1}, []string{"8x8"}, true
			s.Hosts = fullGrid(s.HostGrid)
		}, 1, 2},
		{"a 44-host device still fits the hosts list", func(s *Spec) {
			s.HostGrid, s.ChipsPerHost, s.Partitions = []int{44}, []int{1}, []string{"44"}
			s.Hosts = fullGrid(s.HostGrid)
		}, 1, 2},
		{"one partial shape next to whole-host ones", func(s *Spec) { s.Partitions = []string{"1x2", "2x2", "4x4"} }, 32 + 16 + 4, 1},
		{"a shape partial along one dimension and spanning hosts along the other", func(s *Spec) { s.Partitions = []string{"1x4", "4x4"} }, 16 + 4, 1},
		{"32 extra attributes minus the generated ones", func(s *Spec) {
			s.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
			for i := 0; i < 26; i++ {
				s.Attributes[resourceapi.QualifiedName("a"+strings.Repeat("x", i))] = resourceapi.DeviceAttribute{BoolValue: ptr.To(true)}
			}
		}, 16 + 8 + 4 + 2 + 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := tpuSpec()
			tt.modify(&spec)
			res, err := Generate(spec, 1)
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			if res.Summary.Devices != tt.devices || res.Summary.CounterSets != tt.sets {
				t.Errorf("devices, counter sets = %d, %d; want %d, %d", res.Summary.Devices, res.Summary.CounterSets, tt.devices, tt.sets)
			}
			checkSlices(t, spec, res.Slices)
		})
	}
}
