package workload

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
)

// Unsatisfiable is the pathological matchAttribute case: one node with 32
// devices that all share an attribute value, one of them already allocated,
// and claims for 32 devices with matchAttribute on it. No claim can be
// allocated (31 are free); an engine without a cardinality check enumerates
// every subset of the 31 before it gives up.
func Unsatisfiable() *Workload {
	const devices, claims = 32, 20
	b := newBuilder("unsatisfiable")
	b.class("gpu", gpuDriver)
	b.node("node-0", nil)
	b.slice("node-0-gpu", gpuDriver, "node-0", 1, func(s *resourceapi.ResourceSliceSpec) {
		s.NodeName = ptr.To("node-0")
		for d := 0; d < devices; d++ {
			s.Devices = append(s.Devices, resourceapi.Device{
				Name:       fmt.Sprintf("gpu-%d", d),
				Attributes: attrs("group", strAttr("nvlink-0"), "index", intAttr(int64(d))),
			})
		}
	})
	held := &resourceapi.ResourceClaim{
		ObjectMeta: b.meta("held"),
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{request("gpu", "gpu", 1)}}},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "gpu", Driver: gpuDriver, Pool: "node-0", Device: "gpu-0"},
			}},
			NodeSelector: nodeNameSelector("node-0"),
		}},
	}
	held.Namespace = "bench"
	b.w.Inputs.Allocated = append(b.w.Inputs.Allocated, held)
	for c := 0; c < claims; c++ {
		b.claim(fmt.Sprintf("all-32-%02d", c), nil,
			[]resourceapi.DeviceRequest{request("gpu", "gpu", devices)},
			matchAttribute(gpuDriver+"/group"))
	}
	return b.w
}
