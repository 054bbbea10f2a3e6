package difftest

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/rand/v2"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

// GenerateFrom builds a case from arbitrary bytes, for fuzzing: the bytes
// drive the same generator as Generate (so a small change of input is a
// small change of the cluster or the claims) and then a few mutations that
// make inputs invalid the way hand-written YAML or a buggy driver would:
// bad counts and modes, missing classes, selectors that do not compile or
// fail at runtime, broken CEL annotations, duplicate devices, pools that
// can never be complete, consumption of counters that do not exist, claims
// for unknown nodes and allocated claims naming unknown devices. Engines
// must answer all of it with results or errors, never a panic.
func GenerateFrom(data []byte) *Case {
	h := fnv.New64a()
	h.Write(data)
	src := &byteSource{data: data, rest: rand.NewPCG(h.Sum64(), 0xb17e5)}
	c := generate(src, h.Sum64(), allocator.DefaultFeatures())
	// UIDs of mangled objects must not repeat the generator's.
	g := &gen{r: rand.New(src), c: c, uid: 1 << 20}
	g.mangle()
	return c
}

// byteSource yields the input bytes as random numbers, then a generator
// seeded with their hash (so that running out of input does not turn every
// random choice into the same one).
type byteSource struct {
	data []byte
	rest *rand.PCG
}

// Uint64 implements rand.Source.
func (b *byteSource) Uint64() uint64 {
	if len(b.data) == 0 {
		return b.rest.Uint64()
	}
	var buf [8]byte
	n := copy(buf[:], b.data)
	b.data = b.data[n:]
	return binary.LittleEndian.Uint64(buf[:])
}

// mangle applies a few invalidating mutations.
func (g *gen) mangle() {
	mutations := []func(){
		g.mangleCount, g.mangleMode, g.mangleClass, g.mangleSelector, g.mangleAnnotation,
		g.mangleConstraint, g.mangleNode, g.mangleDuplicateDevice, g.mangleSliceCount,
		g.mangleCounterSet, g.mangleAllocated,
	}
	for n := g.r.IntN(4); n > 0; n-- {
		mutations[g.r.IntN(len(mutations))]()
	}
}

func (g *gen) pickClaim() *resourceapi.ResourceClaim { return g.c.Claims[g.r.IntN(len(g.c.Claims))] }

// pickExact returns an exactly request or subrequest of some claim as its
// mutable fields, or nil.
func (g *gen) pickExact() (count *int64, mode *resourceapi.DeviceAllocationMode, class *string, selectors *[]resourceapi.DeviceSelector) {
	claim := g.pickClaim()
	if len(claim.Spec.Devices.Requests) == 0 {
		return nil, nil, nil, nil
	}
	r := &claim.Spec.Devices.Requests[g.r.IntN(len(claim.Spec.Devices.Requests))]
	if r.Exactly != nil {
		return &r.Exactly.Count, &r.Exactly.AllocationMode, &r.Exactly.DeviceClassName, &r.Exactly.Selectors
	}
	if len(r.FirstAvailable) == 0 {
		return nil, nil, nil, nil
	}
	sub := &r.FirstAvailable[g.r.IntN(len(r.FirstAvailable))]
	return &sub.Count, &sub.AllocationMode, &sub.DeviceClassName, &sub.Selectors
}

func (g *gen) mangleCount() {
	if count, mode, _, _ := g.pickExact(); count != nil {
		*mode = resourceapi.DeviceAllocationModeExactCount
		*count = []int64{-1, 0, 32, 33, 1 << 40}[g.r.IntN(5)]
	}
}

func (g *gen) mangleMode() {
	if _, mode, _, _ := g.pickExact(); mode != nil {
		*mode = []resourceapi.DeviceAllocationMode{"", "Bogus", resourceapi.DeviceAllocationModeAll}[g.r.IntN(3)]
	}
}

func (g *gen) mangleClass() {
	if _, _, class, _ := g.pickExact(); class != nil {
		*class = []string{"", "missing"}[g.r.IntN(2)]
	}
}

// badSelectors do not compile, do not return a bool, or fail at runtime on
// devices without the attribute.
var badSelectors = []string{
	`device.attributes[`,
	`device.attributes["gpu.example.com"].model`,
	`device.attributes["gpu.example.com"].nosuch == 1`,
	`device.capacity["gpu.example.com"].memory.compareTo(quantity("bad")) > 0`,
	`device.attributes["gpu.example.com"].mem / 0 == 1`,
}

func (g *gen) mangleSelector() {
	if _, _, _, sels := g.pickExact(); sels != nil {
		*sels = append(*sels, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: badSelectors[g.r.IntN(len(badSelectors))]}})
	}
}

var badAnnotations = []string{
	`not json`,
	`[{"expression": ""}]`,
	`[{"expression": "devices.size("}]`,
	`[{"expression": "1 + 1"}]`,
	`[{"requests": ["nosuch"], "expression": "true"}]`,
	`[{"expression": "true", "extra": 1}]`,
	`[{"expression": "devices.all(d, d.attributes[\"gpu.example.com\"].nosuch == 1)"}]`,
	`{"expression": "true"}`,
	`[] []`,
}

func (g *gen) mangleAnnotation() {
	c := g.pickClaim()
	c.Annotations = map[string]string{allocator.CELConstraintsAnnotation: badAnnotations[g.r.IntN(len(badAnnotations))]}
}

func (g *gen) mangleConstraint() {
	c := g.pickClaim()
	con := resourceapi.DeviceConstraint{}
	switch g.r.IntN(3) {
	case 0: // neither
	case 1: // both
		con.MatchAttribute = ptr.To(resourceapi.FullyQualifiedName(pcieRoot))
		con.DistinctAttribute = ptr.To(resourceapi.FullyQualifiedName(pcieRoot))
	default: // an attribute nothing has, on a request that does not exist
		con.MatchAttribute = ptr.To(resourceapi.FullyQualifiedName("nosuch.example.com/x"))
		con.Requests = []string{"nosuch"}
	}
	c.Spec.Devices.Constraints = append(c.Spec.Devices.Constraints, con)
}

func (g *gen) mangleNode() {
	g.c.Node[g.r.IntN(len(g.c.Node))] = "ghost"
}

func (g *gen) pickSlice() *resourceapi.ResourceSlice {
	if len(g.c.Inputs.Slices) == 0 {
		return nil
	}
	return g.c.Inputs.Slices[g.r.IntN(len(g.c.Inputs.Slices))]
}

func (g *gen) mangleDuplicateDevice() {
	if s := g.pickSlice(); s != nil && len(s.Spec.Devices) > 0 {
		s.Spec.Devices = append(s.Spec.Devices, *s.Spec.Devices[0].DeepCopy())
	}
}

func (g *gen) mangleSliceCount() {
	if s := g.pickSlice(); s != nil {
		s.Spec.Pool.ResourceSliceCount = []int64{0, -1, 1000}[g.r.IntN(3)]
	}
}

func (g *gen) mangleCounterSet() {
	if s := g.pickSlice(); s != nil && len(s.Spec.Devices) > 0 {
		d := &s.Spec.Devices[g.r.IntN(len(s.Spec.Devices))]
		d.ConsumesCounters = append(d.ConsumesCounters, resourceapi.DeviceCounterConsumption{CounterSet: "nosuch", Counters: counters("x", 1)})
	}
}

func (g *gen) mangleAllocated() {
	claim := &resourceapi.ResourceClaim{ObjectMeta: g.meta(fmt.Sprintf("ghost-%d", g.r.IntN(100)))}
	claim.Namespace = "default"
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "r", Driver: gpuDriver, Pool: "nosuch", Device: "nosuch",
	}}}}
	g.c.Inputs.Allocated = append(g.c.Inputs.Allocated, claim)
}
