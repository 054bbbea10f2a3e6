package cli

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// explainScenarios are the obstacles of issues 13 and 21, one file each,
// run on testdata/explain/base.yaml (with args, under other feature
// gates), with words the verdict must contain: each file's single
// obstacle is known by construction, so the verdict must name it.
var explainScenarios = []struct {
	name string
	want []string
	args []string
}{
	{"selector", []string{"request gpu: 2 devices match the class on node-1, node-2, 0 after selector 1", `quantity("160Gi")`}, nil},
	{"class", []string{"0 after class nic.example.com selector 1"}, nil},
	{"taint", []string{"0 after taints not tolerated"}, nil},
	{"allocated", []string{"0 after devices allocated to ml/team-a"}, nil},
	{"counter", []string{"on node-3", "counter set mem counter memory needs 30Gi, 10Gi left"}, nil},
	{"match-attribute", []string{"on node-1", "no value of gpu.example.com/numa is shared by enough devices"}, nil},
	{"distinct-attribute", []string{"on node-2", "fewer than 2 different values of gpu.example.com/numa"}, nil},
	{"cel-constraint", []string{"enough devices for every request", "CEL constraints"}, nil},
	{"invalid-pool", []string{"on node-1", "pools not used: broken.example.com/node-1-broken (Invalid, MissingCounterSet)"}, nil},
	{"incomplete-pool", []string{"on node-2", "pools not used: fpga.example.com/node-2-fpga (Incomplete, IncompletePool: 1 of 2 slices)"}, nil},
	{"capacity", []string{"on node-4", "0 after capacity left on shared devices (vnic.example.com/node-4/nic-0 capacity bandwidth needs 40G, 20G left)"}, nil},
	{"fits", []string{"fits on node-2: default/h100 gpu: gpu.example.com/node-2/gpu-0"}, nil},
	// Issue 21: counts on the first step, the closest miss by candidates
	// left, the cause first for a missing class, and gates that are off.
	{"too-few", []string{"request gpus: 2 devices on node-1, node-2; 3 needed"}, nil},
	{"closest-left", []string{"enough devices for every request on node-7, but request accs: fewer than 3 different values of acc.example.com/numa"}, nil},
	{"missing-class", []string{`request fpga: device class "fpga.example.com" does not exist`}, nil},
	{"gate-list", []string{"on node-5", "no value of resource.kubernetes.io/pcieRoot is shared by enough devices (DRAListTypeAttributes is off: a device's list of values matches no other device)"}, nil},
	{"gate-node-operations", []string{"on node-5", "0 after devices refused (DRAOptionalNodeOperations is off: the device's slice skips node operations)"},
		[]string{"--features", "DRAListTypeAttributes=true"}},
	{"gate-compat-groups", []string{"on node-1", "pools not used: part.example.com/node-1-part (Invalid, FeatureGateDisabled: DRADeviceCompatibilityGroups is off and slice node-1-parts declares compatibility groups)"}, nil},
	{"gate-partitionable", []string{"on node-5", "0 after devices refused (DRAPartitionableDevices is off: the device consumes counters)",
		"pools not used: part.example.com/shared (FeatureGateDisabled: DRAPartitionableDevices is off and slice node-5-shared selects nodes per device)"},
		[]string{"--features", "DRAPartitionableDevices=false"}},
	{"gate-binding", []string{"on node-5", "0 after devices refused (DRADeviceBindingConditions and DRAResourceClaimDeviceStatus are not both on: the device has binding conditions)"},
		[]string{"--features", "DRADeviceBindingConditions=false"}},
	{"gate-claim", []string{"invalid claim", "spec.devices.requests[0].exactly.adminAccess", "the DRAAdminAccess feature is disabled"},
		[]string{"--features", "DRAAdminAccess=false"}},
}

// TestSimulateExplainSeedScenarios pins simulate --explain for the seed
// scenarios (test/scenarios): every claim explained, allocated or not.
func TestSimulateExplainSeedScenarios(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("..", "..", "test", "scenarios", "*", "cluster.yaml"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no seed scenarios found: %v", err)
	}
	for _, file := range dirs {
		name := filepath.Base(filepath.Dir(file))
		t.Run(name, func(t *testing.T) {
			code, table, stderr := run(t, "", nil, "simulate", "--explain", "-f", file)
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if !strings.HasPrefix(table, "Claim ") {
				t.Errorf("output does not start with a claim's verdict: %q", firstLine(table))
			}
			golden(t, "explain-seed-"+name+".txt", table)
		})
	}
}

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}

// TestSimulateExplainGolden pins the table and the JSON of simulate
// --explain for every kind of obstacle and for a claim that fits.
func TestSimulateExplainGolden(t *testing.T) {
	for _, sc := range explainScenarios {
		t.Run(sc.name, func(t *testing.T) {
			files := append([]string{"-f", "testdata/explain/base.yaml", "-f", "testdata/explain/" + sc.name + ".yaml"}, sc.args...)
			code, table, stderr := run(t, "", nil, append([]string{"simulate", "--explain"}, files...)...)
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			code, js, stderr := run(t, "", nil, append([]string{"simulate", "--explain", "-o", "json"}, files...)...)
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var out ExplainOutput
			if err := unmarshalOutput("json", js, &out); err != nil {
				t.Fatalf("JSON does not decode strictly: %v", err)
			}
			if len(out.Explanations) != 1 {
				t.Fatalf("%d explanations, want 1", len(out.Explanations))
			}
			first := firstLine(table)
			if !strings.Contains(first, out.Explanations[0].Verdict) {
				t.Errorf("table does not start with the verdict %q: %q", out.Explanations[0].Verdict, first)
			}
			containsAll(t, "verdict", out.Explanations[0].Verdict, sc.want...)
			golden(t, "explain-"+sc.name+".txt", table+"---\n"+js)
		})
	}
}

// TestSimulateExplainYAML checks that -o yaml has the keys of -o json.
func TestSimulateExplainYAML(t *testing.T) {
	files := []string{"-f", "testdata/explain/base.yaml", "-f", "testdata/explain/counter.yaml"}
	_, js, _ := run(t, "", nil, append([]string{"simulate", "--explain", "-o", "json"}, files...)...)
	code, y, stderr := run(t, "", nil, append([]string{"simulate", "--explain", "-o", "yaml"}, files...)...)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var a, b ExplainOutput
	if err := unmarshalOutput("json", js, &a); err != nil {
		t.Fatal(err)
	}
	if err := unmarshalOutput("yaml", y, &b); err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Errorf("yaml and json differ:\n%s\n%s", ja, jb)
	}
}

// TestSimulateExplainUsage: --explain is the native engine's, and explains
// every candidate node, so --node is refused.
func TestSimulateExplainUsage(t *testing.T) {
	for _, args := range [][]string{
		{"simulate", "--explain", "--engine", "upstream", "-f", "testdata/explain/base.yaml"},
		{"simulate", "--explain", "--node", "node-1", "-f", "testdata/explain/base.yaml"},
	} {
		if code, _, _ := run(t, "", nil, args...); code != ExitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, ExitUsage)
		}
	}
}

// TestSimulateExplainSequence: a claim explained as fitting is allocated
// for the claims after it, so the second one names the first as holder.
func TestSimulateExplainSequence(t *testing.T) {
	claims := `
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: first}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.example.com, count: 4}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: second}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.example.com, count: 2}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: third}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.example.com, count: 2}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: fourth}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.example.com}
`
	code, js, stderr := run(t, claims, nil, "simulate", "--explain", "-o", "json", "-f", "testdata/explain/base.yaml", "-f", "-")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var out ExplainOutput
	if err := unmarshalOutput("json", js, &out); err != nil {
		t.Fatal(err)
	}
	var fits []bool
	for _, r := range out.Explanations {
		fits = append(fits, r.Fits)
	}
	if want := []bool{false, true, true, false}; !slices.Equal(fits, want) {
		t.Fatalf("fits %v, want %v", fits, want)
	}
	containsAll(t, "verdict of the fourth claim", out.Explanations[3].Verdict, "allocated to default/second")
}
