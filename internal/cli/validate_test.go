package cli

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestValidateExitCodesAndMessages(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		stdin      string
		wantCode   int
		wantStdout []string // substrings of stdout
		wantStderr []string // substrings of stderr
		quietErr   bool     // stderr must be empty
	}{{
		name:       "healthy pools exit 0 and show allocations from claims",
		args:       []string{"validate", "-f", "testdata/healthy.yaml"},
		wantCode:   ExitOK,
		wantStdout: []string{"gpu.example.com", "node-1", "Healthy"},
		quietErr:   true,
	}, {
		name:       "an invalid pool is still exit 0 without --strict",
		args:       []string{"validate", "-f", "testdata/missing-counter.yaml"},
		wantCode:   ExitOK,
		wantStdout: []string{"Invalid", "MissingCounter", "memorySlice9"},
		quietErr:   true,
	}, {
		name:       "--strict exits 3 when a pool is Invalid",
		args:       []string{"validate", "--strict", "-f", "testdata/missing-counter.yaml"},
		wantCode:   ExitUnhealthy,
		wantStdout: []string{"MissingCounter"},
		wantStderr: []string{"1 of 1 pools are not Healthy"},
	}, {
		name:       "--strict exits 3 when a pool is Incomplete",
		args:       []string{"validate", "--strict", "-f", "testdata/incomplete.yaml", "-o", "json"},
		wantCode:   ExitUnhealthy,
		wantStdout: []string{`"health": "Incomplete"`},
	}, {
		name:     "--strict exits 0 when every pool is Healthy",
		args:     []string{"validate", "--strict", "-f", "testdata/healthy.yaml"},
		wantCode: ExitOK,
		quietErr: true,
	}, {
		name:       "a slice over a per-slice limit is an Error offline",
		args:       []string{"validate", "-f", "testdata/over-limit.yaml"},
		wantCode:   ExitOK,
		wantStdout: []string{"Invalid", "Error TooManyCounterSets (slice node-1-counters): slice node-1-counters defines 9 counter sets, more than the limit of 8"},
		quietErr:   true,
	}, {
		name:       "--strict exits 3 on a slice over a per-slice limit",
		args:       []string{"validate", "--strict", "-f", "testdata/over-limit.yaml", "-o", "json"},
		wantCode:   ExitUnhealthy,
		wantStdout: []string{`"reason": "TooManyCounterSets"`, `"severity": "Error"`, `"health": "Invalid"`},
		wantStderr: []string{"1 of 1 pools are not Healthy"},
	}, {
		name:       "simulate keeps the live view: a limit is a Warning",
		args:       []string{"simulate", "-f", "testdata/over-limit.yaml", "-o", "json"},
		wantCode:   ExitOK,
		wantStdout: []string{`"reason": "TooManyCounterSets"`, `"severity": "Warning"`, `"health": "Healthy"`},
		quietErr:   true,
	}, {
		name:       "compatibility groups under Kubernetes 1.37 defaults (gate off)",
		args:       []string{"validate", "--strict", "-f", "testdata/compat-groups.yaml"},
		wantCode:   ExitUnhealthy,
		wantStdout: []string{"Invalid", "FeatureGateDisabled", "DRADeviceCompatibilityGroups feature gate is off"},
		wantStderr: []string{"1 of 1 pools are not Healthy"},
	}, {
		name:     "compatibility groups with the gate on",
		args:     []string{"validate", "--strict", "--features", "DRADeviceCompatibilityGroups=true", "-f", "testdata/compat-groups.yaml"},
		wantCode: ExitOK,
		quietErr: true,
	}, {
		name:     "compatibility groups with every gate on",
		args:     []string{"validate", "--strict", "--features", "all=true", "-f", "testdata/compat-groups.yaml"},
		wantCode: ExitOK,
		quietErr: true,
	}, {
		name:       "an unknown feature gate is a usage error",
		args:       []string{"validate", "--features", "DRANoSuchGate=true", "-f", "testdata/healthy.yaml"},
		wantCode:   ExitUsage,
		wantStderr: []string{`unknown feature "DRANoSuchGate"`},
	}, {
		name:       "stdin with -f -",
		args:       []string{"validate", "-f", "-", "-o", "json"},
		stdin:      mustRead("testdata/missing-counter.yaml"),
		wantCode:   ExitOK,
		wantStdout: []string{`"reason": "MissingCounter"`},
	}, {
		name:       "several files and a directory are read together",
		args:       []string{"validate", "-f", "testdata/healthy.yaml", "-f", "testdata/dir"},
		wantCode:   ExitOK,
		wantStdout: []string{"node-1", "node-2", "node-4"},
	}, {
		name:       "unknown field names file, document, object and field",
		args:       []string{"validate", "-f", "testdata/unknown-field.yaml"},
		wantCode:   ExitInvalidInput,
		wantStderr: []string{"testdata/unknown-field.yaml", "document 2 (line 6)", "ResourceSlice node-1-gpu", `unknown field "spec.devices[0].atributes"`},
	}, {
		name:       "malformed YAML names the document and the line in the file",
		args:       []string{"validate", "-f", "testdata/malformed.yaml"},
		wantCode:   ExitInvalidInput,
		wantStderr: []string{"testdata/malformed.yaml", "document 2 (line 6)", "malformed YAML", "line 12"},
	}, {
		name:       "a value of the wrong type names the field",
		args:       []string{"validate", "-f", "-"},
		stdin:      "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: s}\nspec: {driver: d, allNodes: true, pool: {name: p, generation: one, resourceSliceCount: 1}}\n",
		wantCode:   ExitInvalidInput,
		wantStderr: []string{"<stdin>: document 1 (line 1)", "ResourceSlice s", `"spec.pool.generation"`},
	}, {
		name:       "a duplicated key is an error",
		args:       []string{"validate", "-f", "-"},
		stdin:      "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nmetadata: {name: m}\n",
		wantCode:   ExitInvalidInput,
		wantStderr: []string{"document 1", "metadata"},
	}, {
		name:       "a document that is not a mapping",
		args:       []string{"validate", "-f", "-"},
		stdin:      "---\n- a\n- b\n",
		wantCode:   ExitInvalidInput,
		wantStderr: []string{"<stdin>: document 1 (line 2)", "not an object"},
	}, {
		name:       "a document without kind",
		args:       []string{"validate", "-f", "-"},
		stdin:      "apiVersion: v1\nmetadata: {name: n}\n",
		wantCode:   ExitInvalidInput,
		wantStderr: []string{"document 1", "kind: required"},
	}, {
		name:       "an object without a name",
		args:       []string{"validate", "-f", "-"},
		stdin:      "apiVersion: v1\nkind: Node\n",
		wantCode:   ExitInvalidInput,
		wantStderr: []string{"document 1", "Node: metadata.name: required"},
	}, {
		name:       "a slice without pool name",
		args:       []string{"validate", "-f", "-"},
		stdin:      "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: s}\nspec: {driver: d, allNodes: true, pool: {generation: 1, resourceSliceCount: 1}}\n",
		wantCode:   ExitInvalidInput,
		wantStderr: []string{"ResourceSlice s: spec.pool.name: required"},
	}, {
		name:       "the same object twice",
		args:       []string{"validate", "-f", "testdata/healthy.yaml", "-f", "testdata/healthy.yaml"},
		wantCode:   ExitInvalidInput,
		wantStderr: []string{"document 1 (line 3)", "DeviceClass gpu.example.com", "defined twice"},
	}, {
		name:       "a file that does not exist",
		args:       []string{"validate", "-f", "testdata/nope.yaml"},
		wantCode:   ExitInvalidInput,
		wantStderr: []string{"testdata/nope.yaml", "no such file"},
	}, {
		name:       "unknown kinds and other versions are skipped with a warning",
		args:       []string{"validate", "-f", "testdata/unknown-kind.yaml"},
		wantCode:   ExitOK,
		wantStdout: []string{"node-3", "Healthy"},
		wantStderr: []string{"warning: testdata/unknown-kind.yaml: document 1 (line 1): skipping v1 ConfigMap settings", "document 2 (line 8): skipping resource.k8s.io/v1beta1 ResourceSlice old-api"},
	}, {
		name:       "an allocation from a pool that is not in the input is warned about",
		args:       []string{"validate", "-f", "testdata/healthy.yaml", "-f", "testdata/orphan.yaml"},
		wantCode:   ExitOK,
		wantStdout: []string{"node-1", "Healthy"},
		wantStderr: []string{"warning: ResourceClaim ml/orphan is allocated devices of pool gone.example.com/node-7, which no ResourceSlice in the input publishes"},
	}, {
		name:       "a List document (kubectl get -o yaml) is read item by item",
		args:       []string{"validate", "-f", "testdata/list.yaml"},
		wantCode:   ExitInvalidInput,
		wantStderr: []string{"testdata/list.yaml: document 1 (line 1), item 2", "ResourceSlice list-b", `unknown field "spec.color"`},
	}, {
		name:       "a valid List",
		args:       []string{"validate", "-f", "-", "-o", "json"},
		stdin:      "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: resource.k8s.io/v1, kind: ResourceSlice, metadata: {name: a}, spec: {driver: d, allNodes: true, pool: {name: p, generation: 1, resourceSliceCount: 2}, devices: [{name: dev-x}]}}\n- {apiVersion: resource.k8s.io/v1, kind: ResourceSlice, metadata: {name: b}, spec: {driver: d, allNodes: true, pool: {name: p, generation: 1, resourceSliceCount: 2}, devices: [{name: dev-y}]}}\n",
		wantCode:   ExitOK,
		wantStdout: []string{`"slices": 2`, `"devices": 2`, `"health": "Healthy"`},
	}, {
		name:       "no pools at all",
		args:       []string{"validate", "-f", "-"},
		stdin:      "# nothing\n---\n---\n",
		wantCode:   ExitOK,
		wantStderr: []string{"No pools found."},
	}, {
		name:       "no -f is a usage error",
		args:       []string{"validate"},
		wantCode:   ExitUsage,
		wantStderr: []string{"at least one -f FILE is required", "Usage:"},
	}, {
		name:       "unknown output format",
		args:       []string{"validate", "-f", "testdata/healthy.yaml", "-o", "xml"},
		wantCode:   ExitUsage,
		wantStderr: []string{`unknown output format "xml"`},
	}, {
		name:       "unknown flag",
		args:       []string{"validate", "--nope"},
		wantCode:   ExitUsage,
		wantStderr: []string{"unknown flag: --nope"},
	}, {
		name:       "positional arguments",
		args:       []string{"validate", "-f", "testdata/healthy.yaml", "extra"},
		wantCode:   ExitUsage,
		wantStderr: []string{"unexpected arguments"},
	}, {
		name:       "stdin twice",
		args:       []string{"validate", "-f", "-", "-f", "-"},
		wantCode:   ExitUsage,
		wantStderr: []string{"only once"},
	}, {
		name:       "validate --help",
		args:       []string{"validate", "--help"},
		wantCode:   ExitUsage,
		wantStderr: []string{"kubectl dra validate -f FILE", "--strict"},
	}, {
		name:       "no arguments prints usage",
		args:       nil,
		wantCode:   ExitUsage,
		wantStderr: []string{"Usage:", "validate", "simulate", "pools"},
	}, {
		name:       "--help prints usage",
		args:       []string{"--help"},
		wantCode:   ExitUsage,
		wantStderr: []string{"Usage:", "Exit codes"},
	}, {
		name:       "unknown command",
		args:       []string{"frobnicate"},
		wantCode:   ExitUsage,
		wantStderr: []string{`unknown command "frobnicate"`, "Usage:"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := run(t, tt.stdin, nil, tt.args...)
			if code != tt.wantCode {
				t.Errorf("exit code = %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.wantCode, stdout, stderr)
			}
			containsAll(t, "stdout", stdout, tt.wantStdout...)
			containsAll(t, "stderr", stderr, tt.wantStderr...)
			if tt.quietErr && stderr != "" {
				t.Errorf("stderr should be empty, got:\n%s", stderr)
			}
			if code == ExitInvalidInput && !strings.HasPrefix(stderr, "error: invalid input: ") {
				t.Errorf("invalid input should be reported as such, got:\n%s", stderr)
			}
		})
	}
}

// TestValidateJSONContract checks the JSON shape of CLI.md key by key on
// the documented example: an Invalid pool with MissingCounter.
func TestValidateJSONContract(t *testing.T) {
	code, stdout, stderr := run(t, "", nil, "validate", "-f", "testdata/missing-counter.yaml", "-o", "json")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	out := decodeMap(t, []byte(stdout))
	wantKeys(t, "top level", out, "pools")
	pools, ok := out["pools"].([]any)
	if !ok || len(pools) != 1 {
		t.Fatalf("pools = %v, want 1 pool", out["pools"])
	}
	p := pools[0].(map[string]any)
	wantKeys(t, "pool", p, "driver", "pool", "generation", "health", "slices", "devices", "allocatedDevices", "problems")
	problems, ok := p["problems"].([]any)
	if !ok || len(problems) != 1 {
		t.Fatalf("problems = %v, want one", p["problems"])
	}
	wantKeys(t, "problem", problems[0], "reason", "severity", "slice", "device", "message")

	var typed ValidateOutput
	if err := json.Unmarshal([]byte(stdout), &typed); err != nil {
		t.Fatal(err)
	}
	got := typed.Pools[0]
	want := PoolEntry{Driver: "gpu.example.com", Pool: "node-1", Generation: 1, Health: "Invalid", Slices: 2, Devices: 2, AllocatedDevices: 0}
	gotHead := got
	gotHead.Problems = nil
	if !reflect.DeepEqual(gotHead, want) {
		t.Errorf("pool = %+v, want %+v", gotHead, want)
	}
	pr := got.Problems[0]
	if pr.Reason != "MissingCounter" || pr.Severity != "Error" || pr.Slice != "node-1-gpu-abc12" || pr.Device != "gpu-0-mig-1g-0" ||
		!strings.Contains(pr.Message, "memorySlice9") || !strings.Contains(pr.Message, "gpu-0-counter-set") {
		t.Errorf("problem = %+v, want MissingCounter Error on node-1-gpu-abc12/gpu-0-mig-1g-0 about memorySlice9 in gpu-0-counter-set", pr)
	}
}

// TestValidateCountsAndEmptyKeys checks the numbers of a healthy snapshot
// and that problem keys are present even when empty.
func TestValidateCountsAndEmptyKeys(t *testing.T) {
	tests := []struct {
		name string
		file string
		want []PoolEntry
	}{{
		name: "allocations in claims count per pool",
		file: "testdata/healthy.yaml",
		want: []PoolEntry{
			{Driver: "gpu.example.com", Pool: "node-1", Generation: 1, Health: "Healthy", Slices: 1, Devices: 2, AllocatedDevices: 1, Problems: []ProblemEntry{}},
			{Driver: "gpu.example.com", Pool: "node-2", Generation: 1, Health: "Healthy", Slices: 1, Devices: 2, AllocatedDevices: 0, Problems: []ProblemEntry{}},
		},
	}, {
		name: "incomplete pool: IncompletePool at once, stale slices warned",
		file: "testdata/incomplete.yaml",
		want: []PoolEntry{{
			Driver: "net.example.com", Pool: "fabric", Generation: 2, Health: "Incomplete", Slices: 1, Devices: 1,
			Problems: []ProblemEntry{
				{Reason: "IncompletePool", Severity: "Error", Message: "pool has 1 of 2 slices of generation 2"},
				{Reason: "StaleSlices", Severity: "Warning", Message: "pool has 1 slices of older generations (net-old); only generation 2 counts"},
			},
		}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, format := range []string{"json", "yaml"} {
				code, stdout, stderr := run(t, "", nil, "validate", "-f", tt.file, "-o", format)
				if code != ExitOK {
					t.Fatalf("-o %s: exit %d: %s", format, code, stderr)
				}
				var got ValidateOutput
				if err := unmarshalOutput(format, stdout, &got); err != nil {
					t.Fatalf("-o %s: %v", format, err)
				}
				if !reflect.DeepEqual(got.Pools, tt.want) {
					t.Errorf("-o %s: pools =\n%+v\nwant\n%+v", format, got.Pools, tt.want)
				}
			}
		})
	}
}

// TestValidateTableGolden pins the table people read.
func TestValidateTableGolden(t *testing.T) {
	for _, name := range []string{"healthy", "missing-counter", "incomplete", "over-limit", "compat-groups"} {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := run(t, "", nil, "validate", "-f", "testdata/"+name+".yaml")
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			golden(t, "validate-"+name+".txt", stdout)
		})
	}
}

func mustRead(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	return string(data)
}
