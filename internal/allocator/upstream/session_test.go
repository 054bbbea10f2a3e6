package upstream

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

// step is one Allocate call; a successful result is recorded before the next.
type step struct {
	claim *resourceapi.ResourceClaim
	opts  allocator.Options
	// wantNode is Result.Node; wantDevices the devices allocated, in order.
	wantNode    string
	wantDevices []string
	// wantSelector says whether the allocation carries a node selector.
	wantSelector bool
	// wantErr is a sentinel the error must wrap; wantMsg a substring.
	wantErr error
	wantMsg string
}

func TestSessionAllocate(t *testing.T) {
	twoNodes := []*corev1.Node{node("node-1", nil), node("node-2", nil)}
	tests := []struct {
		name  string
		in    allocator.Inputs
		steps []step
	}{{
		name: "central allocation tries nodes in order, first fit, and records each result",
		in: allocator.Inputs{
			Nodes:   twoNodes,
			Classes: []*resourceapi.DeviceClass{class("gpu")},
			Slices: []*resourceapi.ResourceSlice{
				onNode(slice("s1", "node-1", dev("gpu-0", nil)), "node-1"),
				onNode(slice("s2", "node-2", dev("gpu-0", nil)), "node-2"),
			},
		},
		steps: []step{
			{claim: claim("a"), wantNode: "node-1", wantDevices: []string{"node-1/gpu-0"}, wantSelector: true},
			{claim: claim("b"), wantNode: "node-2", wantDevices: []string{"node-2/gpu-0"}, wantSelector: true},
			{claim: claim("c"), wantErr: allocator.ErrUnsatisfiable, wantMsg: "any of 2 nodes"},
		},
	}, {
		name: "Options.Node restricts the allocation to that node",
		in: allocator.Inputs{
			Nodes:   twoNodes,
			Classes: []*resourceapi.DeviceClass{class("gpu")},
			Slices: []*resourceapi.ResourceSlice{
				onNode(slice("s1", "node-1", dev("gpu-0", nil)), "node-1"),
				onNode(slice("s2", "node-2", dev("gpu-0", nil)), "node-2"),
			},
		},
		steps: []step{
			{claim: claim("a"), opts: allocator.Options{Node: "node-2"}, wantNode: "node-2", wantDevices: []string{"node-2/gpu-0"}, wantSelector: true},
			{claim: claim("b"), opts: allocator.Options{Node: "node-2"}, wantErr: allocator.ErrUnsatisfiable, wantMsg: "on the node"},
			// A node missing from Inputs.Nodes is still usable for node-local slices.
			{claim: claim("c"), opts: allocator.Options{Node: "node-1"}, wantNode: "node-1", wantDevices: []string{"node-1/gpu-0"}, wantSelector: true},
		},
	}, {
		name: "allNodes devices need no node: no selector, empty Result.Node, one call decides",
		in: allocator.Inputs{
			Nodes:   twoNodes,
			Classes: []*resourceapi.DeviceClass{class("gpu")},
			Slices:  []*resourceapi.ResourceSlice{allNodes(slice("net", "fabric", dev("gpu-0", nil)))},
		},
		steps: []step{
			{claim: claim("a"), wantDevices: []string{"fabric/gpu-0"}},
			{claim: claim("b"), wantErr: allocator.ErrUnsatisfiable, wantMsg: "no device depends on the node"},
		},
	}, {
		name: "no nodes at all: a placeholder node still reaches allNodes devices",
		in: allocator.Inputs{
			Classes: []*resourceapi.DeviceClass{class("gpu")},
			Slices: []*resourceapi.ResourceSlice{
				onNode(slice("s1", "node-1", dev("gpu-0", nil)), "node-1"),
				allNodes(slice("net", "fabric", dev("gpu-9", nil))),
			},
		},
		steps: []step{
			{claim: claim("a"), wantDevices: []string{"fabric/gpu-9"}},
			{claim: claim("b"), wantErr: allocator.ErrUnsatisfiable},
		},
	}, {
		name: "per-device node selection: the first node covered by a free device wins, the device's selector is kept",
		in: allocator.Inputs{
			Nodes: []*corev1.Node{
				node("host-0", map[string]string{"rack": "r0"}),
				node("host-1", map[string]string{"rack": "r1"}),
			},
			Classes: []*resourceapi.DeviceClass{class("gpu")},
			Slices:  []*resourceapi.ResourceSlice{perDeviceSlice()},
		},
		steps: []step{
			{claim: claim("a"), wantDevices: []string{"tpu/rack-1"}, wantSelector: true},
			{claim: claim("b"), wantErr: allocator.ErrUnsatisfiable, wantMsg: "any of 2 nodes"},
		},
	}, {
		name: "shared counters in a separate slice are consumed by recorded claims",
		in: allocator.Inputs{
			Nodes:   twoNodes[:1],
			Classes: []*resourceapi.DeviceClass{class("gpu")},
			Slices:  counterPool(),
		},
		steps: []step{
			{claim: claim("a", selector(`device.attributes["gpu.example.com"].size == 2`)), wantNode: "node-1", wantDevices: []string{"node-1/half-0"}, wantSelector: true},
			// The whole GPU needs mem 4 but only 2 remain.
			{claim: claim("b", selector(`device.attributes["gpu.example.com"].size == 4`)), wantErr: allocator.ErrUnsatisfiable},
			{claim: claim("c", selector(`device.attributes["gpu.example.com"].size == 2`)), wantNode: "node-1", wantDevices: []string{"node-1/half-1"}, wantSelector: true},
		},
	}, {
		name: "admin access does not make a device busy",
		in: allocator.Inputs{
			Nodes:   twoNodes[:1],
			Classes: []*resourceapi.DeviceClass{class("gpu")},
			Slices:  []*resourceapi.ResourceSlice{onNode(slice("s1", "node-1", dev("gpu-0", nil)), "node-1")},
		},
		steps: []step{
			{claim: claim("monitor", admin()), wantNode: "node-1", wantDevices: []string{"node-1/gpu-0"}, wantSelector: true},
			{claim: claim("user"), wantNode: "node-1", wantDevices: []string{"node-1/gpu-0"}, wantSelector: true},
			{claim: claim("user-2"), wantErr: allocator.ErrUnsatisfiable},
		},
	}, {
		name: "CEL constraints are not supported; an empty list is no constraint",
		in: allocator.Inputs{
			Nodes:   twoNodes[:1],
			Classes: []*resourceapi.DeviceClass{class("gpu")},
			Slices:  []*resourceapi.ResourceSlice{onNode(slice("s1", "node-1", dev("gpu-0", nil)), "node-1")},
		},
		steps: []step{
			{claim: annotate(claim("cel"), `[{"expression": "size(devices) == 1"}]`), wantErr: allocator.ErrNotSupported, wantMsg: "CEL constraints (KEP-5254) are not supported by the upstream engine"},
			{claim: annotate(claim("empty"), ` [ ] `), wantNode: "node-1", wantDevices: []string{"node-1/gpu-0"}, wantSelector: true},
		},
	}, {
		name: "a selector that does not compile is an invalid claim",
		in: allocator.Inputs{
			Nodes:   twoNodes[:1],
			Classes: []*resourceapi.DeviceClass{class("gpu")},
			Slices:  []*resourceapi.ResourceSlice{onNode(slice("s1", "node-1", dev("gpu-0", nil)), "node-1")},
		},
		steps: []step{
			{claim: claim("bad", selector(`device.attributes[`)), wantErr: &allocator.InvalidClaimError{}, wantMsg: "claim default/bad"},
		},
	}, {
		name: "requests without allocationMode and count get the API defaults",
		in: allocator.Inputs{
			Nodes:   twoNodes[:1],
			Classes: []*resourceapi.DeviceClass{class("gpu")},
			Slices:  []*resourceapi.ResourceSlice{onNode(slice("s1", "node-1", dev("gpu-0", nil), dev("gpu-1", nil)), "node-1")},
		},
		steps: []step{
			{claim: undefaulted(claim("raw")), wantNode: "node-1", wantDevices: []string{"node-1/gpu-0"}, wantSelector: true},
		},
	}, {
		name: "MaxSteps stops a pathological search with ErrSearchBound",
		in: allocator.Inputs{
			Nodes:   twoNodes[:1],
			Classes: []*resourceapi.DeviceClass{class("gpu")},
			Slices:  []*resourceapi.ResourceSlice{pathologicalSlice(12)},
		},
		steps: []step{
			{claim: matchAttr(claim("all-12", count(12)), driver+"/group"), opts: allocator.Options{MaxSteps: 1000}, wantErr: allocator.ErrSearchBound},
			// Without a bound the search completes and proves it impossible.
			{claim: matchAttr(claim("all-12", count(12)), driver+"/group"), wantErr: allocator.ErrUnsatisfiable},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			sess, err := New().NewSession(ctx, tc.in)
			if err != nil {
				t.Fatalf("NewSession: %v", err)
			}
			for i, st := range tc.steps {
				before := st.claim.DeepCopy()
				results, err := sess.Allocate(ctx, []*resourceapi.ResourceClaim{st.claim}, st.opts)
				if !apiequality.Semantic.DeepEqual(before, st.claim) {
					t.Errorf("step %d: Allocate modified the claim", i)
				}
				checkStep(t, i, st, results, err)
				if err != nil {
					continue
				}
				recorded := st.claim.DeepCopy()
				recorded.Status.Allocation = results[0].Allocation
				if err := sess.Record(recorded); err != nil {
					t.Fatalf("step %d: Record: %v", i, err)
				}
			}
		})
	}
}

func checkStep(t *testing.T, i int, st step, results []allocator.Result, err error) {
	t.Helper()
	if st.wantErr != nil {
		var invalid *allocator.InvalidClaimError
		switch {
		case err == nil:
			t.Errorf("step %d: got an allocation, want error %v", i, st.wantErr)
		case errors.As(st.wantErr, &invalid):
			if !errors.As(err, &invalid) {
				t.Errorf("step %d: error %v is not an InvalidClaimError", i, err)
			}
		case !errors.Is(err, st.wantErr):
			t.Errorf("step %d: error %v does not wrap %v", i, err, st.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), st.wantMsg) {
			t.Errorf("step %d: error %q does not contain %q", i, err, st.wantMsg)
		}
		return
	}
	if err != nil {
		t.Fatalf("step %d: unexpected error: %v", i, err)
	}
	if len(results) != 1 || results[0].Claim != st.claim {
		t.Fatalf("step %d: want one result for the claim passed in, got %+v", i, results)
	}
	r := results[0]
	if r.Node != st.wantNode {
		t.Errorf("step %d: Result.Node = %q, want %q", i, r.Node, st.wantNode)
	}
	var got []string
	for _, d := range r.Allocation.Devices.Results {
		got = append(got, d.Pool+"/"+d.Device)
	}
	if strings.Join(got, ",") != strings.Join(st.wantDevices, ",") {
		t.Errorf("step %d: devices %v, want %v", i, got, st.wantDevices)
	}
	if (r.Allocation.NodeSelector != nil) != st.wantSelector {
		t.Errorf("step %d: node selector %v, want one: %v", i, r.Allocation.NodeSelector, st.wantSelector)
	}
}

func annotate(c *resourceapi.ResourceClaim, value string) *resourceapi.ResourceClaim {
	c.Annotations = map[string]string{allocator.CELConstraintsAnnotation: value}
	return c
}

func undefaulted(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	c.Spec.Devices.Requests[0].Exactly.AllocationMode = ""
	c.Spec.Devices.Requests[0].Exactly.Count = 0
	return c
}

// perDeviceSlice has one device per rack, each reachable from its rack only.
func perDeviceSlice() *resourceapi.ResourceSlice {
	s := slice("tpu", "tpu")
	s.Spec.PerDeviceNodeSelection = ptr.To(true)
	for _, rack := range []string{"r1", "r9"} {
		d := dev("rack-"+rack[1:], nil)
		d.NodeSelector = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "rack", Operator: corev1.NodeSelectorOpIn, Values: []string{rack}}},
		}}}
		s.Spec.Devices = append(s.Spec.Devices, d)
	}
	return s
}

// counterPool is one GPU with mem 4 as a whole device or two halves.
func counterPool() []*resourceapi.ResourceSlice {
	counters := onNode(counterSlice("node-1-counters", "node-1", "gpu-0", 4), "node-1")
	devices := onNode(slice("node-1-devices", "node-1",
		consumes(dev("whole", map[string]resourceapi.DeviceAttribute{"size": intAttr(4)}), "gpu-0", 4),
		consumes(dev("half-0", map[string]resourceapi.DeviceAttribute{"size": intAttr(2)}), "gpu-0", 2),
		consumes(dev("half-1", map[string]resourceapi.DeviceAttribute{"size": intAttr(2)}), "gpu-0", 2),
	), "node-1")
	counters.Spec.Pool.ResourceSliceCount = 2
	devices.Spec.Pool.ResourceSliceCount = 2
	return []*resourceapi.ResourceSlice{counters, devices}
}

// pathologicalSlice has n devices, all but one sharing a group attribute, so
// a claim for n with matchAttribute on it backtracks through every subset.
func pathologicalSlice(n int) *resourceapi.ResourceSlice {
	s := onNode(slice("s1", "node-1"), "node-1")
	for i := 0; i < n; i++ {
		group := int64(0)
		if i == n-1 {
			group = 1
		}
		s.Spec.Devices = append(s.Spec.Devices, dev("gpu-"+string(rune('a'+i)), map[string]resourceapi.DeviceAttribute{"group": intAttr(group)}))
	}
	return s
}
