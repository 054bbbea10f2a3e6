package workload

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
)

// RackLabel is the node label that names a node's rack in GangCluster: the
// domain a gang must stay in.
const RackLabel = "topology.kubernetes.io/rack"

// GangCluster is the cluster of the gang sequence (test/bench/frag): nodes
// with gpus whole GPUs each (no partitions, every GPU with its own index
// attribute as real drivers publish a UUID), racks of nodesPerRack nodes
// labelled RackLabel, and the DeviceClass "gpu". It has no claims: the
// sequence brings them.
func GangCluster(nodes, gpus, nodesPerRack int) *Workload {
	b := newBuilder("gangs")
	b.class("gpu", gpuDriver)
	for n := 0; n < nodes; n++ {
		node := fmt.Sprintf("node-%03d", n)
		b.node(node, map[string]string{hostnameKey: node, RackLabel: fmt.Sprintf("rack-%02d", n/nodesPerRack)})
		b.slice(node+"-gpu", gpuDriver, node, 1, func(s *resourceapi.ResourceSliceSpec) {
			s.NodeName = ptr.To(node)
			for g := 0; g < gpus; g++ {
				s.Devices = append(s.Devices, resourceapi.Device{
					Name:       fmt.Sprintf("gpu-%d", g),
					Attributes: attrs("model", strAttr("A100"), "index", intAttr(int64(n*gpus+g))),
				})
			}
		})
	}
	return b.w
}

// MIGProfiles are the profiles of Partitionable's GPUs and the memory slices
// (of 8) each takes, smallest first.
func MIGProfiles() []Profile {
	var out []Profile
	for _, p := range a100Profiles {
		out = append(out, Profile{Name: p.name, Units: int64(p.placements[0][1])})
	}
	return out
}

// TPUShapes are the sub-slices of Multihost's pools: the name in hosts
// ("2x4"), the shape attribute it is selected by, and the chips it takes.
func TPUShapes() []Profile {
	chips := int64(tpuChipsPerHost[0] * tpuChipsPerHost[1])
	return []Profile{
		{Name: "2x4", Attribute: tpuShapes["2x4"], Units: 8 * chips},
		{Name: "4x4", Attribute: tpuShapes["4x4"], Units: 16 * chips},
		{Name: "8x8", Attribute: tpuShapes["8x8"], Units: 64 * chips},
	}
}

// Profile is one kind of partition a claim can ask for.
type Profile struct {
	// Name is how the table names it.
	Name string
	// Attribute is the value of the device attribute that selects it
	// (profile for MIG, shape for TPUs); empty means Name.
	Attribute string
	// Units is what it takes of the counters: memory slices, chips.
	Units int64
}

// Selector is the CEL selector for a profile of driver: MIG profiles by the
// "profile" attribute, TPU shapes by "shape".
func (p Profile) Selector(driver, attribute string) string {
	v := p.Attribute
	if v == "" {
		v = p.Name
	}
	return fmt.Sprintf(`device.attributes[%q].%s == %q`, driver, attribute, v)
}

// Drivers of the workloads, for selectors built outside this package.
const (
	GPUDriver = gpuDriver
	TPUDriver = tpuDriver
)
