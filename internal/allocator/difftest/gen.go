// Package difftest generates random clusters and claims for the
// differential test of the allocation engines: native and upstream must
// agree, claim by claim from the same starting state, on whether a claim can
// be allocated, and the independent verifier must accept every result.
//
// Generation is seeded and deterministic: a seed is a reproducible case.
package difftest

import (
	"fmt"
	"math/big"
	"math/rand/v2"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

// Case is one random cluster and the claims to try on it, each on its own
// from the same starting state.
type Case struct {
	Seed   uint64
	Inputs allocator.Inputs
	Claims []*resourceapi.ResourceClaim
	// Node is, per claim, the node to allocate for ("" lets the engine pick,
	// as a central allocator).
	Node []string
}

const (
	gpuDriver = "gpu.example.com"
	nicDriver = "nic.example.com"
	pcieRoot  = "resource.kubernetes.io/pcieRoot"
	claimsPer = 6
)

// gen holds the random source and what has been generated so far.
type gen struct {
	r *rand.Rand
	c *Case
	// f are the feature gates of the case.
	f   allocator.Features
	uid int
	// devices are all current-generation devices, for pre-allocation.
	devices []genDevice
}

type genDevice struct {
	driver, pool string
	dev          *resourceapi.Device
}

// Generate builds the case for seed.
func Generate(seed uint64) *Case {
	return GenerateWith(seed, allocator.DefaultFeatures())
}

// GenerateWith builds the case for seed under the feature gates f: the
// engines allocate with f, and the slices hold what an API server with f
// stores, or stored before a gate was turned off (list attributes without
// DRAListTypeAttributes).
func GenerateWith(seed uint64, f allocator.Features) *Case {
	return generate(rand.NewPCG(seed, 0x5eed), seed, f)
}

func generate(src rand.Source, seed uint64, f allocator.Features) *Case {
	g := &gen{r: rand.New(src), c: &Case{Seed: seed}, f: f}
	g.c.Inputs.Features = &g.f
	g.cluster()
	g.gatedFields()
	g.preallocate()
	for i := 0; i < claimsPer; i++ {
		g.c.Claims = append(g.c.Claims, g.claim(fmt.Sprintf("c%d", i)))
		node := ""
		if g.r.IntN(2) == 0 {
			node = g.c.Inputs.Nodes[g.r.IntN(len(g.c.Inputs.Nodes))].Name
		}
		g.c.Node = append(g.c.Node, node)
	}
	return g.c
}

func (g *gen) chance(p float64) bool { return g.r.Float64() < p }

func (g *gen) meta(name string) metav1.ObjectMeta {
	g.uid++
	// UIDs are unique across seeds, as in a cluster: engines may cache
	// per-device results by slice UID and resourceVersion across sessions.
	return metav1.ObjectMeta{Name: name, UID: types.UID(fmt.Sprintf("seed-%d-uid-%d", g.c.Seed, g.uid)), ResourceVersion: "1"}
}

func (g *gen) cluster() {
	in := &g.c.Inputs
	nodes := 1 + g.r.IntN(4)
	for i := 0; i < nodes; i++ {
		m := g.meta(fmt.Sprintf("node-%d", i))
		m.Labels = map[string]string{"rack": fmt.Sprintf("r%d", i%2)}
		in.Nodes = append(in.Nodes, &corev1.Node{ObjectMeta: m})
	}
	in.Classes = []*resourceapi.DeviceClass{
		g.class("gpu", fmt.Sprintf("device.driver == %q", gpuDriver)),
		g.class("gpu-big", fmt.Sprintf("device.driver == %q", gpuDriver), `has(device.attributes["gpu.example.com"].mem) && device.attributes["gpu.example.com"].mem >= 2`),
		g.class("nic", fmt.Sprintf("device.driver == %q", nicDriver)),
		g.class("any"),
	}
	for _, n := range in.Nodes {
		if g.chance(0.8) {
			g.nodePool(n.Name)
		}
		if g.chance(0.4) {
			g.partitionPool(n.Name)
		}
		if g.chance(0.3) {
			g.quantityPool(n.Name)
		}
	}
	if g.chance(0.08) {
		g.manyPool(in.Nodes[g.r.IntN(len(in.Nodes))].Name)
	}
	for _, n := range in.Nodes {
		if g.chance(0.35) {
			g.sharedPool(n.Name)
		}
	}
	if g.chance(0.5) {
		g.multiHostPool()
	}
	if g.chance(0.6) {
		g.fabricPool()
	}
}

func (g *gen) class(name string, selectors ...string) *resourceapi.DeviceClass {
	c := &resourceapi.DeviceClass{ObjectMeta: g.meta(name)}
	for _, s := range selectors {
		c.Spec.Selectors = append(c.Spec.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: s}})
	}
	return c
}

// slice adds a slice of pool at generation gen out of count.
func (g *gen) slice(name, driver, pool string, gen, count int64, devices []resourceapi.Device) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: g.meta(name),
		Spec: resourceapi.ResourceSliceSpec{
			Driver:  driver,
			Pool:    resourceapi.ResourcePool{Name: pool, Generation: gen, ResourceSliceCount: count},
			Devices: devices,
		},
	}
	g.c.Inputs.Slices = append(g.c.Inputs.Slices, s)
	return s
}

func (g *gen) track(driver, pool string, s *resourceapi.ResourceSlice) {
	for i := range s.Spec.Devices {
		g.devices = append(g.devices, genDevice{driver, pool, &s.Spec.Devices[i]})
	}
}

// gpuDevice is a GPU with random attributes and, sometimes, a taint.
func (g *gen) gpuDevice(name string, index int) resourceapi.Device {
	mem := int64(1 + g.r.IntN(4))
	d := resourceapi.Device{
		Name: name,
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"index": {IntValue: ptr.To(int64(index))},
			"model": {StringValue: ptr.To([]string{"a", "b"}[g.r.IntN(2)])},
			"mem":   {IntValue: ptr.To(mem)},
			"numa":  {IntValue: ptr.To(int64(g.r.IntN(2)))},
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: *resource.NewQuantity(mem<<30, resource.BinarySI)}},
	}
	if a, ok := g.pcieRoot(); ok {
		d.Attributes[pcieRoot] = a
	}
	g.maybeTaint(&d)
	return d
}

// pcieRoot is a scalar or list root, or none.
func (g *gen) pcieRoot() (resourceapi.DeviceAttribute, bool) {
	roots := []string{"p0", "p1", "p2"}
	switch g.r.IntN(10) {
	case 0:
		return resourceapi.DeviceAttribute{}, false
	case 1, 2, 3, 4:
		return resourceapi.DeviceAttribute{StringValue: ptr.To(roots[g.r.IntN(3)])}, true
	default:
		a := g.r.IntN(3)
		list := []string{roots[a]}
		if g.chance(0.6) {
			list = append(list, roots[(a+1+g.r.IntN(2))%3])
		}
		if !g.f.ListTypeAttributes && g.chance(0.5) {
			// The API server drops list values while the gate is off;
			// a slice written before the gate was turned off keeps them.
			return resourceapi.DeviceAttribute{StringValue: ptr.To(list[0])}, true
		}
		return resourceapi.DeviceAttribute{StringValues: list}, true
	}
}

func (g *gen) maybeTaint(d *resourceapi.Device) {
	if !g.chance(0.15) {
		return
	}
	effects := []resourceapi.DeviceTaintEffect{resourceapi.DeviceTaintEffectNoSchedule, resourceapi.DeviceTaintEffectNoExecute, resourceapi.DeviceTaintEffectNone}
	d.Taints = []resourceapi.DeviceTaint{{Key: []string{"k1", "k2"}[g.r.IntN(2)], Value: "v1", Effect: effects[g.r.IntN(3)]}}
}

// nodePool is a node-local GPU pool, sometimes split over two slices,
// sometimes incomplete, sometimes with a stale older generation.
func (g *gen) nodePool(node string) {
	pool := node
	n := g.r.IntN(6)
	var devs []resourceapi.Device
	for i := 0; i < n; i++ {
		devs = append(devs, g.gpuDevice(fmt.Sprintf("gpu-%d", i), i))
	}
	gen := int64(1)
	if g.chance(0.15) {
		gen = 2
		old := g.slice(node+"-old", gpuDriver, pool, 1, 1, []resourceapi.Device{g.gpuDevice("stale-0", 99)})
		old.Spec.NodeName = ptr.To(node)
	}
	parts := [][]resourceapi.Device{devs}
	if n > 1 && g.chance(0.3) {
		parts = [][]resourceapi.Device{devs[:n/2], devs[n/2:]}
	}
	count := int64(len(parts))
	if g.chance(0.1) {
		count++ // a slice is missing: the pool is incomplete
	}
	for i, p := range parts {
		s := g.slice(fmt.Sprintf("%s-gpu-%d", node, i), gpuDriver, pool, gen, count, p)
		s.Spec.NodeName = ptr.To(node)
		g.track(gpuDriver, pool, s)
	}
}

func counters(kv ...any) map[string]resourceapi.Counter {
	out := map[string]resourceapi.Counter{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i].(string)] = resourceapi.Counter{Value: *resource.NewQuantity(int64(kv[i+1].(int)), resource.DecimalSI)}
	}
	return out
}

// partitionPool is one partitionable GPU: a counter slice and a device
// slice with the whole GPU and random partitions of it.
func (g *gen) partitionPool(node string) {
	pool := node + "-part"
	cs := g.slice(node+"-counters", gpuDriver, pool, 1, 2, nil)
	cs.Spec.NodeName = ptr.To(node)
	cs.Spec.SharedCounters = []resourceapi.CounterSet{{Name: "gpu", Counters: counters("mem", 4, "sm", 2)}}
	devs := []resourceapi.Device{g.gpuDevice("whole", 0)}
	devs[0].ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu", Counters: counters("mem", 4, "sm", 2)}}
	for i := 1; i <= 2+g.r.IntN(3); i++ {
		d := g.gpuDevice(fmt.Sprintf("part-%d", i), i)
		d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu", Counters: counters("mem", 1+g.r.IntN(3), "sm", g.r.IntN(2))}}
		devs = append(devs, d)
	}
	ds := g.slice(node+"-parts", gpuDriver, pool, 1, 2, devs)
	ds.Spec.NodeName = ptr.To(node)
	g.track(gpuDriver, pool, ds)
}

// multiHostPool is published centrally with per-device node selection: a
// device per rack (reaching its nodes), one per node, and one for all
// nodes, sharing per-host counters.
func (g *gen) multiHostPool() {
	const pool = "tpu"
	hostCounters := map[string]resourceapi.Counter{}
	for i := range g.c.Inputs.Nodes {
		hostCounters[fmt.Sprintf("host-%d", i)] = resourceapi.Counter{Value: *resource.NewQuantity(1, resource.DecimalSI)}
	}
	cs := g.slice("tpu-counters", gpuDriver, pool, 1, 2, nil)
	cs.Spec.AllNodes = ptr.To(true)
	cs.Spec.SharedCounters = []resourceapi.CounterSet{{Name: "hosts", Counters: hostCounters}}

	var devs []resourceapi.Device
	consume := func(d *resourceapi.Device, hosts ...int) {
		c := resourceapi.DeviceCounterConsumption{CounterSet: "hosts", Counters: map[string]resourceapi.Counter{}}
		for _, h := range hosts {
			c.Counters[fmt.Sprintf("host-%d", h)] = resourceapi.Counter{Value: *resource.NewQuantity(1, resource.DecimalSI)}
		}
		d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{c}
	}
	for rack := 0; rack < 2 && rack < len(g.c.Inputs.Nodes); rack++ {
		d := g.gpuDevice(fmt.Sprintf("rack-%d", rack), 10+rack)
		d.NodeSelector = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "rack", Operator: corev1.NodeSelectorOpIn, Values: []string{fmt.Sprintf("r%d", rack)}}},
		}}}
		var hosts []int
		for i := rack; i < len(g.c.Inputs.Nodes); i += 2 {
			hosts = append(hosts, i)
		}
		consume(&d, hosts...)
		devs = append(devs, d)
	}
	for i, n := range g.c.Inputs.Nodes {
		if g.chance(0.5) {
			d := g.gpuDevice(fmt.Sprintf("host-%d", i), 20+i)
			d.NodeName = ptr.To(n.Name)
			consume(&d, i)
			devs = append(devs, d)
		}
	}
	anywhere := g.gpuDevice("anywhere", 30)
	anywhere.AllNodes = ptr.To(true)
	devs = append(devs, anywhere)
	ds := g.slice("tpu-devices", gpuDriver, pool, 1, 2, devs)
	ds.Spec.PerDeviceNodeSelection = ptr.To(true)
	g.track(gpuDriver, pool, ds)
}

// fabricPool is network-attached NICs reachable from all nodes.
func (g *gen) fabricPool() {
	var devs []resourceapi.Device
	for i := 0; i < 1+g.r.IntN(3); i++ {
		d := resourceapi.Device{Name: fmt.Sprintf("nic-%d", i), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"numa": {IntValue: ptr.To(int64(g.r.IntN(2)))},
		}}
		if a, ok := g.pcieRoot(); ok {
			d.Attributes[pcieRoot] = a
		}
		g.maybeTaint(&d)
		devs = append(devs, d)
	}
	s := g.slice("fabric", nicDriver, "fabric", 1, 1, devs)
	s.Spec.AllNodes = ptr.To(true)
	g.track(nicDriver, "fabric", s)
}

// scales are the units of quantityPool's counters, as powers of ten: from
// 1n to 1e18, where exact arithmetic needs more than an int64 of
// nano-units.
var scales = []int64{-9, -6, -3, 0, 3, 9, 15, 18}

// nanoQuantity is v nano-units, exactly, however large.
func nanoQuantity(v *big.Int) resource.Quantity {
	return resource.MustParse(v.String() + "n")
}

// quantityPool is a node-local pool with one counter at a random scale
// (1n to 1e18) and devices consuming amounts at and around its boundaries:
// the whole counter, half of it, one unit or one nano-unit more or less,
// and amounts of other scales, so that only exact arithmetic allocates
// exactly what kube-scheduler does.
func (g *gen) quantityPool(node string) {
	pool := node + "-qty"
	pow := func(e int64) *big.Int { return new(big.Int).Exp(big.NewInt(10), big.NewInt(e), nil) }
	unit := pow(scales[g.r.IntN(len(scales))] + 9) // in nano-units
	capacity := new(big.Int).Mul(unit, big.NewInt(int64(1+g.r.IntN(4))))
	one := big.NewInt(1)
	amount := func() *big.Int {
		v := new(big.Int)
		switch g.r.IntN(9) {
		case 0:
			v.Set(capacity)
		case 1:
			v.Quo(capacity, big.NewInt(2))
		case 2:
			v.Add(capacity, one)
		case 3:
			v.Sub(capacity, one)
		case 4:
			v.Set(unit)
		case 5:
			v.Add(unit, one)
		case 6:
			v.Sub(unit, one)
		case 7:
			// Another scale altogether.
			v.Set(pow(scales[g.r.IntN(len(scales))] + 9))
		default:
			v.Quo(new(big.Int).Mul(capacity, big.NewInt(int64(1+g.r.IntN(3)))), big.NewInt(3))
		}
		if v.Sign() <= 0 {
			v.Set(one)
		}
		return v
	}
	cs := g.slice(node+"-qty-counters", gpuDriver, pool, 1, 2, nil)
	cs.Spec.NodeName = ptr.To(node)
	cs.Spec.SharedCounters = []resourceapi.CounterSet{{Name: "q", Counters: map[string]resourceapi.Counter{"c": {Value: nanoQuantity(capacity)}}}}
	var devs []resourceapi.Device
	for i := range 2 + g.r.IntN(3) {
		d := g.gpuDevice(fmt.Sprintf("q-%d", i), 40+i)
		d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: "q", Counters: map[string]resourceapi.Counter{"c": {Value: nanoQuantity(amount())}}}}
		devs = append(devs, d)
	}
	ds := g.slice(node+"-qty-devices", gpuDriver, pool, 1, 2, devs)
	ds.Spec.NodeName = ptr.To(node)
	g.track(gpuDriver, pool, ds)
}

// manyPool is a node-local pool with more devices than a claim can hold
// (34), for counts near the per-claim limit of 32.
func (g *gen) manyPool(node string) {
	pool := node + "-many"
	devs := make([]resourceapi.Device, 34)
	for i := range devs {
		devs[i] = resourceapi.Device{Name: fmt.Sprintf("m-%d", i), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"index": {IntValue: ptr.To(int64(100 + i))},
			"model": {StringValue: ptr.To("m")},
		}}
	}
	s := g.slice(node+"-many", gpuDriver, pool, 1, 1, devs)
	s.Spec.NodeName = ptr.To(node)
	g.track(gpuDriver, pool, s)
}

// sharedPool is a node's shared devices (KEP-5075): GPUs with
// allowMultipleAllocations and a memory capacity, NICs with a bandwidth
// capacity, each capacity with a random request policy (none, a range with
// or without default, max and step, or a list of valid values), and
// sometimes a partitioned shared GPU whose counters are charged once.
func (g *gen) sharedPool(node string) {
	pool := node + "-shared"
	var devs []resourceapi.Device
	for i := 0; i < 1+g.r.IntN(3); i++ {
		d := g.gpuDevice(fmt.Sprintf("shared-gpu-%d", i), 10+i)
		d.AllowMultipleAllocations = ptr.To(g.chance(0.85))
		d.Capacity["memory"] = resourceapi.DeviceCapacity{
			Value:         *resource.NewQuantity(int64(4+g.r.IntN(13))<<30, resource.BinarySI),
			RequestPolicy: g.memoryPolicy(),
		}
		if g.chance(0.3) {
			d.Capacity["cores"] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(int64(2+g.r.IntN(8)), resource.DecimalSI), RequestPolicy: g.corePolicy()}
		}
		devs = append(devs, d)
	}
	if g.chance(0.5) {
		d := resourceapi.Device{
			Name:                     "shared-nic",
			AllowMultipleAllocations: ptr.To(true),
			Attributes:               map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"kind": {StringValue: ptr.To("nic")}},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"bandwidth": {
				Value: resource.MustParse("100G"),
				RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: ptr.To(resource.MustParse("10G")), ValidValues: []resource.Quantity{
					resource.MustParse("10G"), resource.MustParse("25G"), resource.MustParse("50G")}},
			}},
		}
		devs = append(devs, d)
	}
	var s *resourceapi.ResourceSlice
	if g.chance(0.3) {
		// A partitioned GPU whose partitions are shared.
		cs := g.slice(node+"-shared-counters", gpuDriver, pool, 1, 2, nil)
		cs.Spec.NodeName = ptr.To(node)
		cs.Spec.SharedCounters = []resourceapi.CounterSet{{Name: "gpu", Counters: counters("mem", 4)}}
		for i := range devs {
			devs[i].ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu", Counters: counters("mem", 1+g.r.IntN(3))}}
		}
		s = g.slice(node+"-shared", gpuDriver, pool, 1, 2, devs)
	} else {
		s = g.slice(node+"-shared", gpuDriver, pool, 1, 1, devs)
	}
	s.Spec.NodeName = ptr.To(node)
	g.track(gpuDriver, pool, s)
}

func gi(n int64) *resource.Quantity { return resource.NewQuantity(n<<30, resource.BinarySI) }

// memoryPolicy is a random request policy for a memory capacity.
func (g *gen) memoryPolicy() *resourceapi.CapacityRequestPolicy {
	switch g.r.IntN(6) {
	case 0, 1:
		return nil
	case 2:
		return &resourceapi.CapacityRequestPolicy{Default: gi(1), ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: gi(1), Step: gi(1)}}
	case 3:
		return &resourceapi.CapacityRequestPolicy{Default: gi(2), ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: gi(2), Max: gi(6), Step: gi(2)}}
	case 4:
		return &resourceapi.CapacityRequestPolicy{ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: resource.NewQuantity(512<<20, resource.BinarySI)}}
	}
	return &resourceapi.CapacityRequestPolicy{Default: gi(1), ValidValues: []resource.Quantity{*gi(1), *gi(2), *gi(4)}}
}

// corePolicy is a random request policy for a count of cores, sometimes
// with fractional requests rounded up to whole steps, and sometimes a
// fractional range (DRAFractionalCapacityRange: milli-unit arithmetic with
// the gate, whole units without).
func (g *gen) corePolicy() *resourceapi.CapacityRequestPolicy {
	milli := func(v int64) *resource.Quantity { return resource.NewMilliQuantity(v, resource.DecimalSI) }
	switch g.r.IntN(5) {
	case 0:
		return nil
	case 3:
		return &resourceapi.CapacityRequestPolicy{Default: milli(500), ValidRange: &resourceapi.CapacityRequestPolicyRange{
			Min: milli(500), Step: milli(250)}}
	case 4:
		return &resourceapi.CapacityRequestPolicy{Default: milli(100), ValidRange: &resourceapi.CapacityRequestPolicyRange{
			Min: milli(100), Max: milli(4000), Step: milli(100)}}
	case 1:
		return &resourceapi.CapacityRequestPolicy{Default: resource.NewQuantity(1, resource.DecimalSI), ValidRange: &resourceapi.CapacityRequestPolicyRange{
			Min: resource.NewQuantity(1, resource.DecimalSI), Step: resource.NewQuantity(1, resource.DecimalSI)}}
	}
	return &resourceapi.CapacityRequestPolicy{Default: resource.NewQuantity(2, resource.DecimalSI), ValidRange: &resourceapi.CapacityRequestPolicyRange{
		Min: resource.NewQuantity(2, resource.DecimalSI), Max: resource.NewQuantity(6, resource.DecimalSI), Step: resource.NewQuantity(2, resource.DecimalSI)}}
}

// capacityRequests are random capacity requests (nil for none): memory,
// cores, bandwidth, or a capacity no device has.
func (g *gen) capacityRequests() *resourceapi.CapacityRequirements {
	if !g.chance(0.25) {
		return nil
	}
	req := map[resourceapi.QualifiedName]resource.Quantity{}
	for len(req) == 0 || g.chance(0.2) {
		switch g.r.IntN(8) {
		case 0, 1, 2:
			req["memory"] = []resource.Quantity{resource.MustParse("512Mi"), resource.MustParse("1Gi"), resource.MustParse("1500Mi"),
				resource.MustParse("2Gi"), resource.MustParse("3Gi"), resource.MustParse("5Gi"), resource.MustParse("100Gi")}[g.r.IntN(7)]
		case 3, 4:
			req["cores"] = []resource.Quantity{resource.MustParse("500m"), resource.MustParse("1"), resource.MustParse("1500m"), resource.MustParse("3"),
				resource.MustParse("750m"), resource.MustParse("1100m"), resource.MustParse("1n")}[g.r.IntN(7)]
		case 5, 6:
			req["bandwidth"] = []resource.Quantity{resource.MustParse("5G"), resource.MustParse("25G"), resource.MustParse("40G"), resource.MustParse("60G")}[g.r.IntN(4)]
		default:
			req["missing"] = resource.MustParse("1")
		}
	}
	return &resourceapi.CapacityRequirements{Requests: req}
}
