package frag

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

// model is the benchmark's own account of the cluster, kept apart from the
// engines: which devices are in use and what every counter has left,
// updated from the allocation results the engines return. It measures
// (free capacity, largest placeable partition), checks results (no device
// twice, no counter overdrawn), lets the kube-scheduler placer skip nodes
// where no device could fit, and decides whether a refused gang had a
// placement.
type model struct {
	devs  []mdev
	index map[[3]string]int
	// counters are the balances of every counter of every pool.
	counters  []int64
	capacity  []int64
	nodeIndex map[string]int
	nodes     []*corev1.Node
	// local lists the node-local devices per node index.
	local [][]int
	// counted: devices consume counters (free capacity is counter units);
	// otherwise free capacity counts free devices.
	counted bool
}

type mdev struct {
	id    [3]string
	attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
	// node is the node of a node-local device; hosts the nodes a device
	// with a hostname selector reaches (nil with node set, or for all).
	node  string
	hosts map[string]bool
	uses  []muse
	units int64
	inUse bool
}

type muse struct {
	counter int
	amount  int64
}

const hostnameKey = "kubernetes.io/hostname"

// newModel reads the slices of in (one generation per pool, as the
// workloads publish them).
func newModel(in allocator.Inputs) (*model, error) {
	m := &model{index: map[[3]string]int{}, nodeIndex: map[string]int{}, nodes: in.Nodes}
	m.local = make([][]int, len(in.Nodes))
	for i, n := range in.Nodes {
		m.nodeIndex[n.Name] = i
	}
	counterIdx := map[[4]string]int{}
	for _, s := range in.Slices {
		for _, cs := range s.Spec.SharedCounters {
			for name, c := range cs.Counters {
				k := [4]string{s.Spec.Driver, s.Spec.Pool.Name, cs.Name, name}
				counterIdx[k] = len(m.counters)
				m.counters = append(m.counters, c.Value.Value())
				m.capacity = append(m.capacity, c.Value.Value())
			}
		}
	}
	for _, s := range in.Slices {
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			md := mdev{id: [3]string{s.Spec.Driver, s.Spec.Pool.Name, d.Name}, attrs: d.Attributes}
			switch {
			case ptr.Deref(s.Spec.NodeName, "") != "":
				md.node = *s.Spec.NodeName
			case ptr.Deref(d.NodeName, "") != "":
				md.node = *d.NodeName
			case d.NodeSelector != nil:
				md.hosts = hostnames(d.NodeSelector)
			case s.Spec.NodeSelector != nil:
				md.hosts = hostnames(s.Spec.NodeSelector)
			}
			for _, cc := range d.ConsumesCounters {
				for name, c := range cc.Counters {
					ci, ok := counterIdx[[4]string{s.Spec.Driver, s.Spec.Pool.Name, cc.CounterSet, name}]
					if !ok {
						return nil, fmt.Errorf("device %v consumes undefined counter %s/%s", md.id, cc.CounterSet, name)
					}
					md.uses = append(md.uses, muse{ci, c.Value.Value()})
					md.units += c.Value.Value()
					m.counted = true
				}
			}
			if md.units == 0 {
				md.units = 1
			}
			m.index[md.id] = len(m.devs)
			if ni, ok := m.nodeIndex[md.node]; ok {
				m.local[ni] = append(m.local[ni], len(m.devs))
			}
			m.devs = append(m.devs, md)
		}
	}
	return m, nil
}

// hostnames returns the values of a kubernetes.io/hostname In requirement
// (how the multi-host publisher selects a device's hosts).
func hostnames(sel *corev1.NodeSelector) map[string]bool {
	out := map[string]bool{}
	for _, t := range sel.NodeSelectorTerms {
		for _, r := range t.MatchExpressions {
			if r.Key == hostnameKey && r.Operator == corev1.NodeSelectorOpIn {
				for _, v := range r.Values {
					out[v] = true
				}
			}
		}
	}
	return out
}

// free reports whether device d can be allocated now.
func (m *model) free(d int) bool {
	if m.devs[d].inUse {
		return false
	}
	for _, u := range m.devs[d].uses {
		if m.counters[u.counter] < u.amount {
			return false
		}
	}
	return true
}

// reaches reports whether device d can be used from node.
func (m *model) reaches(d int, node string) bool {
	dev := &m.devs[d]
	switch {
	case dev.node != "":
		return dev.node == node
	case dev.hosts != nil:
		return dev.hosts[node]
	}
	return true
}

// take marks an allocation's devices in use; give frees them. take fails
// on a device given twice or a counter overdrawn: an engine error.
func (m *model) take(alloc *resourceapi.AllocationResult) error {
	for _, r := range alloc.Devices.Results {
		d, ok := m.index[[3]string{r.Driver, r.Pool, r.Device}]
		if !ok {
			return fmt.Errorf("allocated device %s/%s/%s is not in the cluster", r.Driver, r.Pool, r.Device)
		}
		if !m.free(d) {
			return fmt.Errorf("device %s/%s/%s allocated while in use or short of counters", r.Driver, r.Pool, r.Device)
		}
		m.devs[d].inUse = true
		for _, u := range m.devs[d].uses {
			m.counters[u.counter] -= u.amount
		}
	}
	return nil
}

func (m *model) give(alloc *resourceapi.AllocationResult) {
	for _, r := range alloc.Devices.Results {
		d := m.index[[3]string{r.Driver, r.Pool, r.Device}]
		m.devs[d].inUse = false
		for _, u := range m.devs[d].uses {
			m.counters[u.counter] += u.amount
		}
	}
}

// freeUnits is the free capacity: counter units left when devices consume
// counters, free devices otherwise.
func (m *model) freeUnits() int64 {
	var n int64
	if m.counted {
		for _, c := range m.counters {
			n += max(c, 0)
		}
		return n
	}
	for d := range m.devs {
		if !m.devs[d].inUse {
			n++
		}
	}
	return n
}

// attr returns a device's string attribute.
func (m *model) attr(d int, name string) string {
	a, ok := m.devs[d].attrs[resourceapi.QualifiedName(name)]
	if !ok || a.StringValue == nil {
		return ""
	}
	return *a.StringValue
}

// freeOnNode counts the free devices on node ni (node-local ones).
func (m *model) freeOnNode(ni int) int {
	n := 0
	for _, d := range m.local[ni] {
		if m.free(d) {
			n++
		}
	}
	return n
}
