package simdriver

import (
	"fmt"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// Pool is one resource pool that the sim publishes for a node.
type Pool struct {
	// Driver is the driver name.
	Driver string
	// Name is the pool name: the node name, or "<node>-<pool>".
	Name string
	// Broken marks a deliberately invalid pool (see DriverSpec.Broken).
	Broken bool
	// Slices are the pool's slices in publishing order: counter slices
	// first, then device slices.
	Slices []resourceslice.Slice
	// Generation is the smallest pool generation to publish, from the
	// node's GenerationLabel; 0 lets the slice controller count.
	Generation int64
}

// GenerationLabel on a node asks the sim to publish the node's valid pools
// with at least this generation (a positive integer), as a driver that
// restarts and republishes everything does: raising it republishes the
// same devices under a new generation. Other values are ignored.
const GenerationLabel = "sim.drastack.io/generation"

// Defaults for device groups that leave a field empty.
const (
	defaultGPUModel  = "A100-SXM4-40GB"
	defaultGPUMemory = "40Gi"
	defaultNICModel  = "ConnectX-7"
	defaultBandwidth = "200G"
	defaultCPUModel  = "EPYC-9454"
	defaultCores     = 32
)

// Render computes every pool that a node with this name and these labels
// gets from the inventory. It is a pure function of its arguments; the
// inventory must have passed Validate.
func Render(inv *Inventory, nodeName string, nodeLabels map[string]string) ([]Pool, error) {
	var pools []Pool
	seen := map[[2]string]bool{}
	for i, d := range inv.Drivers {
		if !d.Matches(nodeLabels) {
			continue
		}
		name := nodeName
		if d.Pool != "" {
			name = nodeName + "-" + d.Pool
		}
		key := [2]string{d.Name, name}
		if seen[key] {
			return nil, fmt.Errorf("node %s: drivers[%d] publishes pool %q of driver %s a second time; give the entries different pools", nodeName, i, name, d.Name)
		}
		seen[key] = true
		p := renderPool(d, inv.pcieRoots(), nodeName, name)
		if g, err := strconv.ParseInt(nodeLabels[GenerationLabel], 10, 64); err == nil && g > 0 {
			p.Generation = g
		}
		pools = append(pools, p)
	}
	return pools, nil
}

// unit is a set of devices that should share a slice: one physical device
// and, for a partitioned GPU, all its partitions.
type unit []resourceapi.Device

// renderPool builds one driver's pool for one node.
func renderPool(d DriverSpec, roots int, nodeName, poolName string) Pool {
	totals := map[string]int{}
	for _, g := range d.Devices {
		totals[g.Kind] += g.Count
	}
	b := &poolBuilder{driver: d.Name, node: nodeName, roots: roots, totals: totals, next: map[string]int{}}
	for _, g := range d.Devices {
		for range g.Count {
			switch g.Kind {
			case KindGPU:
				b.addGPU(g)
			case KindNIC:
				b.addNIC(g)
			case KindCPU:
				b.addCPU(g)
			}
		}
	}
	if d.Broken {
		b.breakPool()
	}
	return Pool{Driver: d.Name, Name: poolName, Broken: d.Broken, Slices: packSlices(b.counterSets, b.units)}
}

// poolBuilder accumulates the devices and counter sets of one pool.
type poolBuilder struct {
	driver, node string
	roots        int
	totals       map[string]int // devices of each kind in the pool
	next         map[string]int // next index of each kind
	units        []unit
	counterSets  []resourceapi.CounterSet
}

// take returns the next index of a kind and the PCIe root it sits on:
// devices of a kind are spread over the roots in contiguous blocks.
func (b *poolBuilder) take(kind string) (index int, root string) {
	index = b.next[kind]
	b.next[kind]++
	return index, pcieRootName(index * b.roots / b.totals[kind])
}

func (b *poolBuilder) addGPU(g DeviceGroup) {
	i, root := b.take(KindGPU)
	model := orDefault(g.Model, defaultGPUModel)
	name := "gpu-" + strconv.Itoa(i)
	uuid := stableUUID("GPU", b.driver, b.node, name)
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		attrType:          stringAttr("gpu"),
		attrModel:         stringAttr(model),
		attrUUID:          stringAttr(uuid),
		attrIndex:         intAttr(i),
		attrDriverVersion: versionAttr(simDriverVersion),
		deviceattribute.StandardDeviceAttributePCIeRoot: stringAttr(root),
	}
	if g.Partitions == "" {
		b.units = append(b.units, unit{{
			Name:       name,
			Attributes: attrs,
			Capacity:   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{capMemory: capacity(resource.MustParse(orDefault(g.Memory, defaultGPUMemory)))},
		}})
		return
	}

	// A partitionable A100: one counter set for the GPU, the full GPU as
	// a device consuming all of it, and every MIG placement as a device
	// consuming its share.
	setName := name + "-counters"
	whole := a100CounterSet()
	b.counterSets = append(b.counterSets, resourceapi.CounterSet{Name: setName, Counters: counters(whole)})
	u := unit{{
		Name:       name,
		Attributes: attrs,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			capMemory:          capacity(resource.MustParse(a100Memory)),
			capMultiprocessors: capacity(count(a100Multiprocessors)),
			capCopyEngines:     capacity(count(a100CopyEngines)),
			capDecoders:        capacity(count(a100Decoders)),
			capEncoders:        capacity(count(0)),
			capJPEGEngines:     capacity(count(a100JPEGEngines)),
			capOFAEngines:      capacity(count(a100OFAEngines)),
		},
		ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: setName, Counters: counters(whole)}},
	}}
	for _, p := range a100Profiles {
		for _, start := range p.starts {
			migName := fmt.Sprintf("%s-mig-%s-%d", name, dnsProfile(p.name), start)
			u = append(u, resourceapi.Device{
				Name: migName,
				Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					attrType:           stringAttr("mig"),
					attrModel:          stringAttr(model),
					attrUUID:           stringAttr(stableUUID("MIG", b.driver, b.node, migName)),
					attrParentUUID:     stringAttr(uuid),
					attrIndex:          intAttr(i),
					attrProfile:        stringAttr(p.name),
					attrPlacementStart: intAttr(start),
					attrPlacementSize:  intAttr(p.memorySlices),
					attrDriverVersion:  versionAttr(simDriverVersion),
					deviceattribute.StandardDeviceAttributePCIeRoot: stringAttr(root),
				},
				Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
					capMemory:          capacity(resource.MustParse(p.memory)),
					capMultiprocessors: capacity(count(p.multiprocessors)),
					capCopyEngines:     capacity(count(p.copyEngines)),
					capDecoders:        capacity(count(p.decoders)),
					capEncoders:        capacity(count(p.encoders)),
					capJPEGEngines:     capacity(count(p.jpegEngines)),
					capOFAEngines:      capacity(count(p.ofaEngines)),
				},
				ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: setName, Counters: counters(p.consumption(start))}},
			})
		}
	}
	b.units = append(b.units, u)
}

func (b *poolBuilder) addNIC(g DeviceGroup) {
	i, root := b.take(KindNIC)
	b.units = append(b.units, unit{{
		Name: "nic-" + strconv.Itoa(i),
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			attrType:          stringAttr("nic"),
			attrModel:         stringAttr(orDefault(g.Model, defaultNICModel)),
			attrIndex:         intAttr(i),
			attrInterface:     stringAttr("eth" + strconv.Itoa(i)),
			attrRDMA:          boolAttr(true),
			attrDriverVersion: versionAttr(simDriverVersion),
			deviceattribute.StandardDeviceAttributePCIeRoot: stringAttr(root),
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			capBandwidth: capacity(resource.MustParse(orDefault(g.Bandwidth, defaultBandwidth))),
		},
	}})
}

// addCPU adds a CPU socket. Its pcieRoot is the list of roots attached to
// it (KEP-5491), so that a constraint on pcieRoot matches a GPU or NIC on
// any of them. The roots are split among the CPUs of the pool in
// contiguous blocks, the same blocks that GPUs and NICs are spread over.
func (b *poolBuilder) addCPU(g DeviceGroup) {
	i := b.next[KindCPU]
	b.next[KindCPU]++
	cpus := b.totals[KindCPU]
	var roots []string
	for r := range b.roots {
		if r*cpus/b.roots == i {
			roots = append(roots, pcieRootName(r))
		}
	}
	cores := g.Cores
	if cores == 0 {
		cores = defaultCores
	}
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		attrType:          stringAttr("cpu"),
		attrModel:         stringAttr(orDefault(g.Model, defaultCPUModel)),
		attrIndex:         intAttr(i),
		attrNUMANode:      intAttr(i),
		attrDriverVersion: versionAttr(simDriverVersion),
	}
	if len(roots) > 0 {
		// A list attribute must not be empty; a CPU without a root of
		// its own (more CPUs than roots) simply has none.
		attrs[deviceattribute.StandardDeviceAttributePCIeRoot] = stringsAttr(roots)
	}
	b.units = append(b.units, unit{{
		Name:       "cpu-" + strconv.Itoa(i),
		Attributes: attrs,
		Capacity:   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{capCores: capacity(count(int64(cores)))},
	}})
}

// Names used by a broken pool.
const (
	// BrokenCounter is the counter a broken pool's first counter-consuming
	// device takes although its counter set does not define it.
	BrokenCounter = "undefined-counter"
	// BrokenCounterSet is the counter set that the extra device of a
	// broken pool without counters consumes from; no slice defines it.
	BrokenCounterSet = "undefined-counter-set"
	// BrokenDevice is that extra device.
	BrokenDevice = "orphan-0"
)

// breakPool makes the pool invalid in a way that only a pool-wide check
// sees (each slice on its own is valid, so the API server accepts it).
func (b *poolBuilder) breakPool() {
	for _, u := range b.units {
		for i := range u {
			if len(u[i].ConsumesCounters) > 0 {
				u[i].ConsumesCounters[0].Counters[BrokenCounter] = resourceapi.Counter{Value: count(1)}
				return
			}
		}
	}
	b.units = append(b.units, unit{{
		Name:       BrokenDevice,
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{attrType: stringAttr("orphan")},
		ConsumesCounters: []resourceapi.DeviceCounterConsumption{{
			CounterSet: BrokenCounterSet,
			Counters:   map[string]resourceapi.Counter{"units": {Value: count(1)}},
		}},
	}})
}

func counters(q map[string]resource.Quantity) map[string]resourceapi.Counter {
	c := make(map[string]resourceapi.Counter, len(q))
	for k, v := range q {
		c[k] = resourceapi.Counter{Value: v}
	}
	return c
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
