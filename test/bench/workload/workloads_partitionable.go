package workload

import (
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
)

// migProfile is an A100 MIG profile and the memory slices its placements
// occupy (the A100 has 8 memory slices; a 1g.5gb instance takes one, a
// 7g.40gb instance all of them).
type migProfile struct {
	name       string
	placements [][2]int // first slice, number of slices
}

var a100Profiles = []migProfile{
	{"1g.5gb", [][2]int{{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}}},
	{"2g.10gb", [][2]int{{0, 2}, {2, 2}, {4, 2}}},
	{"3g.20gb", [][2]int{{0, 4}, {4, 4}}},
	{"4g.20gb", [][2]int{{0, 4}}},
	{"7g.40gb", [][2]int{{0, 8}}},
}

// Partitionable is partitionable-100n: 100 nodes with 8 A100-like GPUs, each
// GPU a counter set of 8 memory slices, published per node as one counter
// slice plus device slices of at most 64 devices (the limit with counters),
// the whole GPU and every MIG placement a device. 2,000 claims ask for a mix
// of profiles by selector.
func Partitionable() *Workload {
	return partitionable("partitionable-100n", 100, 2000)
}

// PartitionableCluster is Partitionable's cluster with nodes nodes and no
// claims, for the fragmentation sequences (test/bench/frag).
func PartitionableCluster(nodes int) *Workload {
	return partitionable(fmt.Sprintf("partitionable-%dn", nodes), nodes, 0)
}

func partitionable(name string, nodes, claims int) *Workload {
	const gpus = 8
	b := newBuilder(name)
	b.class("gpu", gpuDriver)
	devicesPerGPU := 1
	for _, p := range a100Profiles {
		devicesPerGPU += len(p.placements)
	}
	gpusPerSlice := 64 / devicesPerGPU
	deviceSlices := (gpus + gpusPerSlice - 1) / gpusPerSlice
	for n := 0; n < nodes; n++ {
		node := fmt.Sprintf("node-%03d", n)
		b.node(node, nil)
		count := int64(1 + deviceSlices)
		b.slice(node+"-counters", gpuDriver, node, count, func(s *resourceapi.ResourceSliceSpec) {
			s.NodeName = ptr.To(node)
			for g := 0; g < gpus; g++ {
				set := resourceapi.CounterSet{Name: fmt.Sprintf("gpu-%d", g), Counters: map[string]resourceapi.Counter{}}
				for m := 0; m < 8; m++ {
					set.Counters[fmt.Sprintf("memory-slice-%d", m)] = resourceapi.Counter{Value: quantity("1")}
				}
				s.SharedCounters = append(s.SharedCounters, set)
			}
		})
		for sl := 0; sl < deviceSlices; sl++ {
			b.slice(fmt.Sprintf("%s-gpus-%d", node, sl), gpuDriver, node, count, func(s *resourceapi.ResourceSliceSpec) {
				s.NodeName = ptr.To(node)
				for g := sl * gpusPerSlice; g < min(gpus, (sl+1)*gpusPerSlice); g++ {
					s.Devices = append(s.Devices, migDevices(g)...)
				}
			})
		}
	}
	// Mostly small profiles, as in a shared inference cluster.
	mix := []string{"1g.5gb", "2g.10gb", "1g.5gb", "3g.20gb", "1g.5gb", "2g.10gb", "7g.40gb", "1g.5gb", "4g.20gb", "1g.5gb"}
	for c := 0; c < claims; c++ {
		profile := mix[c%len(mix)]
		b.claim(fmt.Sprintf("mig-%04d", c), nil, []resourceapi.DeviceRequest{
			request("gpu", "gpu", 1, fmt.Sprintf(`device.attributes["gpu.example.com"].profile == %q`, profile)),
		})
	}
	return b.w
}

// migDevices are the whole GPU g and its MIG placements, each consuming the
// memory slices it occupies from the GPU's counter set.
func migDevices(g int) []resourceapi.Device {
	set := fmt.Sprintf("gpu-%d", g)
	consume := func(first, n int) []resourceapi.DeviceCounterConsumption {
		c := resourceapi.DeviceCounterConsumption{CounterSet: set, Counters: map[string]resourceapi.Counter{}}
		for m := first; m < first+n; m++ {
			c.Counters[fmt.Sprintf("memory-slice-%d", m)] = resourceapi.Counter{Value: quantity("1")}
		}
		return []resourceapi.DeviceCounterConsumption{c}
	}
	out := []resourceapi.Device{{
		Name:             fmt.Sprintf("gpu-%d", g),
		Attributes:       attrs("profile", strAttr("whole"), "index", intAttr(int64(g))),
		ConsumesCounters: consume(0, 8),
	}}
	for _, p := range a100Profiles {
		for _, pl := range p.placements {
			out = append(out, resourceapi.Device{
				Name:             fmt.Sprintf("gpu-%d-mig-%s-%d", g, strings.ReplaceAll(p.name, ".", "-"), pl[0]),
				Attributes:       attrs("profile", strAttr(p.name), "index", intAttr(int64(g))),
				ConsumesCounters: consume(pl[0], pl[1]),
			})
		}
	}
	return out
}
