package publisher

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

const (
	testDriver   = "tpu.example.com"
	domainLabel  = "example.com/tpu-domain"
	coordsLabel  = "example.com/tpu-coords"
	poolSelector = "example.com/tpu"
)

// entry is a 2x4-host grid of 2x2-chip hosts (a 4x8 chip grid) with four
// shapes: 8 2x2, 4 2x4, 2 4x4 and 1 4x8 device per complete domain.
func entry(mods ...func(*v1alpha1.MultiHostSpec)) v1alpha1.MultiHostSpec {
	e := v1alpha1.MultiHostSpec{
		Name:             "tpu",
		Driver:           testDriver,
		NodeSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{poolSelector: "true"}},
		DomainLabel:      domainLabel,
		CoordinatesLabel: coordsLabel,
		HostGrid:         []int32{2, 4},
		ChipsPerHost:     []int32{2, 2},
		Partitions:       []string{"2x2", "2x4", "4x4", "4x8"},
	}
	for _, m := range mods {
		m(&e)
	}
	return e
}

// node is a selected node of a domain at the given coordinates.
func node(name, domain, coords string, mods ...func(*corev1.Node)) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		poolSelector:         "true",
		corev1.LabelHostname: name,
	}}}
	if domain != "" {
		n.Labels[domainLabel] = domain
	}
	if coords != "" {
		n.Labels[coordsLabel] = coords
	}
	for _, m := range mods {
		m(&n)
	}
	return n
}

// domainNodes is a complete 2x4 grid of domain d, nodes "<d>-<x>-<y>".
func domainNodes(d string) []corev1.Node {
	var out []corev1.Node
	for x := 0; x < 2; x++ {
		for y := 0; y < 4; y++ {
			out = append(out, node(fmt.Sprintf("%s-%d-%d", d, x, y), d, fmt.Sprintf("%d.%d", x, y)))
		}
	}
	return out
}

// without drops the named nodes.
func without(nodes []corev1.Node, names ...string) []corev1.Node {
	var out []corev1.Node
next:
	for _, n := range nodes {
		for _, drop := range names {
			if n.Name == drop {
				continue next
			}
		}
		out = append(out, n)
	}
	return out
}

// publishedSlices renders a pool the way the resourceslice library writes
// it, so that tests can validate what would reach the API server.
func publishedSlices(driver, poolName string, p resourceslice.Pool) []*resourceapi.ResourceSlice {
	out := make([]*resourceapi.ResourceSlice, len(p.Slices))
	for i, s := range p.Slices {
		out[i] = &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%05x-%s-%s", i, driver, poolName)},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:                 driver,
				Pool:                   resourceapi.ResourcePool{Name: poolName, Generation: 1, ResourceSliceCount: int64(len(p.Slices))},
				Devices:                s.Devices,
				SharedCounters:         s.SharedCounters,
				PerDeviceNodeSelection: s.PerDeviceNodeSelection,
			},
		}
	}
	return out
}

// deviceCount counts the devices of a pool.
func deviceCount(p resourceslice.Pool) int {
	n := 0
	for _, s := range p.Slices {
		n += len(s.Devices)
	}
	return n
}
