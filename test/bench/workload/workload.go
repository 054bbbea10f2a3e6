// Package workload builds the benchmark workloads of test/bench: a starting
// cluster state and an ordered list of claims, modelled on kube-scheduler's
// scheduler_perf DRA configurations. Every call builds fresh objects, so two
// engines given two builds of one workload see identical, unshared inputs.
package workload

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

// Workload is one benchmark: the cluster before the first claim and the
// claims to allocate, in order.
type Workload struct {
	Name string
	// Inputs is the starting state; Inputs.Allocated may hold claims that are
	// allocated before the benchmark starts.
	Inputs allocator.Inputs
	// Claims are allocated one at a time, in order, each recorded before the
	// next when it is allocated.
	Claims []*resourceapi.ResourceClaim
	// NativeOnly marks workloads the upstream engine cannot run (CEL
	// constraints).
	NativeOnly bool
}

// Spec names a workload and builds it.
type Spec struct {
	Name        string
	Description string
	NativeOnly  bool
	Build       func() *Workload
}

// All lists the workloads in the order the harness runs them.
func All() []Spec {
	return []Spec{
		{Name: "steady-500n", Description: "500 nodes x 8 GPUs, 4,000 one-GPU claims with a CEL selector", Build: Steady},
		{Name: "partitionable-100n", Description: "100 nodes x 8 A100-like GPUs with MIG partitions on shared counters, 2,000 mixed claims", Build: Partitionable},
		{Name: "match-100n", Description: "100 nodes, GPU+NIC+CPU claims with matchAttribute on list-valued pcieRoot", Build: Match},
		{Name: "consumable-100n", Description: "100 nodes x 8 shared GPUs and 4 shared NICs, 3,000 claims for memory and bandwidth shares", Build: Consumable},
		{Name: "multihost", Description: "two 64-host TPU-like pools published centrally, 2x4, 4x4 and 8x8 claims", Build: Multihost},
		{Name: "unsatisfiable", Description: "32 devices sharing an attribute, one allocated, claims for 32 with matchAttribute", Build: Unsatisfiable},
		{Name: "cel-contiguous", Description: "4 contiguous of 32 and a 2x2 grid of 16 with CEL constraints", NativeOnly: true, Build: CELContiguous},
	}
}

// Lookup returns the spec with the given name.
func Lookup(name string) (Spec, error) {
	for _, s := range All() {
		if s.Name == name {
			return s, nil
		}
	}
	names := []string{}
	for _, s := range All() {
		names = append(names, s.Name)
	}
	return Spec{}, fmt.Errorf("unknown workload %q (have %v)", name, names)
}

// builder accumulates objects with unique UIDs and resource versions, which
// engines may use as cache keys.
type builder struct {
	w   *Workload
	uid int
}

func newBuilder(name string) *builder { return &builder{w: &Workload{Name: name}} }

func (b *builder) meta(name string) metav1.ObjectMeta {
	b.uid++
	return metav1.ObjectMeta{Name: name, UID: types.UID(fmt.Sprintf("%s-%06d", b.w.Name, b.uid)), ResourceVersion: "1"}
}

func (b *builder) node(name string, labels map[string]string) {
	m := b.meta(name)
	m.Labels = labels
	b.w.Inputs.Nodes = append(b.w.Inputs.Nodes, &corev1.Node{ObjectMeta: m})
}

// class adds a DeviceClass that selects the devices of one driver.
func (b *builder) class(name, driver string) {
	b.w.Inputs.Classes = append(b.w.Inputs.Classes, &resourceapi.DeviceClass{
		ObjectMeta: b.meta(name),
		Spec:       resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{celSelector(fmt.Sprintf("device.driver == %q", driver))}},
	})
}

// slice adds a slice; the caller sets node selection and contents.
func (b *builder) slice(name, driver, pool string, count int64, set func(*resourceapi.ResourceSliceSpec)) {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: b.meta(name),
		Spec: resourceapi.ResourceSliceSpec{
			Driver: driver,
			Pool:   resourceapi.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: count},
		},
	}
	set(&s.Spec)
	b.w.Inputs.Slices = append(b.w.Inputs.Slices, s)
}

// claim adds a claim to allocate.
func (b *builder) claim(name string, annotations map[string]string, reqs []resourceapi.DeviceRequest, cons ...resourceapi.DeviceConstraint) *resourceapi.ResourceClaim {
	m := b.meta(name)
	m.Namespace = "bench"
	m.Annotations = annotations
	c := &resourceapi.ResourceClaim{
		ObjectMeta: m,
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: reqs, Constraints: cons}},
	}
	b.w.Claims = append(b.w.Claims, c)
	return c
}

// held adds an allocated claim that holds the named devices (of class and
// driver) of a node-local pool: the cluster before the benchmark starts.
func (b *builder) held(node, class, driver, pool string, devices ...string) {
	c := &resourceapi.ResourceClaim{ObjectMeta: b.meta("held-" + node)}
	c.Namespace = "bench"
	c.Spec.Devices.Requests = []resourceapi.DeviceRequest{request("held", class, int64(len(devices)))}
	alloc := &resourceapi.AllocationResult{NodeSelector: nodeNameSelector(node)}
	for _, d := range devices {
		alloc.Devices.Results = append(alloc.Devices.Results, resourceapi.DeviceRequestAllocationResult{Request: "held", Driver: driver, Pool: pool, Device: d})
	}
	c.Status.Allocation = alloc
	b.w.Inputs.Allocated = append(b.w.Inputs.Allocated, c)
}

func celSelector(expr string) resourceapi.DeviceSelector {
	return resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}
}

// request is an ExactCount request for count devices of class.
func request(name, class string, count int64, selectors ...string) resourceapi.DeviceRequest {
	r := resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
	}}
	for _, s := range selectors {
		r.Exactly.Selectors = append(r.Exactly.Selectors, celSelector(s))
	}
	return r
}

func matchAttribute(name string, requests ...string) resourceapi.DeviceConstraint {
	return resourceapi.DeviceConstraint{Requests: requests, MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(name))}
}

func intAttr(v int64) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{IntValue: &v} }
func strAttr(v string) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{StringValue: &v}
}
func strsAttr(v ...string) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{StringValues: slices.Clone(v)}
}

func quantity(s string) resource.Quantity { return resource.MustParse(s) }

func attrs(kv ...any) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	out := make(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		out[resourceapi.QualifiedName(kv[i].(string))] = kv[i+1].(resourceapi.DeviceAttribute)
	}
	return out
}

// nodeNameSelector pins an allocation to one node, as engines do for
// node-local devices.
func nodeNameSelector(node string) *corev1.NodeSelector {
	return &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
	}}}
}

func resourceQuantity(v int64) *resource.Quantity { return resource.NewQuantity(v, resource.DecimalSI) }
