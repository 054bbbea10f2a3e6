package workload

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
)

const gpuDriver = "gpu.example.com"

// Steady is steady-500n: 500 nodes with 8 GPUs each (one slice per node) and
// 4,000 claims for one GPU with a CEL selector on model and memory, enough
// to fill the cluster exactly.
func Steady() *Workload {
	const nodes, gpus, claims = 500, 8, 4000
	b := newBuilder("steady-500n")
	b.class("gpu", gpuDriver)
	for n := 0; n < nodes; n++ {
		node := fmt.Sprintf("node-%03d", n)
		b.node(node, nil)
		b.slice(node+"-gpu", gpuDriver, node, 1, func(s *resourceapi.ResourceSliceSpec) {
			s.NodeName = ptr.To(node)
			for g := 0; g < gpus; g++ {
				s.Devices = append(s.Devices, resourceapi.Device{
					Name:       fmt.Sprintf("gpu-%d", g),
					Attributes: attrs("model", strAttr("A100"), "index", intAttr(int64(g))),
					Capacity:   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: quantity("40Gi")}},
				})
			}
		})
	}
	sel := `device.attributes["gpu.example.com"].model == "A100" && device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0`
	for c := 0; c < claims; c++ {
		b.claim(fmt.Sprintf("steady-%04d", c), nil, []resourceapi.DeviceRequest{request("gpu", "gpu", 1, sel)})
	}
	return b.w
}
