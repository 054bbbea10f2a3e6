package workload

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

const (
	shareGPUDriver = "gpu.nvidia.com"
	shareNICDriver = "bandwidth.example.com"
)

// Consumable is consumable-100n: consumable capacity (KEP-5075) as real
// drivers publish it. Each of 100 nodes has 8 shared GPUs
// (allowMultipleAllocations, 80Gi of memory handed out in 1Gi steps from a
// 1Gi minimum, NVIDIA's consumable shares) and 4 shared NICs (100G of
// bandwidth in 1G steps, the example driver's consumable NIC bandwidth).
// 3,000 claims cycle through three shapes: a 10Gi GPU share, a 10G NIC
// share, and a 20Gi GPU share with a 25G NIC share in one claim. The NICs
// run out first (about 34 claims per node), so the claims fill about 88
// nodes and the last ones search past full nodes.
func Consumable() *Workload {
	const nodes, gpus, nics, claims = 100, 8, 4, 3000
	b := newBuilder("consumable-100n")
	b.class("gpu", shareGPUDriver)
	b.class("nic", shareNICDriver)
	gi := func(n int64) *resource.Quantity { return resource.NewQuantity(n<<30, resource.BinarySI) }
	g := func(n int64) *resource.Quantity { return resource.NewQuantity(n*1e9, resource.DecimalSI) }
	for n := 0; n < nodes; n++ {
		node := fmt.Sprintf("node-%03d", n)
		b.node(node, nil)
		b.slice(node+"-gpu", shareGPUDriver, node, 1, func(s *resourceapi.ResourceSliceSpec) {
			s.NodeName = ptr.To(node)
			for d := 0; d < gpus; d++ {
				s.Devices = append(s.Devices, resourceapi.Device{
					Name:                     fmt.Sprintf("gpu-%d", d),
					AllowMultipleAllocations: ptr.To(true),
					Attributes:               attrs("productName", strAttr("NVIDIA H100 80GB HBM3"), "index", intAttr(int64(d))),
					Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {
						Value: *gi(80),
						RequestPolicy: &resourceapi.CapacityRequestPolicy{
							Default:    gi(1),
							ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: gi(1), Max: gi(80), Step: gi(1)},
						},
					}},
				})
			}
		})
		b.slice(node+"-nic", shareNICDriver, node, 1, func(s *resourceapi.ResourceSliceSpec) {
			s.NodeName = ptr.To(node)
			for d := 0; d < nics; d++ {
				s.Devices = append(s.Devices, resourceapi.Device{
					Name:                     fmt.Sprintf("nic-%d", d),
					AllowMultipleAllocations: ptr.To(true),
					Attributes:               attrs("interface", strAttr(fmt.Sprintf("eth%d", d))),
					Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"bandwidth": {
						Value: *g(100),
						RequestPolicy: &resourceapi.CapacityRequestPolicy{
							Default:    g(1),
							ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: g(1), Step: g(1)},
						},
					}},
				})
			}
		})
	}
	capReq := func(r resourceapi.DeviceRequest, name string, q *resource.Quantity) resourceapi.DeviceRequest {
		r.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{resourceapi.QualifiedName(name): *q}}
		return r
	}
	for c := 0; c < claims; c++ {
		var reqs []resourceapi.DeviceRequest
		switch c % 3 {
		case 0:
			reqs = []resourceapi.DeviceRequest{capReq(request("gpu", "gpu", 1), "memory", gi(10))}
		case 1:
			reqs = []resourceapi.DeviceRequest{capReq(request("nic", "nic", 1), "bandwidth", g(10))}
		default:
			reqs = []resourceapi.DeviceRequest{capReq(request("gpu", "gpu", 1), "memory", gi(20)), capReq(request("nic", "nic", 1), "bandwidth", g(25))}
		}
		b.claim(fmt.Sprintf("share-%04d", c), nil, reqs)
	}
	return b.w
}
