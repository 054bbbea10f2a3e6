package verify

import (
	"errors"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
)

func TestCheck(t *testing.T) {
	n1 := nodeNameSelector("node-1")
	oneGPU := func() *resourceapi.ResourceClaim { return claimWith("c", exact("gpu", "gpu", 1)) }
	twoGPUs := func() *resourceapi.ResourceClaim { return claimWith("c", exact("gpu", "gpu", 2)) }
	contiguous := `size(devices) == 2 && devices.map(d, d.attributes["gpu.example.com"].index).max() - devices.map(d, d.attributes["gpu.example.com"].index).min() == 1`

	tests := []struct {
		name  string
		claim *resourceapi.ResourceClaim
		alloc *resourceapi.AllocationResult
		node  string
		// want lists the rules that must fire; empty means a correct allocation.
		want []Rule
	}{
		// Correct allocations: no rule fires.
		{name: "one node-local GPU", claim: oneGPU(), alloc: alloc(n1, res("gpu", "node-1", "gpu-0")), node: "node-1"},
		{name: "firstAvailable names the chosen subrequest",
			claim: claimWith("c", firstAvailable("gpu", sub("eight", "gpu", 8), sub("one", "gpu", 1))),
			alloc: alloc(n1, res("gpu/one", "node-1", "gpu-0")), node: "node-1"},
		{name: "matchAttribute on a list: the intersection is not empty",
			claim: constrain(twoGPUs(), match(pcieRoot)),
			alloc: alloc(n1, res("gpu", "node-1", "gpu-0"), res("gpu", "node-1", "gpu-1")), node: "node-1"},
		{name: "distinctAttribute on a scalar published without the driver's domain",
			claim: constrain(twoGPUs(), distinct(gpuDriver+"/index")),
			alloc: alloc(n1, res("gpu", "node-1", "gpu-0"), res("gpu", "node-1", "gpu-1")), node: "node-1"},
		{name: "multi-host device keeps its own selector and needs no node",
			claim: oneGPU(), alloc: alloc(rackSelector("r1"), res("gpu", "tpu", "r1"))},
		{name: "multi-host device allocated for a node it reaches",
			claim: oneGPU(), alloc: alloc(rackSelector("r1"), res("gpu", "tpu", "r1")), node: "node-1"},
		{name: "allNodes device: no selector", claim: claimWith("c", exact("net", "nic", 1)), alloc: alloc(nil, res("net", "fabric", "net-0"))},
		{name: "All gets every matching device (node-2 sees no incomplete pool)",
			claim: claimWith("c", allOf("net", "nic")), alloc: alloc(nil, res("net", "fabric", "net-0"), res("net", "fabric", "net-1"))},
		{name: "CEL constraint holds", claim: annotated(twoGPUs(), `[{"requests": ["gpu"], "expression": "`+escape(contiguous)+`"}]`),
			alloc: alloc(n1, res("gpu", "node-1", "gpu-0"), res("gpu", "node-1", "gpu-1")), node: "node-1"},
		{name: "admin access may use a busy device",
			claim: claimWith("c", withAdmin(exact("gpu", "gpu", 1))), alloc: alloc(n1, adminRes(res("gpu", "node-1", "gpu-2"))), node: "node-1"},
		{name: "a tolerated taint", claim: claimWith("c", tolerating(exact("gpu", "gpu", 1))), alloc: alloc(n1, res("gpu", "node-1", "gpu-3")), node: "node-1"},
		{name: "counters: half-0 fits next to the allocated half-1", claim: oneGPU(), alloc: alloc(n1, res("gpu", "node-1-part", "half-0")), node: "node-1"},

		// Each rule fires on a broken allocation.
		{name: "nil allocation", claim: oneGPU(), want: []Rule{RuleAllocation}},
		{name: "result for an unknown request", claim: oneGPU(), alloc: alloc(n1, res("gpu", "node-1", "gpu-0"), res("tpu", "node-1", "gpu-1")), node: "node-1", want: []Rule{RuleRequest}},
		{name: "class does not exist", claim: claimWith("c", exact("gpu", "fpga", 1)), alloc: alloc(n1, res("gpu", "node-1", "gpu-0")), node: "node-1", want: []Rule{RuleRequest}},
		{name: "two subrequests of one request",
			claim: claimWith("c", firstAvailable("gpu", sub("one", "gpu", 1), sub("two", "gpu", 1))),
			alloc: alloc(n1, res("gpu/one", "node-1", "gpu-0"), res("gpu/two", "node-1", "gpu-1")), node: "node-1", want: []Rule{RuleSubrequest}},
		{name: "a request with subrequests named without one",
			claim: claimWith("c", firstAvailable("gpu", sub("one", "gpu", 1))),
			alloc: alloc(n1, res("gpu", "node-1", "gpu-0")), node: "node-1", want: []Rule{RuleSubrequest, RuleCount}},
		{name: "a plain request named with a subrequest", claim: oneGPU(),
			alloc: alloc(n1, res("gpu/one", "node-1", "gpu-0")), node: "node-1", want: []Rule{RuleSubrequest, RuleCount}},
		{name: "too few devices", claim: twoGPUs(), alloc: alloc(n1, res("gpu", "node-1", "gpu-0")), node: "node-1", want: []Rule{RuleCount}},
		{name: "All misses a device", claim: claimWith("c", allOf("net", "nic")), alloc: alloc(nil, res("net", "fabric", "net-0")), want: []Rule{RuleCount}},
		{name: "All made for a node that sees an incomplete pool",
			claim: claimWith("c", allOf("net", "nic")), alloc: alloc(nil, res("net", "fabric", "net-0"), res("net", "fabric", "net-1")), node: "node-1", want: []Rule{RuleCount}},
		{name: "device does not exist", claim: oneGPU(), alloc: alloc(n1, res("gpu", "node-1", "gpu-9")), node: "node-1", want: []Rule{RuleDevice}},
		{name: "device of a stale generation", claim: oneGPU(), alloc: alloc(nodeNameSelector("node-2"), res("gpu", "node-2", "old-0")), node: "node-2", want: []Rule{RuleDevice}},
		{name: "device of an incomplete pool", claim: oneGPU(), alloc: alloc(n1, res("gpu", "broken", "x-0")), node: "node-1", want: []Rule{RuleDevice}},
		{name: "request selector does not hold", claim: claimWith("c", withSelector(exact("gpu", "gpu", 1), `device.attributes["gpu.example.com"].index == 1`)),
			alloc: alloc(n1, res("gpu", "node-1", "gpu-0")), node: "node-1", want: []Rule{RuleSelector}},
		{name: "class selector does not hold", claim: claimWith("c", exact("net", "nic", 1)), alloc: alloc(n1, res("net", "node-1", "gpu-0")), node: "node-1", want: []Rule{RuleSelector}},
		{name: "untolerated taint", claim: oneGPU(), alloc: alloc(n1, res("gpu", "node-1", "gpu-3")), node: "node-1", want: []Rule{RuleTaint}},
		{name: "adminAccess not asked for", claim: oneGPU(), alloc: alloc(n1, adminRes(res("gpu", "node-1", "gpu-0"))), node: "node-1", want: []Rule{RuleAdminAccess}},
		{name: "device allocated to another claim", claim: oneGPU(), alloc: alloc(n1, res("gpu", "node-1", "gpu-2")), node: "node-1", want: []Rule{RuleDoubleAllocation}},
		{name: "device given twice", claim: twoGPUs(), alloc: alloc(n1, res("gpu", "node-1", "gpu-0"), res("gpu", "node-1", "gpu-0")), node: "node-1", want: []Rule{RuleDoubleAllocation}},
		{name: "matchAttribute: lists share no value", claim: constrain(twoGPUs(), match(pcieRoot)),
			alloc: alloc(n1, res("gpu", "node-1", "gpu-0"), res("gpu", "node-1", "gpu-4")), node: "node-1", want: []Rule{RuleMatchAttribute}},
		{name: "matchAttribute: a device lacks the attribute", claim: constrain(twoGPUs(), match(pcieRoot)),
			alloc: alloc(n1, res("gpu", "node-1", "gpu-0"), res("gpu", "node-1", "gpu-5")), node: "node-1", want: []Rule{RuleMatchAttribute}},
		{name: "distinctAttribute: lists overlap", claim: constrain(twoGPUs(), distinct(pcieRoot)),
			alloc: alloc(n1, res("gpu", "node-1", "gpu-0"), res("gpu", "node-1", "gpu-1")), node: "node-1", want: []Rule{RuleDistinctAttribute}},
		{name: "CEL constraint is false", claim: annotated(twoGPUs(), `[{"expression": "`+escape(contiguous)+`"}]`),
			alloc: alloc(n1, res("gpu", "node-1", "gpu-0"), res("gpu", "node-1", "gpu-4")), node: "node-1", want: []Rule{RuleCELConstraint}},
		{name: "CEL annotation is malformed", claim: annotated(oneGPU(), `[{"expr": "true"}]`),
			alloc: alloc(n1, res("gpu", "node-1", "gpu-0")), node: "node-1", want: []Rule{RuleCELConstraint}},
		{name: "CEL constraint does not compile", claim: annotated(oneGPU(), `[{"expression": "devices.("}]`),
			alloc: alloc(n1, res("gpu", "node-1", "gpu-0")), node: "node-1", want: []Rule{RuleCELConstraint}},
		{name: "counters over-consumed", claim: oneGPU(), alloc: alloc(n1, res("gpu", "node-1-part", "whole")), node: "node-1", want: []Rule{RuleCounters}},
		{name: "allocated for a node that does not reach the device", claim: oneGPU(),
			alloc: alloc(n1, res("gpu", "node-1", "gpu-0")), node: "node-2", want: []Rule{RuleNode}},
		{name: "node-local device allocated without a node", claim: oneGPU(), alloc: alloc(n1, res("gpu", "node-1", "gpu-0")), want: []Rule{RuleNode}},
		{name: "node-local device without node selector", claim: oneGPU(), alloc: alloc(nil, res("gpu", "node-1", "gpu-0")), node: "node-1", want: []Rule{RuleNodeSelector}},
		{name: "node-local device with a selector for another node", claim: oneGPU(),
			alloc: alloc(nodeNameSelector("node-2"), res("gpu", "node-1", "gpu-0")), node: "node-1", want: []Rule{RuleNode, RuleNodeSelector}},
		{name: "allNodes device with a node selector", claim: claimWith("c", exact("net", "nic", 1)),
			alloc: alloc(rackSelector("r1"), res("net", "fabric", "net-0")), want: []Rule{RuleNodeSelector}},
		{name: "multi-host device without node selector", claim: oneGPU(), alloc: alloc(nil, res("gpu", "tpu", "r1")), want: []Rule{RuleNodeSelector}},
		{name: "multi-host device with a selector that admits too much", claim: oneGPU(),
			alloc: alloc(rackSelector("r1", "r2"), res("gpu", "tpu", "r1")), want: []Rule{RuleNodeSelector}},
	}
	checker := New(fixture())
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			errs := checker.Check(tc.claim, tc.alloc, tc.node)
			var got []Rule
			for _, err := range errs {
				var v *Violation
				if !errors.As(err, &v) {
					t.Fatalf("error %v is not a *Violation", err)
				}
				if !slices.Contains(got, v.Rule) {
					got = append(got, v.Rule)
				}
			}
			slices.Sort(got)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("rules %v, want %v; errors: %v", got, want, errs)
			}
		})
	}
}

func TestCheckFunctionAndMessages(t *testing.T) {
	errs := Check(fixture(), claimWith("c", exact("gpu", "gpu", 1)), alloc(nodeNameSelector("node-1"), res("gpu", "node-1", "gpu-2")), "node-1")
	if len(errs) != 1 {
		t.Fatalf("want one violation, got %v", errs)
	}
	want := "claim default/c: DoubleAllocation: device gpu.example.com/node-1/gpu-2: device is already allocated to claim default/busy"
	if errs[0].Error() != want {
		t.Errorf("message %q, want %q", errs[0].Error(), want)
	}
}

func escape(s string) string {
	out := ""
	for _, r := range s {
		if r == '"' {
			out += `\"`
		} else {
			out += string(r)
		}
	}
	return out
}

// TestListValuesWithTheGateOff: without DRAListTypeAttributes the rules are
// kube-scheduler's then: a list value matches no other device, and a
// distinctAttribute constraint takes at most one device with list values.
func TestListValuesWithTheGateOff(t *testing.T) {
	n1 := nodeNameSelector("node-1")
	twoGPUs := func() *resourceapi.ResourceClaim { return claimWith("c", exact("gpu", "gpu", 2)) }
	tests := []struct {
		name    string
		claim   *resourceapi.ResourceClaim
		alloc   *resourceapi.AllocationResult
		on, off []Rule
	}{
		{name: "matchAttribute over two lists that share a value", claim: constrain(twoGPUs(), match(pcieRoot)),
			alloc: alloc(n1, res("gpu", "node-1", "gpu-0"), res("gpu", "node-1", "gpu-1")), off: []Rule{RuleMatchAttribute}},
		{name: "distinctAttribute over two disjoint lists", claim: constrain(twoGPUs(), distinct(pcieRoot)),
			alloc: alloc(n1, res("gpu", "node-1", "gpu-0"), res("gpu", "node-1", "gpu-4")), off: []Rule{RuleDistinctAttribute}},
		{name: "distinctAttribute over one device with a list", claim: constrain(claimWith("c", exact("gpu", "gpu", 1)), distinct(pcieRoot)),
			alloc: alloc(n1, res("gpu", "node-1", "gpu-0"))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, gate := range []bool{true, false} {
				in := fixture()
				f := allocator.DefaultFeatures()
				f.ListTypeAttributes = gate
				in.Features = &f
				var got []Rule
				for _, err := range New(in).Check(tc.claim, tc.alloc, "node-1") {
					var v *Violation
					if errors.As(err, &v) {
						got = append(got, v.Rule)
					}
				}
				want := tc.on
				if !gate {
					want = tc.off
				}
				if !slices.Equal(got, want) {
					t.Errorf("DRAListTypeAttributes=%v: rules %v, want %v", gate, got, want)
				}
			}
		})
	}
}
