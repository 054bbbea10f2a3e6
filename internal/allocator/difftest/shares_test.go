package difftest

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/verify"
)

// TestConsumableGPUShares: NVIDIA-style consumable GPU shares (one GPU with
// allowMultipleAllocations and 80Gi of memory handed out in 1Gi steps) and
// 20 claims of 5Gi, allocated one after the other: both engines place the
// same 16, the verifier accepts every share, and the 17th and later wait.
func TestConsumableGPUShares(t *testing.T) {
	gi := func(n int64) *resource.Quantity { return resource.NewQuantity(n<<30, resource.BinarySI) }
	in := allocator.Inputs{
		Nodes: []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}}},
		Classes: []*resourceapi.DeviceClass{{ObjectMeta: metav1.ObjectMeta{Name: "gpu.nvidia.com"}, Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "gpu.nvidia.com"`}}}}}},
		Slices: []*resourceapi.ResourceSlice{{
			ObjectMeta: metav1.ObjectMeta{Name: "node-0-gpu"},
			Spec: resourceapi.ResourceSliceSpec{
				Driver: "gpu.nvidia.com", NodeName: ptr.To("node-0"),
				Pool: resourceapi.ResourcePool{Name: "node-0", Generation: 1, ResourceSliceCount: 1},
				Devices: []resourceapi.Device{{
					Name:                     "gpu-0",
					AllowMultipleAllocations: ptr.To(true),
					Attributes:               map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"productName": {StringValue: ptr.To("NVIDIA H100 80GB HBM3")}},
					Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: *gi(80), RequestPolicy: &resourceapi.CapacityRequestPolicy{
						Default: gi(1), ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: gi(1), Max: gi(80), Step: gi(1)}}}},
				}},
			},
		}},
	}
	for _, eng := range engines() {
		t.Run(eng.Name(), func(t *testing.T) {
			sess, err := eng.NewSession(t.Context(), in)
			if err != nil {
				t.Fatal(err)
			}
			state := in
			placed := 0
			for i := range 20 {
				c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("share-%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))}}
				c.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
					DeviceClassName: "gpu.nvidia.com", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
					Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("5Gi")}},
				}}}
				res, err := sess.Allocate(t.Context(), []*resourceapi.ResourceClaim{c}, allocator.Options{})
				if err != nil {
					t.Logf("claim %s: %v", c.Name, err)
					continue
				}
				for _, v := range verify.Check(state, c, res[0].Allocation, res[0].Node) {
					t.Errorf("claim %s: %v", c.Name, v)
				}
				c.Status.Allocation = res[0].Allocation
				if err := sess.Record(c); err != nil {
					t.Fatal(err)
				}
				state.Allocated = append(state.Allocated[:len(state.Allocated):len(state.Allocated)], c)
				placed++
			}
			if placed != 16 {
				t.Errorf("%d claims placed, want 16", placed)
			}
		})
	}
}

// TestSharesMoveToTheNextNode: two nodes, each with one shared 80Gi GPU,
// and 20 claims for 20Gi, allocated centrally one after the other. When the
// first node's GPU is full, the second node, which looks the same but has
// capacity left, takes the next four: both engines place 8 claims, not 4
// (the native engine once skipped the second node as "like a node searched
// in vain", ignoring what the first node's shares consumed).
func TestSharesMoveToTheNextNode(t *testing.T) {
	gi := func(n int64) *resource.Quantity { return resource.NewQuantity(n<<30, resource.BinarySI) }
	in := allocator.Inputs{
		Classes: []*resourceapi.DeviceClass{{ObjectMeta: metav1.ObjectMeta{Name: "gpu.nvidia.com"}, Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "gpu.nvidia.com"`}}}}}},
	}
	for n := range 2 {
		node := fmt.Sprintf("node-%d", n)
		in.Nodes = append(in.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
		in.Slices = append(in.Slices, &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: node + "-gpu"},
			Spec: resourceapi.ResourceSliceSpec{
				Driver: "gpu.nvidia.com", NodeName: ptr.To(node),
				Pool: resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
				Devices: []resourceapi.Device{{
					Name:                     "gpu-0",
					AllowMultipleAllocations: ptr.To(true),
					Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: *gi(80), RequestPolicy: &resourceapi.CapacityRequestPolicy{
						Default: gi(1), ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: gi(1), Step: gi(1)}}}},
				}},
			},
		})
	}
	for _, eng := range engines() {
		t.Run(eng.Name(), func(t *testing.T) {
			sess, err := eng.NewSession(t.Context(), in)
			if err != nil {
				t.Fatal(err)
			}
			state := in
			perNode := map[string]int{}
			for i := range 20 {
				c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("share-%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))}}
				c.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
					DeviceClassName: "gpu.nvidia.com", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
					Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": *gi(20)}},
				}}}
				res, err := sess.Allocate(t.Context(), []*resourceapi.ResourceClaim{c}, allocator.Options{})
				if err != nil {
					continue
				}
				for _, v := range verify.Check(state, c, res[0].Allocation, res[0].Node) {
					t.Errorf("claim %s: %v", c.Name, v)
				}
				c.Status.Allocation = res[0].Allocation
				if err := sess.Record(c); err != nil {
					t.Fatal(err)
				}
				state.Allocated = append(state.Allocated[:len(state.Allocated):len(state.Allocated)], c)
				perNode[res[0].Node]++
			}
			if perNode["node-0"] != 4 || perNode["node-1"] != 4 || len(perNode) != 2 {
				t.Errorf("claims per node %v, want 4 on node-0 and 4 on node-1", perNode)
			}
		})
	}
}
