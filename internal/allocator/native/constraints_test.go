package native

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
)

// numaNode is node n1 with GPUs and NICs on NUMA nodes and PCIe roots.
func numaNode() []*resourceapi.ResourceSlice {
	return []*resourceapi.ResourceSlice{nodeSlice("n1",
		dev("gpu-0", "kind", "gpu", "numa", 0, "roots", []string{"r0", "r1"}),
		dev("gpu-1", "kind", "gpu", "numa", 1, "roots", []string{"r2"}),
		dev("gpu-2", "kind", "gpu", "numa", 1, "roots", []string{"r3"}),
		dev("nic-0", "kind", "nic", "numa", 1, "roots", []string{"r1", "r2"}),
		dev("nic-1", "kind", "nic", "numa", 0, "roots", "r3"),
		dev("cpu-0", "kind", "cpu", "roots", []string{"r0", "r1", "r2", "r3"}),
	)}
}

func kind(k string) string { return `device.attributes["gpu.example.com"].kind == "` + k + `"` }

func TestMatchAttribute(t *testing.T) {
	const numa, roots = drv + "/numa", drv + "/roots"
	runCases(t, []testCase{
		{name: "scalar: all devices share the value",
			slices: numaNode(), claim: withConstraints(claim("c", req("gpu", 1, kind("gpu")), req("nic", 1, kind("nic"))), match(numa)),
			want: []string{"gpu=n1/gpu-0", "nic=n1/nic-1"}},
		{name: "scalar: count 2 of one value",
			slices: numaNode(), claim: withConstraints(claim("c", req("gpu", 2, kind("gpu"))), match(numa)),
			want: []string{"gpu=n1/gpu-1", "gpu=n1/gpu-2"}},
		{name: "scalar: device without the attribute never matches",
			slices: numaNode(), claim: withConstraints(claim("c", req("gpu", 1, kind("gpu")), req("cpu", 1, kind("cpu"))), match(numa)),
			wantErr: allocator.ErrUnsatisfiable},
		{name: "scalar: no value shared by enough devices",
			slices: numaNode(), claim: withConstraints(claim("c", req("gpu", 3, kind("gpu"))), match(numa)),
			wantErr: allocator.ErrUnsatisfiable},
		{name: "only the named requests are constrained",
			slices: numaNode(), claim: withConstraints(claim("c", req("gpu", 2, kind("gpu")), req("cpu", 1, kind("cpu"))), match(numa, "gpu")),
			want: []string{"cpu=n1/cpu-0", "gpu=n1/gpu-1", "gpu=n1/gpu-2"}},
		{name: "list: non-empty intersection across all devices",
			slices: numaNode(), claim: withConstraints(claim("c", req("gpu", 1, kind("gpu")), req("nic", 1, kind("nic")), req("cpu", 1, kind("cpu"))), match(roots)),
			want: []string{"cpu=n1/cpu-0", "gpu=n1/gpu-0", "nic=n1/nic-0"}},
		{name: "list and scalar mix: a scalar is a one-element list",
			slices: numaNode(), claim: withConstraints(claim("c", req("gpu", 1, kind("gpu")+` && device.attributes["gpu.example.com"].numa == 1`), req("nic", 1, kind("nic"))), match(roots)),
			want: []string{"gpu=n1/gpu-1", "nic=n1/nic-0"}},
		{name: "list: pairwise overlap is not enough",
			// gpu-0 {r0,r1} and nic-0 {r1,r2} overlap, gpu-1 {r2} and nic-0
			// overlap, but no value is in gpu-0, gpu-1 and nic-0.
			slices: numaNode(), claim: withConstraints(claim("c",
				req("a", 1, `device.attributes["gpu.example.com"].roots.includes("r0") && `+kind("gpu")),
				req("b", 1, `device.attributes["gpu.example.com"].roots.includes("r2") && `+kind("gpu")),
				req("nic", 1, kind("nic"))), match(roots)),
			wantErr: allocator.ErrUnsatisfiable},
		{name: "constraint on a subrequest by its full name",
			slices: numaNode(), claim: withConstraints(claim("c",
				firstAvailable("g", subReq("two", 2, kind("gpu")), subReq("one", 1, kind("gpu"))),
				req("nic", 1, kind("nic"))), match(numa, "g/two", "nic")),
			want: []string{"g/two=n1/gpu-1", "g/two=n1/gpu-2", "nic=n1/nic-0"}},
		{name: "constraint on the parent request applies to every subrequest",
			slices: numaNode(), claim: withConstraints(claim("c",
				firstAvailable("g", subReq("three", 3, kind("gpu")), subReq("one", 1, kind("gpu"))),
				req("nic", 1, kind("nic"))), match(numa, "g", "nic")),
			want: []string{"g/one=n1/gpu-0", "nic=n1/nic-1"}},
		{name: "type mismatch (int vs string) does not match",
			slices: []*resourceapi.ResourceSlice{nodeSlice("n1", dev("a", "v", 1), dev("b", "v", "1"))},
			claim:  withConstraints(claim("c", req("r", 2)), match(drv+"/v")), wantErr: allocator.ErrUnsatisfiable},
	})
}

func TestDistinctAttribute(t *testing.T) {
	const numa, roots = drv + "/numa", drv + "/roots"
	runCases(t, []testCase{
		{name: "scalar: pairwise different",
			slices: numaNode(), claim: withConstraints(claim("c", req("gpu", 2, kind("gpu"))), distinct(numa)),
			want: []string{"gpu=n1/gpu-0", "gpu=n1/gpu-1"}},
		{name: "scalar: not enough different values",
			slices: numaNode(), claim: withConstraints(claim("c", req("gpu", 3, kind("gpu"))), distinct(numa)),
			wantErr: allocator.ErrUnsatisfiable, wantMsg: "different values"},
		{name: "scalar: a, a, b is not distinct although the intersection is empty",
			slices: []*resourceapi.ResourceSlice{nodeSlice("n1", dev("a1", "v", "a"), dev("a2", "v", "a"), dev("b", "v", "b"))},
			claim:  withConstraints(claim("c", req("r", 3)), distinct(drv+"/v")), wantErr: allocator.ErrUnsatisfiable},
		{name: "list: pairwise disjoint",
			slices: numaNode(), claim: withConstraints(claim("c", req("gpu", 2, kind("gpu")), req("nic", 1, kind("nic"))), distinct(roots)),
			// gpu-0 {r0,r1} and gpu-1 {r2}; nic-0 {r1,r2} overlaps both, nic-1 {r3} is free.
			want: []string{"gpu=n1/gpu-0", "gpu=n1/gpu-1", "nic=n1/nic-1"}},
		{name: "list: overlapping lists are rejected",
			slices: numaNode(), claim: withConstraints(claim("c", req("cpu", 1, kind("cpu")), req("gpu", 1, kind("gpu"))), distinct(roots)),
			wantErr: allocator.ErrUnsatisfiable},
		{name: "distinct across two requests",
			slices: numaNode(), claim: withConstraints(claim("c", req("a", 1, kind("gpu")), req("b", 1, kind("gpu"))), distinct(numa, "a", "b")),
			want: []string{"a=n1/gpu-0", "b=n1/gpu-1"}},
		{name: "device without the attribute is not distinct",
			slices: numaNode(), claim: withConstraints(claim("c", req("cpu", 1, kind("cpu"))), distinct(numa)),
			wantErr: allocator.ErrUnsatisfiable},
		{name: "constraint with no kind is invalid",
			slices: numaNode(), claim: withConstraints(claim("c", req("r", 1)), resourceapi.DeviceConstraint{}),
			wantField: "spec.devices.constraints[0]"},
	})
}
