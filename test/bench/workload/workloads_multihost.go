package workload

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
)

// This file builds its own multi-host pools; internal/topology is meant to
// replace tpuPool once it publishes the same shapes.

const (
	tpuDriver    = "tpu.example.com"
	hostnameKey  = "kubernetes.io/hostname"
	tpuPoolLabel = "tpu.example.com/pool"
	tpuGrid      = 8 // hosts per side: a pool is an 8x8 grid of 64 hosts
	chipsPerHost = 4
)

// tpuShapes are the sub-slices published as devices: the whole 8x8 grid,
// its 4x4 quadrants and its 2x4 blocks.
var tpuShapes = []struct {
	name       string
	rows, cols int
}{{"8x8", 8, 8}, {"4x4", 4, 4}, {"2x4", 2, 4}}

// Multihost is the multihost workload: two pools of 64 hosts, each published
// centrally as one counter slice (the chips of every host, in two counter
// sets of 32 hosts because a set holds at most 32 counters) and one slice
// with per-device node selection whose devices are the sub-slices, each
// reachable from exactly its hosts and consuming all their chips. Claims
// ask for 2x4, 4x4 and 8x8 sub-slices in a fixed mix.
func Multihost() *Workload {
	const claims = 40
	b := newBuilder("multihost")
	b.class("tpu", tpuDriver)
	for _, p := range []string{"a", "b"} {
		tpuPool(b, "tpu-"+p)
	}
	mix := []string{"2x4", "4x4", "2x4", "8x8", "2x4", "4x4"}
	for c := 0; c < claims; c++ {
		shape := mix[c%len(mix)]
		b.claim(fmt.Sprintf("tpu-%s-%03d", shape, c), nil, []resourceapi.DeviceRequest{
			request("tpu", "tpu", 1, fmt.Sprintf(`device.attributes["tpu.example.com"].shape == %q`, shape)),
		})
	}
	return b.w
}

func hostName(pool string, row, col int) string { return fmt.Sprintf("%s-host-%d-%d", pool, row, col) }

// counterSetOf is the counter set holding a host's chips: rows 0-3 and 4-7.
func counterSetOf(row int) string { return fmt.Sprintf("hosts-rows-%d", row/4*4) }

func tpuPool(b *builder, pool string) {
	for r := 0; r < tpuGrid; r++ {
		for c := 0; c < tpuGrid; c++ {
			h := hostName(pool, r, c)
			b.node(h, map[string]string{hostnameKey: h, tpuPoolLabel: pool})
		}
	}
	poolSelector := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: tpuPoolLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{pool}}},
	}}}
	b.slice(pool+"-counters", tpuDriver, pool, 2, func(s *resourceapi.ResourceSliceSpec) {
		s.NodeSelector = poolSelector
		for _, first := range []int{0, 4} {
			set := resourceapi.CounterSet{Name: counterSetOf(first), Counters: map[string]resourceapi.Counter{}}
			for r := first; r < first+4; r++ {
				for c := 0; c < tpuGrid; c++ {
					set.Counters[fmt.Sprintf("chips-%d-%d", r, c)] = resourceapi.Counter{Value: *resourceQuantity(chipsPerHost)}
				}
			}
			s.SharedCounters = append(s.SharedCounters, set)
		}
	})
	b.slice(pool+"-slices", tpuDriver, pool, 2, func(s *resourceapi.ResourceSliceSpec) {
		s.PerDeviceNodeSelection = ptr.To(true)
		for _, shape := range tpuShapes {
			for r0 := 0; r0 < tpuGrid; r0 += shape.rows {
				for c0 := 0; c0 < tpuGrid; c0 += shape.cols {
					s.Devices = append(s.Devices, subSlice(pool, shape.name, r0, c0, shape.rows, shape.cols))
				}
			}
		}
	})
}

// subSlice is the device for the hosts [r0, r0+rows) x [c0, c0+cols).
func subSlice(pool, shape string, r0, c0, rows, cols int) resourceapi.Device {
	var hosts []string
	consumption := map[string]*resourceapi.DeviceCounterConsumption{}
	var order []string
	for r := r0; r < r0+rows; r++ {
		for c := c0; c < c0+cols; c++ {
			hosts = append(hosts, hostName(pool, r, c))
			set := counterSetOf(r)
			if consumption[set] == nil {
				consumption[set] = &resourceapi.DeviceCounterConsumption{CounterSet: set, Counters: map[string]resourceapi.Counter{}}
				order = append(order, set)
			}
			consumption[set].Counters[fmt.Sprintf("chips-%d-%d", r, c)] = resourceapi.Counter{Value: *resourceQuantity(chipsPerHost)}
		}
	}
	d := resourceapi.Device{
		Name:       fmt.Sprintf("slice-%s-%d-%d", shape, r0, c0),
		Attributes: attrs("shape", strAttr(shape), "row", intAttr(int64(r0)), "col", intAttr(int64(c0))),
		NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: hostnameKey, Operator: corev1.NodeSelectorOpIn, Values: hosts}},
		}}},
	}
	for _, set := range order {
		d.ConsumesCounters = append(d.ConsumesCounters, *consumption[set])
	}
	return d
}
