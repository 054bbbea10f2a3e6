package workload

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
)

const (
	nicDriver = "nic.example.com"
	cpuDriver = "cpu.example.com"
	// pcieRootAttr is the standard attribute KEP-5491 makes list-valued.
	pcieRootAttr = "resource.kubernetes.io/pcieRoot"
)

// Match is match-100n: 100 nodes, each with 4 PCIe roots, 8 GPUs and 8 NICs
// (two per root, scalar pcieRoot) and 8 CPU core groups whose pcieRoot is
// the list of the two roots of their socket. 800 claims ask for a GPU, a NIC
// and a CPU group with matchAttribute on pcieRoot: the intersection of the
// scalar roots and the CPU's list must not be empty.
func Match() *Workload {
	const nodes, perRoot, roots, claims = 100, 2, 4, 800
	b := newBuilder("match-100n")
	b.class("gpu", gpuDriver)
	b.class("nic", nicDriver)
	b.class("cpu", cpuDriver)
	root := func(n, r int) string { return fmt.Sprintf("pci%04d:%02x", n, r) }
	for n := 0; n < nodes; n++ {
		node := fmt.Sprintf("node-%03d", n)
		b.node(node, nil)
		for _, drv := range []struct{ driver, prefix string }{{gpuDriver, "gpu"}, {nicDriver, "nic"}} {
			b.slice(node+"-"+drv.prefix, drv.driver, node, 1, func(s *resourceapi.ResourceSliceSpec) {
				s.NodeName = ptr.To(node)
				for r := 0; r < roots; r++ {
					for i := 0; i < perRoot; i++ {
						s.Devices = append(s.Devices, resourceapi.Device{
							Name:       fmt.Sprintf("%s-%d", drv.prefix, r*perRoot+i),
							Attributes: attrs(pcieRootAttr, strAttr(root(n, r))),
						})
					}
				}
			})
		}
		b.slice(node+"-cpu", cpuDriver, node, 1, func(s *resourceapi.ResourceSliceSpec) {
			s.NodeName = ptr.To(node)
			for g := 0; g < roots*perRoot; g++ {
				socket := g / (roots * perRoot / 2)
				s.Devices = append(s.Devices, resourceapi.Device{
					Name:       fmt.Sprintf("cpu-%d", g),
					Attributes: attrs(pcieRootAttr, strsAttr(root(n, 2*socket), root(n, 2*socket+1)), "socket", intAttr(int64(socket))),
				})
			}
		})
	}
	for c := 0; c < claims; c++ {
		b.claim(fmt.Sprintf("match-%04d", c), nil,
			[]resourceapi.DeviceRequest{request("gpu", "gpu", 1), request("nic", "nic", 1), request("cpu", "cpu", 1)},
			matchAttribute(pcieRootAttr, "gpu", "nic", "cpu"))
	}
	return b.w
}
