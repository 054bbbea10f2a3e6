package topology

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// kepSpec is the KEP-4815 "Defining multi-host devices" example: a 4x4-chip
// TPU slice on four hosts of 2x2 chips (nodes 1, 2, 5 and 6 of a 16-node
// pool numbered row by row, four per row), partitioned as one 4x4, two 2x4
// and four 2x2 devices.
func kepSpec() Spec {
	return Spec{
		Driver:           "tpu.dra.example.com",
		Pool:             "my-pool",
		Domain:           "my-pool",
		HostGrid:         []int{2, 2},
		ChipsPerHost:     []int{2, 2},
		Partitions:       []string{"4x4", "2x4", "2x2"},
		DeviceNamePrefix: "tpu",
		ChipName:         "tpus",
		Hosts: HostMap{Hosts: map[Coord]Host{
			{0, 0}: {Node: "node-1"},
			{0, 1}: {Node: "node-2"},
			{1, 0}: {Node: "node-5"},
			{1, 1}: {Node: "node-6"},
		}},
	}
}

// marshalSlices writes slices as a multi-document YAML stream.
func marshalSlices(t *testing.T, slices []*resourceapi.ResourceSlice) []byte {
	t.Helper()
	var buf bytes.Buffer
	for i, s := range slices {
		if i > 0 {
			buf.WriteString("---\n")
		}
		out, err := yaml.Marshal(s)
		if err != nil {
			t.Fatalf("marshal slice %s: %v", s.Name, err)
		}
		buf.Write(out)
	}
	return buf.Bytes()
}

// TestGoldenKEP4815 reproduces the KEP-4815 multi-host TPU example with its
// mistakes fixed: the two slices have different names, every device
// consumes from the counter set that exists, the node selector operator is
// "In" (the KEP writes "IN"), and the counter slice sets
// perDeviceNodeSelection (the API server requires a node selection on
// every slice).
func TestGoldenKEP4815(t *testing.T) {
	res, err := Generate(kepSpec(), 1)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	got := marshalSlices(t, res.Slices)
	path := filepath.Join("testdata", "kep4815-tpu.yaml")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run with -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("generated slices differ from %s (run with -update after checking the change):\n%s", path, got)
	}
	checkSlices(t, kepSpec(), res.Slices)
}

// TestKEP4815Equivalence checks the generated pool against the devices of
// the KEP example itself (names aside: the KEP numbers its devices, we name
// them by placement), so the golden file cannot drift away from the KEP
// unnoticed when it is regenerated.
func TestKEP4815Equivalence(t *testing.T) {
	// The KEP's devices: node selection and capacity "tpus".
	kep := []struct {
		kepName string
		nodes   []string
		tpus    int64
	}{
		{"tpu-4x4-1", []string{"node-1", "node-2", "node-5", "node-6"}, 16},
		{"tpu-2x4-1", []string{"node-1", "node-2"}, 8},
		{"tpu-2x4-2", []string{"node-5", "node-6"}, 8},
		{"tpu-2x2-1", []string{"node-1"}, 4},
		{"tpu-2x2-2", []string{"node-2"}, 4},
		{"tpu-2x2-3", []string{"node-5"}, 4},
		{"tpu-2x2-4", []string{"node-6"}, 4},
	}
	res, err := Generate(kepSpec(), 1)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	// Like the KEP: one counter slice, one device slice, one counter set
	// with a counter of 4 TPUs per node.
	if len(res.Slices) != 2 || len(res.Slices[0].Spec.SharedCounters) != 1 || len(res.Slices[1].Spec.Devices) != len(kep) {
		t.Fatalf("want 2 slices (1 counter set, %d devices), got %d slices", len(kep), len(res.Slices))
	}
	if res.Slices[0].Name == res.Slices[1].Name {
		t.Errorf("both slices are named %s", res.Slices[0].Name)
	}
	set := res.Slices[0].Spec.SharedCounters[0]
	if len(set.Counters) != 4 {
		t.Errorf("counter set %s has %d counters, want one per node", set.Name, len(set.Counters))
	}
	for name, c := range set.Counters {
		if c.Value.Value() != 4 {
			t.Errorf("counter %s = %s, want 4", name, c.Value.String())
		}
	}
	nodesOf := func(d *resourceapi.Device) []string {
		if d.NodeName != nil {
			return []string{*d.NodeName}
		}
		return d.NodeSelector.NodeSelectorTerms[0].MatchExpressions[0].Values
	}
	used := map[string]bool{}
	for _, k := range kep {
		var match *resourceapi.Device
		for _, d := range allDevices(res.Slices) {
			capacity := d.Capacity["tpus"].Value
			if slices.Equal(nodesOf(d), k.nodes) && capacity.Value() == k.tpus {
				match = d
			}
		}
		if match == nil {
			t.Errorf("no generated device matches %s (nodes %v, %d tpus)", k.kepName, k.nodes, k.tpus)
			continue
		}
		used[match.Name] = true
		for _, c := range match.ConsumesCounters {
			if c.CounterSet != set.Name {
				t.Errorf("%s (%s) consumes from %s, want the pool's counter set %s", match.Name, k.kepName, c.CounterSet, set.Name)
			}
			if len(c.Counters) != len(k.nodes) {
				t.Errorf("%s (%s) consumes %d counters, want one per node", match.Name, k.kepName, len(c.Counters))
			}
			for name, v := range c.Counters {
				if v.Value.Value() != 4 {
					t.Errorf("%s (%s) consumes %s of %s, want all 4", match.Name, k.kepName, v.Value.String(), name)
				}
			}
		}
		if len(k.nodes) > 1 && match.NodeSelector.NodeSelectorTerms[0].MatchExpressions[0].Operator != "In" {
			t.Errorf("%s: operator %q, want In", match.Name, match.NodeSelector.NodeSelectorTerms[0].MatchExpressions[0].Operator)
		}
	}
	if len(used) != len(kep) {
		t.Errorf("%d distinct generated devices match the KEP's %d", len(used), len(kep))
	}
}
