package difftest

import (
	"encoding/json"
	"fmt"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

// preallocate gives a few random devices to claims that are already
// allocated, so that the engines start from a partly used cluster. Shared
// counters are mostly respected; sometimes (as after a driver shrank a
// counter set) a device is given although its counters are used up, which
// leaves the pool over-consumed.
func (g *gen) preallocate() {
	capacity := map[string]resource.Quantity{} // pool/set/counter
	for _, s := range g.c.Inputs.Slices {
		for _, set := range s.Spec.SharedCounters {
			for name, c := range set.Counters {
				capacity[s.Spec.Pool.Name+"/"+set.Name+"/"+name] = c.Value
			}
		}
	}
	used := map[string]bool{}
	shared := map[string]int{} // device key -> shares so far
	n := g.r.IntN(5)
	if len(g.devices) > 0 && g.chance(0.5) {
		n += 3 // room for shares
	}
	var last *genDevice
	for i := 0; i < n && len(g.devices) > 0; i++ {
		d := g.devices[g.r.IntN(len(g.devices))]
		if last != nil && g.chance(0.4) {
			// Another device of the same pool: partitions of one GPU
			// compete for its counters.
			var same []genDevice
			for _, o := range g.devices {
				if o.driver == last.driver && o.pool == last.pool {
					same = append(same, o)
				}
			}
			d = same[g.r.IntN(len(same))]
		}
		last = &d
		key := d.driver + "/" + d.pool + "/" + d.dev.Name
		if ptr.Deref(d.dev.AllowMultipleAllocations, false) && !used[key] && g.chance(0.8) {
			g.preallocateShare(i, d, shared)
			continue
		}
		if used[key] || (!fits(capacity, d) && !g.chance(0.6)) {
			continue
		}
		admin := g.chance(0.1)
		if !admin {
			used[key] = true
			for _, c := range d.dev.ConsumesCounters {
				for name, v := range c.Counters {
					k := d.pool + "/" + c.CounterSet + "/" + name
					q := capacity[k]
					q.Sub(v.Value)
					capacity[k] = q
				}
			}
		}
		claim := &resourceapi.ResourceClaim{ObjectMeta: g.meta(fmt.Sprintf("pre-%d", i))}
		claim.Namespace = "default"
		claim.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "r", Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: "any", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1, AdminAccess: adminPtr(admin),
		}}}
		claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "r", Driver: d.driver, Pool: d.pool, Device: d.dev.Name, AdminAccess: adminPtr(admin),
		}}}}
		g.c.Inputs.Allocated = append(g.c.Inputs.Allocated, claim)
	}
}

// preallocateShare gives claim pre-i a share of shared device d (KEP-5075)
// that consumes a random part of each capacity: sometimes nothing is
// recorded, sometimes the shares add up to more than the capacity (a
// driver shrank it), which leaves less or nothing for new shares.
func (g *gen) preallocateShare(i int, d genDevice, shared map[string]int) {
	key := d.driver + "/" + d.pool + "/" + d.dev.Name
	shared[key]++
	claim := &resourceapi.ResourceClaim{ObjectMeta: g.meta(fmt.Sprintf("pre-%d", i))}
	claim.Namespace = "default"
	claim.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "r", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: "any", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
	}}}
	r := resourceapi.DeviceRequestAllocationResult{Request: "r", Driver: d.driver, Pool: d.pool, Device: d.dev.Name,
		ShareID: ptr.To(types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", g.uid)))}
	g.uid++
	if !g.chance(0.1) {
		r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{}
		names := make([]string, 0, len(d.dev.Capacity))
		for name := range d.dev.Capacity {
			names = append(names, string(name))
		}
		slices.Sort(names) // random draws in a fixed order: generation is deterministic
		for _, n := range names {
			name, c := resourceapi.QualifiedName(n), d.dev.Capacity[resourceapi.QualifiedName(n)]
			part := c.Value.DeepCopy()
			if k := g.r.IntN(5); k > 0 {
				// A quarter, a half, ... of the capacity, in milli-units.
				part = *resource.NewMilliQuantity(c.Value.MilliValue()/4*int64(k), c.Value.Format)
			}
			r.ConsumedCapacity[name] = part
		}
	}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{r}}}
	g.c.Inputs.Allocated = append(g.c.Inputs.Allocated, claim)
}

func adminPtr(admin bool) *bool {
	if admin {
		return ptr.To(true)
	}
	return nil
}

func fits(capacity map[string]resource.Quantity, d genDevice) bool {
	for _, c := range d.dev.ConsumesCounters {
		for name, v := range c.Counters {
			q := capacity[d.pool+"/"+c.CounterSet+"/"+name]
			if q.Cmp(v.Value) < 0 {
				return false
			}
		}
	}
	return true
}

// Request selectors guard every attribute with has(): selectors must not
// fail at runtime on devices of another driver, or engines that evaluate
// them in a different order would legitimately differ.
var requestSelectors = []string{
	`has(device.attributes["gpu.example.com"].model) && device.attributes["gpu.example.com"].model == "a"`,
	`has(device.attributes["gpu.example.com"].mem) && device.attributes["gpu.example.com"].mem >= 3`,
	`has(device.capacity["gpu.example.com"].memory) && device.capacity["gpu.example.com"].memory.compareTo(quantity("2Gi")) >= 0`,
	`has(device.attributes["resource.kubernetes.io"].pcieRoot)`,
	`!has(device.attributes["gpu.example.com"].numa) || device.attributes["gpu.example.com"].numa == 0`,
}

var classes = []string{"gpu", "gpu", "gpu", "gpu-big", "nic", "any"}

func (g *gen) count() int64 {
	if g.chance(0.04) {
		// Near and above the per-claim limit of 32 devices.
		return []int64{16, 17, 30, 32, 33, 40}[g.r.IntN(6)]
	}
	switch g.r.IntN(10) {
	case 0, 1:
		return 2
	case 2:
		return 3
	default:
		return 1
	}
}

func (g *gen) selectors() []resourceapi.DeviceSelector {
	var out []resourceapi.DeviceSelector
	for g.chance(0.3) && len(out) < 2 {
		out = append(out, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: requestSelectors[g.r.IntN(len(requestSelectors))]}})
	}
	return out
}

func (g *gen) tolerations() []resourceapi.DeviceToleration {
	switch g.r.IntN(10) {
	case 0:
		return []resourceapi.DeviceToleration{{Key: "k1", Operator: resourceapi.DeviceTolerationOpExists}}
	case 1:
		return []resourceapi.DeviceToleration{{Operator: resourceapi.DeviceTolerationOpExists, Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	case 2:
		return []resourceapi.DeviceToleration{{Key: "k2", Operator: resourceapi.DeviceTolerationOpEqual, Value: "v1"}}
	}
	return nil
}

func (g *gen) mode() resourceapi.DeviceAllocationMode {
	if g.chance(0.05) {
		return resourceapi.DeviceAllocationModeAll
	}
	return resourceapi.DeviceAllocationModeExactCount
}

// claim is a claim with one to three requests (some with subrequests) and
// sometimes matchAttribute / distinctAttribute constraints.
func (g *gen) claim(name string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: g.meta(name)}
	c.Namespace = "default"
	nreq := 1 + g.r.IntN(2)
	if g.chance(0.1) {
		nreq = 3
	}
	var names []string // request and subrequest names constraints may use
	for i := 0; i < nreq; i++ {
		rn := fmt.Sprintf("r%d", i)
		names = append(names, rn)
		if g.chance(0.25) {
			req := resourceapi.DeviceRequest{Name: rn}
			for s := 0; s < 2+g.r.IntN(2); s++ {
				sub := resourceapi.DeviceSubRequest{
					Name: fmt.Sprintf("s%d", s), DeviceClassName: classes[g.r.IntN(len(classes))],
					Selectors: g.selectors(), AllocationMode: g.mode(), Tolerations: g.tolerations(),
					Capacity: g.capacityRequests(),
				}
				if sub.AllocationMode == resourceapi.DeviceAllocationModeExactCount {
					sub.Count = g.count()
				}
				req.FirstAvailable = append(req.FirstAvailable, sub)
				names = append(names, rn+"/"+sub.Name)
			}
			c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, req)
			continue
		}
		e := &resourceapi.ExactDeviceRequest{
			DeviceClassName: classes[g.r.IntN(len(classes))], Selectors: g.selectors(),
			AllocationMode: g.mode(), Tolerations: g.tolerations(), Capacity: g.capacityRequests(),
		}
		if e.AllocationMode == resourceapi.DeviceAllocationModeExactCount {
			e.Count = g.count()
		}
		if g.chance(0.05) {
			e.AdminAccess = ptr.To(true)
		}
		c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, resourceapi.DeviceRequest{Name: rn, Exactly: e})
	}
	if g.chance(0.4) {
		attr := []string{pcieRoot, pcieRoot, gpuDriver + "/numa", gpuDriver + "/model"}[g.r.IntN(4)]
		c.Spec.Devices.Constraints = append(c.Spec.Devices.Constraints, resourceapi.DeviceConstraint{
			Requests: g.subset(names), MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(attr)),
		})
	}
	if g.chance(0.2) {
		attr := []string{gpuDriver + "/index", pcieRoot}[g.r.IntN(2)]
		c.Spec.Devices.Constraints = append(c.Spec.Devices.Constraints, resourceapi.DeviceConstraint{
			Requests: g.subset(names), DistinctAttribute: ptr.To(resourceapi.FullyQualifiedName(attr)),
		})
	}
	g.maybeDerived(c, names)
	g.maybeCELConstraint(c, names)
	return c
}

// derivedExpressions are derived attribute expressions (KEP-6080) that
// never fail on a device: scalars of each type, a list, and one that
// reads allowMultipleAllocations.
var derivedExpressions = []string{
	`has(device.attributes["gpu.example.com"].numa) ? device.attributes["gpu.example.com"].numa : -1`,
	`has(device.attributes["gpu.example.com"].index) ? device.attributes["gpu.example.com"].index % 2 : 7`,
	`has(device.attributes["gpu.example.com"].model) ? device.attributes["gpu.example.com"].model : "none"`,
	`device.driver`,
	`device.allowMultipleAllocations`,
	`has(device.attributes["gpu.example.com"].numa) && device.attributes["gpu.example.com"].numa == 0`,
	`["shared", device.driver]`,
	`has(device.capacity["gpu.example.com"].memory) ? device.capacity["gpu.example.com"].memory.compareTo(quantity("8Gi")) >= 0 : false`,
}

// derivedNames are the names derived attributes get: a name no driver uses
// and names that shadow device attributes.
var derivedNames = []string{"derived/key", "derived/key", gpuDriver + "/numa", gpuDriver + "/model"}

// maybeDerived gives some claims derived attributes (generated whatever
// the gates: without DRADerivedAttributes such a claim is invalid) on some
// of their requests and subrequests, usually with a constraint on them.
func (g *gen) maybeDerived(c *resourceapi.ResourceClaim, names []string) {
	if !g.chance(0.06) {
		return
	}
	name := derivedNames[g.r.IntN(len(derivedNames))]
	attr := resourceapi.DeviceDerivedAttribute{Name: resourceapi.FullyQualifiedName(name), Expression: derivedExpressions[g.r.IntN(len(derivedExpressions))]}
	added := false
	for i := range c.Spec.Devices.Requests {
		r := &c.Spec.Devices.Requests[i]
		if r.Exactly != nil && (g.chance(0.7) || !added) {
			r.Exactly.DerivedAttributes = append(r.Exactly.DerivedAttributes, attr)
			added = true
		}
		for s := range r.FirstAvailable {
			if g.chance(0.7) || !added {
				r.FirstAvailable[s].DerivedAttributes = append(r.FirstAvailable[s].DerivedAttributes, attr)
				added = true
			}
		}
	}
	if !g.chance(0.8) {
		return
	}
	cons := resourceapi.DeviceConstraint{Requests: g.subset(names)}
	if g.chance(0.7) {
		cons.MatchAttribute = ptr.To(resourceapi.FullyQualifiedName(name))
	} else {
		cons.DistinctAttribute = ptr.To(resourceapi.FullyQualifiedName(name))
	}
	c.Spec.Devices.Constraints = append(c.Spec.Devices.Constraints, cons)
}

// celConstraints are KEP-5254 constraints for the native engine only
// (upstream does not support them); they guard attributes with has() so
// that they never fail at runtime.
var celConstraints = []string{
	`devices.all(d, !has(d.attributes["gpu.example.com"].numa) || d.attributes["gpu.example.com"].numa == 0)`,
	`size(devices) <= 2`,
	`devices.map(d, has(d.attributes["gpu.example.com"].index) ? d.attributes["gpu.example.com"].index : 0).sum() % 2 == 0`,
	`devices.exists(d, has(d.attributes["gpu.example.com"].model) && d.attributes["gpu.example.com"].model == "b")`,
}

// maybeCELConstraint annotates some claims with a CEL constraint.
func (g *gen) maybeCELConstraint(c *resourceapi.ResourceClaim, names []string) {
	if !g.chance(0.1) {
		return
	}
	value, _ := json.Marshal([]map[string]any{{
		"requests":   g.subset(names),
		"expression": celConstraints[g.r.IntN(len(celConstraints))],
	}})
	c.Annotations = map[string]string{allocator.CELConstraintsAnnotation: string(value)}
}

// subset is empty (all requests) half the time, else a random non-empty
// subset of the names.
func (g *gen) subset(names []string) []string {
	if g.chance(0.5) {
		return nil
	}
	var out []string
	for _, n := range names {
		if g.chance(0.6) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		out = []string{names[0]}
	}
	return out
}
