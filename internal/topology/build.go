package topology

import (
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// forEach calls fn for every coordinate of a box of the given size starting
// at origin, in grid order: dimension 0 varies slowest.
func forEach(origin, size Coord, fn func(Coord)) {
	for i := 0; i < size[0]; i++ {
		for j := 0; j < size[1]; j++ {
			for k := 0; k < size[2]; k++ {
				fn(Coord{origin[0] + i, origin[1] + j, origin[2] + k})
			}
		}
	}
}

// blockOf returns the first host of the counter-set block that holds h.
func blockOf(h, block Coord) Coord {
	var b Coord
	for d := range h {
		b[d] = h[d] / block[d] * block[d]
	}
	return b
}

// counterSets returns one counter set per block that has a usable host,
// in grid order of the blocks, each with one counter per usable host.
func (p *plan) counterSets(block Coord, hosts map[Coord]Host) []resourceapi.CounterSet {
	var sets []resourceapi.CounterSet
	perHost := resource.NewQuantity(int64(p.hostChips), resource.DecimalSI)
	var blocks, size Coord
	for d := range blocks {
		blocks[d] = (p.hostGrid[d] + block[d] - 1) / block[d]
	}
	forEach(Coord{}, blocks, func(b Coord) {
		first := Coord{b[0] * block[0], b[1] * block[1], b[2] * block[2]}
		for d := range size {
			// The last block along a dimension may be cut short.
			size[d] = min(block[d], p.hostGrid[d]-first[d])
		}
		counters := map[string]resourceapi.Counter{}
		forEach(first, size, func(h Coord) {
			if _, ok := hosts[h]; ok {
				counters[counterName(p.chipName, h, p.dims)] = resourceapi.Counter{Value: perHost.DeepCopy()}
			}
		})
		if len(counters) > 0 {
			sets = append(sets, resourceapi.CounterSet{Name: counterSetName(p.prefix, first, p.dims), Counters: counters})
		}
	})
	return sets
}

// devices returns the devices of every placement of every shape whose hosts
// are all usable, smallest shapes first, then by origin in grid order. It
// also counts the published devices per shape.
func (p *plan) devices(block Coord, hosts map[Coord]Host) ([]resourceapi.Device, []int) {
	var out []resourceapi.Device
	published := make([]int, len(p.shapes))
	for i := range p.shapes {
		si := &p.shapes[i]
		var steps Coord
		for d := range steps {
			steps[d] = p.chipGrid[d] / si.size[d]
		}
		forEach(Coord{}, steps, func(step Coord) {
			var origin Coord
			for d := 0; d < p.dims; d++ {
				origin[d] = step[d] * si.size[d]
			}
			if dev, ok := p.device(si, origin, block, hosts); ok {
				out = append(out, dev)
				published[i]++
			}
		})
	}
	return out, published
}

// device builds the device of one placement, or false when one of its
// hosts is not usable.
func (p *plan) device(si *shapeInfo, origin, block Coord, hosts map[Coord]Host) (resourceapi.Device, bool) {
	var first Coord
	for d := range first {
		first[d] = origin[d] / p.cph[d]
	}
	var nodes, hostnames []string
	// Consumptions in the order their sets are first met, which is grid
	// order of the blocks because hosts are visited in grid order.
	var consumes []resourceapi.DeviceCounterConsumption
	setIndex := map[string]int{}
	perHost := resource.NewQuantity(int64(si.chipsPerHost), resource.DecimalSI)
	missing := false
	forEach(first, si.hostSpan, func(h Coord) {
		host, ok := hosts[h]
		if !ok {
			missing = true
			return
		}
		nodes = append(nodes, host.Node)
		hostnames = append(hostnames, host.hostname())
		set := counterSetName(p.prefix, blockOf(h, block), p.dims)
		i, seen := setIndex[set]
		if !seen {
			i = len(consumes)
			setIndex[set] = i
			consumes = append(consumes, resourceapi.DeviceCounterConsumption{CounterSet: set, Counters: map[string]resourceapi.Counter{}})
		}
		consumes[i].Counters[counterName(p.chipName, h, p.dims)] = resourceapi.Counter{Value: perHost.DeepCopy()}
	})
	if missing {
		return resourceapi.Device{}, false
	}

	attrs := make(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, p.ownAttrs+len(p.extras))
	for name, a := range p.extras {
		attrs[name] = *a.DeepCopy()
	}
	attrs[AttrShape] = resourceapi.DeviceAttribute{StringValue: ptr.To(si.name)}
	attrs[AttrOrigin] = resourceapi.DeviceAttribute{StringValue: ptr.To(FormatCoords(origin, p.dims))}
	attrs[AttrChips] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(si.chips))}
	attrs[AttrDomain] = resourceapi.DeviceAttribute{StringValue: ptr.To(p.spec.Domain)}
	if !p.spec.OmitHostsAttribute {
		attrs[AttrHosts] = resourceapi.DeviceAttribute{StringValues: nodes}
	}

	dev := resourceapi.Device{
		Name:       deviceName(p.prefix, si.name, origin, p.dims),
		Attributes: attrs,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			resourceapi.QualifiedName(p.chipName): {Value: *resource.NewQuantity(int64(si.chips), resource.DecimalSI)},
		},
		ConsumesCounters: consumes,
	}
	if len(nodes) == 1 {
		dev.NodeName = ptr.To(nodes[0])
	} else {
		dev.NodeSelector = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key:      corev1.LabelHostname,
				Operator: corev1.NodeSelectorOpIn,
				Values:   hostnames,
			}},
		}}}
	}
	return dev, true
}

// slices splits counter sets and devices into slices within the per-slice
// limits: counter slices first, then device slices. A pool with neither
// still gets one (empty) device slice, because an empty pool is not the
// same as no pool: it tells consumers that the pool exists and has nothing
// to offer right now.
func (p *plan) slices(generation int64, sets []resourceapi.CounterSet, devices []resourceapi.Device) []*resourceapi.ResourceSlice {
	nCounter := (len(sets) + maxCounterSetsPerSlice - 1) / maxCounterSetsPerSlice
	nDevice := (len(devices) + maxDevicesPerSlice - 1) / maxDevicesPerSlice
	if nCounter+nDevice == 0 {
		nDevice = 1
	}
	total := int64(nCounter + nDevice)
	newSlice := func(name string) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{
			TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceSlice"},
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:                 p.spec.Driver,
				Pool:                   resourceapi.ResourcePool{Name: p.spec.Pool, Generation: generation, ResourceSliceCount: total},
				PerDeviceNodeSelection: ptr.To(true),
			},
		}
	}
	out := make([]*resourceapi.ResourceSlice, 0, total)
	for i := 0; i < nCounter; i++ {
		s := newSlice(sliceName(p.spec.Pool, "counters", i, nCounter))
		end := min((i+1)*maxCounterSetsPerSlice, len(sets))
		s.Spec.SharedCounters = sets[i*maxCounterSetsPerSlice : end : end]
		out = append(out, s)
	}
	for i := 0; i < nDevice; i++ {
		s := newSlice(sliceName(p.spec.Pool, "devices", i, nDevice))
		if len(devices) > 0 {
			end := min((i+1)*maxDevicesPerSlice, len(devices))
			s.Spec.Devices = devices[i*maxDevicesPerSlice : end : end]
		}
		out = append(out, s)
	}
	return out
}
