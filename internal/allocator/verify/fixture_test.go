package verify

import (
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

const (
	gpuDriver = "gpu.example.com"
	nicDriver = "nic.example.com"
	pcieRoot  = "resource.kubernetes.io/pcieRoot"
)

// The test cluster:
//
//	node-1 (rack r1): pool node-1 with gpu-0..gpu-5 (gpu-2 is allocated to
//	  default/busy, gpu-3 has a NoSchedule taint, gpu-5 has no pcieRoot);
//	  pool node-1-part: one GPU's memory (4) as "whole" (4) or two halves
//	  (2 each) in a counter slice separate from the device slice; half-1 is
//	  allocated to default/busy; pool broken on node-1 is incomplete.
//	node-2 (rack r2): pool node-2, generation 2 with gpu-0; generation 1
//	  had old-0.
//	pool tpu (gpu driver, per-device node selection): r1 (rack r1), r2 (rack
//	  r2), any (all nodes).
//	pool fabric (nic driver, all nodes): net-0, net-1.
func fixture() allocator.Inputs {
	gpus := nodeSlice("node-1-gpus", "node-1", "node-1",
		gpu("gpu-0", 0, "a", "b"), gpu("gpu-1", 1, "b", "c"), gpu("gpu-2", 2, "c"),
		tainted(gpu("gpu-3", 3, "d")), gpu("gpu-4", 4, "d"), gpu("gpu-5", 5))
	counters := nodeSlice("node-1-counters", "node-1-part", "node-1")
	counters.Spec.SharedCounters = []resourceapi.CounterSet{{Name: "mem-0", Counters: map[string]resourceapi.Counter{"mem": {Value: qty(4)}}}}
	parts := nodeSlice("node-1-parts", "node-1-part", "node-1",
		consumes(gpu("whole", 10), 4), consumes(gpu("half-0", 11), 2), consumes(gpu("half-1", 12), 2))
	counters.Spec.Pool.ResourceSliceCount, parts.Spec.Pool.ResourceSliceCount = 2, 2
	broken := nodeSlice("broken-0", "broken", "node-1", gpu("x-0", 20))
	broken.Spec.Pool.ResourceSliceCount = 2
	old := nodeSlice("node-2-old", "node-2", "node-2", gpu("old-0", 30))
	current := nodeSlice("node-2-gpus", "node-2", "node-2", gpu("gpu-0", 31))
	current.Spec.Pool.Generation = 2

	tpu := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "tpu"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: gpuDriver, Pool: resourceapi.ResourcePool{Name: "tpu", Generation: 1, ResourceSliceCount: 1},
			PerDeviceNodeSelection: ptr.To(true),
			Devices:                []resourceapi.Device{rackDevice("r1", "r1"), rackDevice("r2", "r2"), allNodesDevice("any")},
		},
	}
	fabric := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "fabric"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: nicDriver, Pool: resourceapi.ResourcePool{Name: "fabric", Generation: 1, ResourceSliceCount: 1},
			AllNodes: ptr.To(true),
			Devices:  []resourceapi.Device{{Name: "net-0"}, {Name: "net-1"}},
		},
	}
	busy := claimWith("busy", exact("gpu", "gpu", 2))
	busy.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		res("gpu", "node-1", "gpu-2"), res("gpu", "node-1-part", "half-1"),
	}}}
	return allocator.Inputs{
		Nodes: []*corev1.Node{
			{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"rack": "r1"}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "node-2", Labels: map[string]string{"rack": "r2"}}},
		},
		Classes:   []*resourceapi.DeviceClass{driverClass("gpu", gpuDriver), driverClass("nic", nicDriver)},
		Slices:    []*resourceapi.ResourceSlice{gpus, counters, parts, broken, old, current, tpu, fabric},
		Allocated: []*resourceapi.ResourceClaim{busy},
	}
}

func qty(v int64) resource.Quantity { return *resource.NewQuantity(v, resource.DecimalSI) }

func gpu(name string, index int64, roots ...string) resourceapi.Device {
	d := resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"index": {IntValue: ptr.To(index)},
	}}
	if len(roots) > 0 {
		d.Attributes[pcieRoot] = resourceapi.DeviceAttribute{StringValues: roots}
	}
	return d
}

func tainted(d resourceapi.Device) resourceapi.Device {
	d.Taints = []resourceapi.DeviceTaint{{Key: "broken", Value: "fan", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	return d
}

func consumes(d resourceapi.Device, mem int64) resourceapi.Device {
	d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: "mem-0", Counters: map[string]resourceapi.Counter{"mem": {Value: qty(mem)}}}}
	return d
}

func rackDevice(name, rack string) resourceapi.Device {
	return resourceapi.Device{Name: name, NodeSelector: rackSelector(rack)}
}

func rackSelector(racks ...string) *corev1.NodeSelector {
	return &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "rack", Operator: corev1.NodeSelectorOpIn, Values: racks}},
	}}}
}

func nodeNameSelector(node string) *corev1.NodeSelector {
	return &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
	}}}
}

func allNodesDevice(name string) resourceapi.Device {
	return resourceapi.Device{Name: name, AllNodes: ptr.To(true)}
}

func nodeSlice(name, pool, node string, devices ...resourceapi.Device) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: gpuDriver, Pool: resourceapi.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: 1},
			NodeName: ptr.To(node), Devices: devices,
		},
	}
}

func driverClass(name, driver string) *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + driver + `"`},
		}}},
	}
}

func exact(name, class string, count int64) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
	}}
}

func allOf(name, class string) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeAll,
	}}
}

func withSelector(r resourceapi.DeviceRequest, expr string) resourceapi.DeviceRequest {
	r.Exactly.Selectors = append(r.Exactly.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: expr}})
	return r
}

func withAdmin(r resourceapi.DeviceRequest) resourceapi.DeviceRequest {
	r.Exactly.AdminAccess = ptr.To(true)
	return r
}

func tolerating(r resourceapi.DeviceRequest) resourceapi.DeviceRequest {
	r.Exactly.Tolerations = []resourceapi.DeviceToleration{{Key: "broken", Operator: resourceapi.DeviceTolerationOpExists}}
	return r
}

func firstAvailable(name string, subs ...resourceapi.DeviceSubRequest) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: name, FirstAvailable: subs}
}

func sub(name, class string, count int64) resourceapi.DeviceSubRequest {
	return resourceapi.DeviceSubRequest{Name: name, DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}
}

func claimWith(name string, reqs ...resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: reqs}},
	}
}

func constrain(c *resourceapi.ResourceClaim, con resourceapi.DeviceConstraint) *resourceapi.ResourceClaim {
	c.Spec.Devices.Constraints = append(c.Spec.Devices.Constraints, con)
	return c
}

func match(attr string) resourceapi.DeviceConstraint {
	return resourceapi.DeviceConstraint{MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(attr))}
}

func distinct(attr string) resourceapi.DeviceConstraint {
	return resourceapi.DeviceConstraint{DistinctAttribute: ptr.To(resourceapi.FullyQualifiedName(attr))}
}

func annotated(c *resourceapi.ResourceClaim, value string) *resourceapi.ResourceClaim {
	c.Annotations = map[string]string{allocator.CELConstraintsAnnotation: value}
	return c
}

func res(req, pool, device string) resourceapi.DeviceRequestAllocationResult {
	driver := gpuDriver
	if pool == "fabric" {
		driver = nicDriver
	}
	return resourceapi.DeviceRequestAllocationResult{Request: req, Driver: driver, Pool: pool, Device: device}
}

func adminRes(r resourceapi.DeviceRequestAllocationResult) resourceapi.DeviceRequestAllocationResult {
	r.AdminAccess = ptr.To(true)
	return r
}

func alloc(sel *corev1.NodeSelector, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.AllocationResult {
	return &resourceapi.AllocationResult{NodeSelector: sel, Devices: resourceapi.DeviceAllocationResult{Results: results}}
}
