package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
)

// want is the expected outcome of one claim: allocated on which node with
// devices from which pool, or not allocated with a reason containing a
// text.
type want struct {
	claim     string
	allocated bool
	node      string // allocated: Result.Node
	pool      string // allocated: every device comes from this pool
	devices   int    // allocated: number of devices
	notDevice string // allocated: a "pool/device" that must not be chosen
	reason    string // not allocated: substring of the reason
}

func TestSimulateResults(t *testing.T) {
	tests := []struct {
		name    string
		engines []string
		args    []string
		want    []want
		// wantAllocated is allocatedDevices per pool after the run.
		wantAllocated map[string]int
	}{{
		name:    "claims in document order; an already allocated device is not reused",
		engines: []string{"native", "upstream"},
		args:    []string{"-f", "testdata/healthy.yaml", "-f", "testdata/claims.yaml"},
		want: []want{
			{claim: "default/one-gpu", allocated: true, node: "node-1", pool: "node-1", devices: 1, notDevice: "node-1/gpu-0"},
			{claim: "team-a/two-h100", allocated: true, node: "node-2", pool: "node-2", devices: 2},
			{claim: "default/too-big", reason: "cannot allocate all claims"},
		},
		wantAllocated: map[string]int{"node-1": 2, "node-2": 2},
	}, {
		name:    "each result counts as allocated for the claims after it",
		engines: []string{"native", "upstream"},
		args:    []string{"-f", "testdata/healthy.yaml", "-f", "testdata/sequence.yaml"},
		want: []want{
			{claim: "default/first", allocated: true, node: "node-2", pool: "node-2", devices: 2},
			{claim: "default/second", reason: "cannot allocate all claims"},
		},
		wantAllocated: map[string]int{"node-1": 1, "node-2": 2},
	}, {
		name:    "--node restricts the search to one node",
		engines: []string{"native", "upstream"},
		args:    []string{"-f", "testdata/healthy.yaml", "-f", "testdata/claims.yaml", "--node", "node-2"},
		want: []want{
			{claim: "default/one-gpu", allocated: true, node: "node-2", pool: "node-2", devices: 1},
			{claim: "team-a/two-h100", reason: "cannot allocate all claims"},
			{claim: "default/too-big", reason: "cannot allocate all claims"},
		},
		wantAllocated: map[string]int{"node-1": 1, "node-2": 1},
	}, {
		name:    "--node of a node without devices allocates nothing",
		engines: []string{"native", "upstream"},
		args:    []string{"-f", "testdata/healthy.yaml", "-f", "testdata/claims.yaml", "--node", "node-9"},
		want: []want{
			{claim: "default/one-gpu", reason: "cannot allocate all claims"},
			{claim: "team-a/two-h100", reason: "cannot allocate all claims"},
			{claim: "default/too-big", reason: "cannot allocate all claims"},
		},
		wantAllocated: map[string]int{"node-1": 1, "node-2": 0},
	}, {
		name:    "nodes named by slices but not in the files are candidates",
		engines: []string{"native", "upstream"},
		args:    []string{"-f", "testdata/unknown-kind.yaml", "-f", "testdata/claims.yaml", "-f", "testdata/class.yaml"},
		want: []want{
			{claim: "default/one-gpu", allocated: true, node: "node-3", pool: "node-3", devices: 1},
			{claim: "team-a/two-h100", reason: "cannot allocate all claims"},
			{claim: "default/too-big", reason: "cannot allocate all claims"},
		},
		wantAllocated: map[string]int{"node-3": 1},
	}, {
		name:    "CEL constraint (KEP-5254) with the native engine",
		engines: []string{"native"},
		args:    []string{"-f", "testdata/healthy.yaml", "-f", "testdata/cel-constraint.yaml"},
		want: []want{
			{claim: "default/adjacent", allocated: true, node: "node-2", pool: "node-2", devices: 2},
		},
		wantAllocated: map[string]int{"node-1": 1, "node-2": 2},
	}, {
		name:    "CEL constraint with the upstream engine is not supported, not an error",
		engines: []string{"upstream"},
		args:    []string{"-f", "testdata/healthy.yaml", "-f", "testdata/cel-constraint.yaml"},
		want: []want{
			{claim: "default/adjacent", reason: "not supported"},
		},
		wantAllocated: map[string]int{"node-1": 1, "node-2": 0},
	}, {
		name:    "a DeviceTaintRule keeps the devices it selects off",
		engines: []string{"native", "upstream"},
		args:    []string{"-f", "testdata/healthy.yaml", "-f", "testdata/taint-rule.yaml"},
		want: []want{
			{claim: "default/one", allocated: true, node: "node-2", pool: "node-2", devices: 1},
		},
		wantAllocated: map[string]int{"node-1": 1, "node-2": 1},
	}, {
		name:    "DeviceTaintRules are ignored with DRADeviceTaintRules off",
		engines: []string{"native", "upstream"},
		args:    []string{"-f", "testdata/healthy.yaml", "-f", "testdata/taint-rule.yaml", "--features", "DRADeviceTaintRules=false"},
		want: []want{
			{claim: "default/one", allocated: true, node: "node-1", pool: "node-1", devices: 1},
		},
		wantAllocated: map[string]int{"node-1": 2, "node-2": 0},
	}, {
		name:    "with every gate off a plain claim is allocated and DeviceTaintRules are ignored",
		engines: []string{"native", "upstream"},
		args:    []string{"-f", "testdata/healthy.yaml", "-f", "testdata/taint-rule.yaml", "--features", "all=false"},
		want: []want{
			{claim: "default/one", allocated: true, node: "node-1", pool: "node-1", devices: 1},
		},
		wantAllocated: map[string]int{"node-1": 2, "node-2": 0},
	}, {
		name:    "a claim using a field whose gate is off is invalid",
		engines: []string{"native", "upstream"},
		args:    []string{"-f", "testdata/healthy.yaml", "-f", "testdata/first-available.yaml", "--features", "DRAPrioritizedList=false"},
		want: []want{
			{claim: "default/either", reason: "spec.devices.requests[0]"},
		},
		wantAllocated: map[string]int{"node-1": 1, "node-2": 0},
	}, {
		name:    "an invalid pool is not allocated from",
		engines: []string{"native", "upstream"},
		args:    []string{"-f", "testdata/missing-counter.yaml", "-f", "testdata/class.yaml", "-f", "testdata/claims.yaml"},
		want: []want{
			{claim: "default/one-gpu", reason: "cannot allocate all claims"},
			{claim: "team-a/two-h100", reason: "cannot allocate all claims"},
			{claim: "default/too-big", reason: "cannot allocate all claims"},
		},
		wantAllocated: map[string]int{"node-1": 0},
	}}
	for _, tt := range tests {
		for _, engine := range tt.engines {
			t.Run(engine+"/"+tt.name, func(t *testing.T) {
				args := append([]string{"simulate", "--engine", engine, "-o", "json"}, tt.args...)
				code, stdout, stderr := run(t, "", nil, args...)
				if code != ExitOK {
					t.Fatalf("exit %d\n%s", code, stderr)
				}
				var out SimulateOutput
				if err := json.Unmarshal([]byte(stdout), &out); err != nil {
					t.Fatalf("decode: %v\n%s", err, stdout)
				}
				if out.Engine != engine {
					t.Errorf("engine = %q, want %q", out.Engine, engine)
				}
				if len(out.Results) != len(tt.want) {
					t.Fatalf("%d results, want %d:\n%s", len(out.Results), len(tt.want), stdout)
				}
				for i, w := range tt.want {
					checkResult(t, out.Results[i], w)
				}
				got := map[string]int{}
				for _, p := range out.Pools {
					got[p.Pool] = p.AllocatedDevices
				}
				if fmt.Sprint(got) != fmt.Sprint(tt.wantAllocated) {
					t.Errorf("allocated devices per pool = %v, want %v", got, tt.wantAllocated)
				}
			})
		}
	}
}

func checkResult(t *testing.T, r ClaimResult, w want) {
	t.Helper()
	if r.Claim != w.claim {
		t.Errorf("claim = %q, want %q", r.Claim, w.claim)
	}
	if r.Seconds < 0 {
		t.Errorf("%s: negative seconds %v", r.Claim, r.Seconds)
	}
	if r.Allocated != w.allocated {
		t.Errorf("%s: allocated = %v (reason %q), want %v", r.Claim, r.Allocated, r.Reason, w.allocated)
		return
	}
	if !w.allocated {
		if !strings.Contains(r.Reason, w.reason) {
			t.Errorf("%s: reason %q does not contain %q", r.Claim, r.Reason, w.reason)
		}
		if r.Allocation != nil {
			t.Errorf("%s: not allocated but has an allocation", r.Claim)
		}
		return
	}
	if r.Node != w.node {
		t.Errorf("%s: node = %q, want %q", r.Claim, r.Node, w.node)
	}
	if r.Allocation == nil {
		t.Fatalf("%s: allocated without allocation", r.Claim)
	}
	results := r.Allocation.Devices.Results
	if len(results) != w.devices {
		t.Errorf("%s: %d devices, want %d: %+v", r.Claim, len(results), w.devices, results)
	}
	seen := map[string]bool{}
	for _, d := range results {
		id := d.Pool + "/" + d.Device
		if d.Pool != w.pool || d.Driver != "gpu.example.com" {
			t.Errorf("%s: device %s/%s, want pool %s", r.Claim, d.Driver, id, w.pool)
		}
		if id == w.notDevice {
			t.Errorf("%s: got %s, which is already allocated", r.Claim, id)
		}
		if seen[id] {
			t.Errorf("%s: %s given twice", r.Claim, id)
		}
		seen[id] = true
	}
	if w.node != "" && !selectsNode(r.Allocation.NodeSelector, w.node) {
		t.Errorf("%s: node selector %+v does not select %s", r.Claim, r.Allocation.NodeSelector, w.node)
	}
}

// selectsNode reports whether a node-local allocation's selector picks node
// by name, the way kube-scheduler writes it (matchFields metadata.name In).
func selectsNode(sel *corev1.NodeSelector, node string) bool {
	if sel == nil {
		return false
	}
	for _, term := range sel.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn && slices.Contains(f.Values, node) {
				return true
			}
		}
	}
	return false
}

// TestSimulateJSONContract checks the keys of both result shapes and of the
// top level (CLI.md).
func TestSimulateJSONContract(t *testing.T) {
	for _, format := range []string{"json", "yaml"} {
		t.Run(format, func(t *testing.T) {
			code, stdout, stderr := run(t, "", nil, "simulate", "-f", "testdata/healthy.yaml", "-f", "testdata/claims.yaml", "-o", format)
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var out map[string]any
			if err := unmarshalOutput(format, stdout, &out); err != nil {
				t.Fatal(err)
			}
			wantKeys(t, "top level", out, "engine", "results", "pools")
			results := out["results"].([]any)
			if len(results) != 3 {
				t.Fatalf("want 3 results, got %v", results)
			}
			wantKeys(t, "allocated result", results[0], "claim", "allocated", "node", "allocation", "seconds")
			wantKeys(t, "failed result", results[2], "claim", "allocated", "reason", "seconds")
			alloc := results[0].(map[string]any)["allocation"]
			wantKeys(t, "allocation", alloc, "devices", "nodeSelector")
			for _, p := range out["pools"].([]any) {
				wantKeys(t, "pool", p, "driver", "pool", "generation", "health", "slices", "devices", "allocatedDevices", "problems")
			}
		})
	}
}

// TestSimulateInvalidClaims: a claim that can never be allocated as written
// is an outcome (not allocated, with the field and where the claim is), not
// invalid input: the exit code stays 0.
func TestSimulateInvalidClaims(t *testing.T) {
	tests := []struct {
		name       string
		engines    []string
		args       []string
		claim      string
		wantField  string
		wantReason []string
	}{{
		name:      "a selector that does not compile names the claim's document and the field",
		engines:   []string{"native", "upstream"},
		args:      []string{"-f", "testdata/healthy.yaml", "-f", "testdata/bad-cel.yaml"},
		claim:     "team-a/bad-selector",
		wantField: "spec.devices.requests[0].exactly.selectors[0].cel.expression",
		wantReason: []string{"invalid claim: ", "testdata/bad-cel.yaml: document 2 (line 12)",
			"spec.devices.requests[0].exactly.selectors[0].cel.expression", "Syntax error"},
	}, {
		name:       "a broken annotation",
		engines:    []string{"native", "upstream"},
		args:       []string{"-f", "testdata/healthy.yaml", "-f", "testdata/bad-annotation.yaml"},
		claim:      "default/broken-constraints",
		wantField:  "metadata.annotations[resource.drastack.io/cel-constraints]",
		wantReason: []string{"testdata/bad-annotation.yaml: document 1", "JSON array"},
	}, {
		name:       "an annotation naming a request the claim does not have",
		engines:    []string{"native", "upstream"},
		args:       []string{"-f", "testdata/healthy.yaml", "-f", "testdata/bad-annotation-request.yaml"},
		claim:      "default/wrong-request",
		wantField:  "metadata.annotations[resource.drastack.io/cel-constraints][0].requests[0]",
		wantReason: []string{`"gpu"`},
	}, {
		name:       "a CEL constraint that does not compile",
		engines:    []string{"native"},
		args:       []string{"-f", "testdata/healthy.yaml", "-f", "testdata/bad-constraint.yaml"},
		claim:      "default/bad-expression",
		wantField:  "metadata.annotations[resource.drastack.io/cel-constraints][0].expression",
		wantReason: []string{"Syntax error"},
	}, {
		// kube-scheduler fails the claim on a selector's runtime error
		// rather than skipping the device, and both engines follow it.
		name:       "a selector failing at run time names the field",
		engines:    []string{"native", "upstream"},
		args:       []string{"-f", "testdata/runtime-error.yaml", "-f", "testdata/class.yaml"},
		claim:      "default/wants-model",
		wantField:  "spec.devices.requests[0].exactly.selectors[0].cel.expression",
		wantReason: []string{"testdata/runtime-error.yaml: document 2", "CEL runtime error: no such key: model"},
	}}
	for _, tt := range tests {
		for _, engine := range tt.engines {
			t.Run(engine+"/"+tt.name, func(t *testing.T) {
				args := append([]string{"simulate", "--engine", engine, "-o", "json"}, tt.args...)
				code, stdout, stderr := run(t, "", nil, args...)
				if code != ExitOK {
					t.Fatalf("exit %d, want %d\nstderr: %s", code, ExitOK, stderr)
				}
				var out SimulateOutput
				if err := json.Unmarshal([]byte(stdout), &out); err != nil {
					t.Fatalf("decode: %v\n%s", err, stdout)
				}
				i := slices.IndexFunc(out.Results, func(r ClaimResult) bool { return r.Claim == tt.claim })
				if i < 0 {
					t.Fatalf("no result for %s:\n%s", tt.claim, stdout)
				}
				r := out.Results[i]
				if r.Allocated || r.Allocation != nil {
					t.Fatalf("%s allocated, want invalid", r.Claim)
				}
				if r.Field != tt.wantField {
					t.Errorf("field = %q, want %q", r.Field, tt.wantField)
				}
				containsAll(t, "reason", r.Reason, tt.wantReason...)
			})
		}
	}
}

// TestSimulateBadClaimAmongGood: one bad claim between two good ones, for
// every kind of claim error, under both engines. The good claims are
// allocated as if the bad one were not there, the bad one gets its outcome,
// and the exit code is 0.
func TestSimulateBadClaimAmongGood(t *testing.T) {
	tests := []struct {
		name string
		args []string
		// good is the node of "before" and "after".
		before, after string
		bad           string
		// field of the bad claim per engine (empty: not invalid).
		field map[string]string
		// reason of the bad claim per engine.
		reason map[string]string
	}{{
		name:   "selector fails at run time",
		args:   []string{"-f", "testdata/class.yaml", "-f", "testdata/mixed/runtime-error.yaml"},
		before: "node-5", after: "node-5",
		bad: "default/wants-model",
		field: map[string]string{
			"native":   "spec.devices.requests[0].exactly.selectors[0].cel.expression",
			"upstream": "spec.devices.requests[0].exactly.selectors[0].cel.expression",
		},
		reason: map[string]string{"native": "CEL runtime error", "upstream": "CEL runtime error"},
	}, {
		name:   "missing DeviceClass",
		args:   []string{"-f", "testdata/healthy.yaml", "-f", "testdata/mixed/missing-class.yaml"},
		before: "node-1", after: "node-2",
		bad:    "default/no-class",
		field:  map[string]string{},
		reason: map[string]string{"native": `device class "missing.example.com" does not exist`, "upstream": "could not retrieve device class missing.example.com"},
	}, {
		name:   "selector does not compile",
		args:   []string{"-f", "testdata/healthy.yaml", "-f", "testdata/mixed/compile-error.yaml"},
		before: "node-1", after: "node-2",
		bad: "default/bad-selector",
		field: map[string]string{
			"native":   "spec.devices.requests[0].exactly.selectors[1].cel.expression",
			"upstream": "spec.devices.requests[0].exactly.selectors[1].cel.expression",
		},
		reason: map[string]string{"native": "Syntax error", "upstream": "Syntax error"},
	}, {
		name:   "broken CEL constraints annotation",
		args:   []string{"-f", "testdata/healthy.yaml", "-f", "testdata/mixed/bad-annotation.yaml"},
		before: "node-1", after: "node-2",
		bad: "default/broken-constraints",
		field: map[string]string{
			"native":   "metadata.annotations[resource.drastack.io/cel-constraints]",
			"upstream": "metadata.annotations[resource.drastack.io/cel-constraints]",
		},
		reason: map[string]string{"native": "JSON array", "upstream": "JSON array"},
	}, {
		// The upstream engine has no CEL constraints at all, so it says
		// that instead; the claim still fails alone.
		name:   "CEL constraint does not compile",
		args:   []string{"-f", "testdata/healthy.yaml", "-f", "testdata/mixed/bad-constraint.yaml"},
		before: "node-1", after: "node-2",
		bad: "default/bad-expression",
		field: map[string]string{
			"native": "metadata.annotations[resource.drastack.io/cel-constraints][0].expression",
		},
		reason: map[string]string{"native": "Syntax error", "upstream": "not supported"},
	}}
	for _, tt := range tests {
		for _, engine := range []string{"native", "upstream"} {
			t.Run(engine+"/"+tt.name, func(t *testing.T) {
				args := append([]string{"simulate", "--engine", engine, "-o", "json"}, tt.args...)
				code, stdout, stderr := run(t, "", nil, args...)
				if code != ExitOK {
					t.Fatalf("exit %d, want %d\nstderr: %s", code, ExitOK, stderr)
				}
				var out SimulateOutput
				if err := json.Unmarshal([]byte(stdout), &out); err != nil {
					t.Fatalf("decode: %v\n%s", err, stdout)
				}
				if len(out.Results) != 3 {
					t.Fatalf("%d results, want 3:\n%s", len(out.Results), stdout)
				}
				checkResult(t, out.Results[0], want{claim: "default/before", allocated: true, node: tt.before, pool: tt.before, devices: 1})
				checkResult(t, out.Results[1], want{claim: tt.bad, reason: tt.reason[engine]})
				checkResult(t, out.Results[2], want{claim: "default/after", allocated: true, node: tt.after, pool: tt.after, devices: 1})
				if got := out.Results[1].Field; got != tt.field[engine] {
					t.Errorf("field = %q, want %q", got, tt.field[engine])
				}
			})
		}
	}
}

// TestSimulateGolden pins the whole output of the runs with a bad claim
// among good ones, one golden file per engine (seconds zeroed: they vary).
func TestSimulateGolden(t *testing.T) {
	runs := [][]string{
		{"testdata/class.yaml", "testdata/mixed/runtime-error.yaml"},
		{"testdata/healthy.yaml", "testdata/mixed/missing-class.yaml"},
		{"testdata/healthy.yaml", "testdata/mixed/compile-error.yaml"},
		{"testdata/healthy.yaml", "testdata/mixed/bad-annotation.yaml"},
		{"testdata/healthy.yaml", "testdata/mixed/bad-constraint.yaml"},
	}
	for _, engine := range []string{"native", "upstream"} {
		t.Run(engine, func(t *testing.T) {
			var got strings.Builder
			for _, files := range runs {
				args := []string{"simulate", "--engine", engine, "-o", "json"}
				for _, f := range files {
					args = append(args, "-f", f)
				}
				code, stdout, stderr := run(t, "", nil, args...)
				if code != ExitOK {
					t.Fatalf("%v: exit %d: %s", files, code, stderr)
				}
				var out SimulateOutput
				if err := json.Unmarshal([]byte(stdout), &out); err != nil {
					t.Fatal(err)
				}
				for i := range out.Results {
					out.Results[i].Seconds = 0
				}
				b, err := json.MarshalIndent(out, "", "  ")
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(&got, "# %s\n%s\n", strings.Join(files, " "), b)
			}
			golden(t, "simulate-mixed-"+engine+".txt", got.String())
		})
	}
}

func TestSimulateInvalidInput(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantStderr []string
	}{{
		name:       "malformed input stops before allocating",
		args:       []string{"-f", "testdata/claims.yaml", "-f", "testdata/malformed.yaml"},
		wantStderr: []string{"testdata/malformed.yaml: document 2", "malformed YAML"},
	}, {
		name:       "an unknown field stops before allocating",
		args:       []string{"-f", "testdata/unknown-field.yaml", "-f", "testdata/claims.yaml"},
		wantStderr: []string{"testdata/unknown-field.yaml: document 2", "atributes"},
	}, {
		name:       "a file that cannot be read",
		args:       []string{"-f", "testdata/healthy.yaml", "-f", "testdata/no-such-file.yaml"},
		wantStderr: []string{"testdata/no-such-file.yaml"},
	}}
	for _, tt := range tests {
		for _, engine := range []string{"native", "upstream"} {
			t.Run(engine+"/"+tt.name, func(t *testing.T) {
				args := append([]string{"simulate", "--engine", engine}, tt.args...)
				code, stdout, stderr := run(t, "", nil, args...)
				if code != ExitInvalidInput {
					t.Errorf("exit %d, want %d\nstderr: %s", code, ExitInvalidInput, stderr)
				}
				if stdout != "" {
					t.Errorf("stdout should be empty on invalid input, got:\n%s", stdout)
				}
				containsAll(t, "stderr", stderr, tt.wantStderr...)
			})
		}
	}
}

func TestSimulateUsage(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantStderr string
	}{
		{"unknown engine", []string{"simulate", "-f", "testdata/healthy.yaml", "--engine", "magic"}, `unknown engine "magic" (want native or upstream)`},
		{"zero timeout", []string{"simulate", "-f", "testdata/healthy.yaml", "--timeout", "0s"}, "--timeout must be positive"},
		{"bad duration", []string{"simulate", "-f", "testdata/healthy.yaml", "--timeout", "soon"}, "invalid argument"},
		{"no files", []string{"simulate"}, "at least one -f FILE"},
		{"help", []string{"simulate", "-h"}, "--engine"},
		{"help names the gates", []string{"simulate", "-h"}, "DRADeviceCompatibilityGroups"},
		{"unknown gate", []string{"simulate", "-f", "testdata/healthy.yaml", "--features", "DRAMagic=true"}, `unknown feature "DRAMagic"`},
		{"bad gate value", []string{"simulate", "-f", "testdata/healthy.yaml", "--features", "DRADeviceTaints=maybe"}, "is not true or false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := run(t, "", nil, tt.args...)
			if code != ExitUsage {
				t.Errorf("exit %d, want %d", code, ExitUsage)
			}
			containsAll(t, "stderr", stderr, tt.wantStderr)
		})
	}
}

func TestSimulateTable(t *testing.T) {
	code, stdout, stderr := run(t, "", nil, "simulate", "-f", "testdata/healthy.yaml", "-f", "testdata/claims.yaml")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(stdout, "\n")
	wantPrefixes := []string{
		"Engine: native",
		"",
		"CLAIM ",
		"default/one-gpu ",
		"    gpu: gpu.example.com/node-1/gpu-1",
		"team-a/two-h100 ",
		"    gpus: gpu.example.com/node-2/gpu-",
		"    gpus: gpu.example.com/node-2/gpu-",
		"default/too-big ",
		"    cannot allocate all claims",
		"",
		"DRIVER ",
	}
	for i, p := range wantPrefixes {
		if i >= len(lines) || !strings.HasPrefix(lines[i], p) {
			t.Fatalf("line %d should start with %q:\n%s", i+1, p, stdout)
		}
	}
}

// slowEngine blocks every Allocate until its context ends, to test the
// per-claim timeout without depending on how fast a real engine is.
type slowEngine struct{}

func (slowEngine) Name() string { return "slow" }
func (slowEngine) NewSession(context.Context, allocator.Inputs) (allocator.Session, error) {
	return slowSession{}, nil
}

type slowSession struct{}

func (slowSession) Allocate(ctx context.Context, _ []*resourceapi.ResourceClaim, _ allocator.Options) ([]allocator.Result, error) {
	<-ctx.Done()
	return nil, fmt.Errorf("gave up: %w", ctx.Err())
}
func (slowSession) Record(*resourceapi.ResourceClaim) error { return errors.New("nothing to record") }

func TestSimulateTimeoutIsAResult(t *testing.T) {
	app, stdout, stderr := testApp(nil)
	app.Engines["slow"] = func() allocator.Engine { return slowEngine{} }
	code := app.Run(context.Background(), []string{"simulate", "--engine", "slow", "--timeout", "20ms", "-o", "json",
		"-f", "testdata/healthy.yaml", "-f", "testdata/claims.yaml"})
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var out SimulateOutput
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Results) != 3 {
		t.Fatalf("want 3 results, got %d", len(out.Results))
	}
	for _, r := range out.Results {
		if r.Allocated || !strings.Contains(r.Reason, "timed out after 20ms") || r.Seconds < 0.02 {
			t.Errorf("%s: want a timeout after at least 20ms, got allocated=%v seconds=%v reason %q", r.Claim, r.Allocated, r.Seconds, r.Reason)
		}
	}
}

func TestSimulateInterrupted(t *testing.T) {
	app, _, stderr := testApp(nil)
	app.Engines["slow"] = func() allocator.Engine { return slowEngine{} }
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	code := app.Run(ctx, []string{"simulate", "--engine", "slow", "-f", "testdata/healthy.yaml", "-f", "testdata/claims.yaml"})
	if code != ExitInvalidInput || !strings.Contains(stderr.String(), "interrupted at claim default/one-gpu") {
		t.Errorf("exit %d, stderr %q; want 1 and an interruption message", code, stderr)
	}
}
