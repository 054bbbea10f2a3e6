package pool

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// Builders that keep test tables short enough to read as a specification.

const drv = "gpu.example.com"

type sliceOpt func(*resourceapi.ResourceSlice)

// mkSlice makes a slice of pool p with generation gen and resourceSliceCount
// count. It is node-local to "node-1" unless a node option replaces that.
func mkSlice(name, p string, gen, count int64, opts ...sliceOpt) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   drv,
			Pool:     resourceapi.ResourcePool{Name: p, Generation: gen, ResourceSliceCount: count},
			NodeName: ptr.To("node-1"),
		},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func clearNode(s *resourceapi.ResourceSlice) {
	s.Spec.NodeName, s.Spec.NodeSelector, s.Spec.AllNodes, s.Spec.PerDeviceNodeSelection = nil, nil, nil, nil
}

// noNode: the slice sets no node selection at all.
func noNode() sliceOpt { return clearNode }

func driver(d string) sliceOpt {
	return func(s *resourceapi.ResourceSlice) { s.Spec.Driver = d }
}

func onNode(n string) sliceOpt {
	return func(s *resourceapi.ResourceSlice) { clearNode(s); s.Spec.NodeName = ptr.To(n) }
}

func allNodes() sliceOpt {
	return func(s *resourceapi.ResourceSlice) { clearNode(s); s.Spec.AllNodes = ptr.To(true) }
}

func perDevice() sliceOpt {
	return func(s *resourceapi.ResourceSlice) { clearNode(s); s.Spec.PerDeviceNodeSelection = ptr.To(true) }
}

func selectorTerms(n int) *corev1.NodeSelector {
	sel := &corev1.NodeSelector{}
	for i := range n {
		sel.NodeSelectorTerms = append(sel.NodeSelectorTerms, corev1.NodeSelectorTerm{
			MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: "example.com/domain", Operator: corev1.NodeSelectorOpIn, Values: []string{fmt.Sprint("d", i)},
			}},
		})
	}
	return sel
}

func nodeSelector(terms int) sliceOpt {
	return func(s *resourceapi.ResourceSlice) { clearNode(s); s.Spec.NodeSelector = selectorTerms(terms) }
}

func spec(f func(*resourceapi.ResourceSliceSpec)) sliceOpt {
	return func(s *resourceapi.ResourceSlice) { f(&s.Spec) }
}

func devs(ds ...resourceapi.Device) sliceOpt {
	return func(s *resourceapi.ResourceSlice) { s.Spec.Devices = append(s.Spec.Devices, ds...) }
}

func sets(cs ...resourceapi.CounterSet) sliceOpt {
	return func(s *resourceapi.ResourceSlice) { s.Spec.SharedCounters = append(s.Spec.SharedCounters, cs...) }
}

type devOpt func(*resourceapi.Device)

func dev(name string, opts ...devOpt) resourceapi.Device {
	d := resourceapi.Device{Name: name}
	for _, o := range opts {
		o(&d)
	}
	return d
}

// manyDevs makes n devices named prefix-0 ... prefix-(n-1).
func manyDevs(prefix string, n int, opts ...devOpt) []resourceapi.Device {
	out := make([]resourceapi.Device, n)
	for i := range out {
		out[i] = dev(fmt.Sprintf("%s-%d", prefix, i), opts...)
	}
	return out
}

// counterMap parses "name=quantity" pairs.
func counterMap(kv ...string) map[string]resourceapi.Counter {
	m := make(map[string]resourceapi.Counter, len(kv))
	for _, pair := range kv {
		k, v, _ := strings.Cut(pair, "=")
		m[k] = resourceapi.Counter{Value: resource.MustParse(v)}
	}
	return m
}

func cset(name string, kv ...string) resourceapi.CounterSet {
	return resourceapi.CounterSet{Name: name, Counters: counterMap(kv...)}
}

// nCounters returns "c0=1" ... for n counters.
func nCounters(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("c%d=1", i)
	}
	return out
}

func consumes(set string, kv ...string) devOpt {
	return func(d *resourceapi.Device) {
		d.ConsumesCounters = append(d.ConsumesCounters, resourceapi.DeviceCounterConsumption{CounterSet: set, Counters: counterMap(kv...)})
	}
}

func devNode(n string) devOpt { return func(d *resourceapi.Device) { d.NodeName = ptr.To(n) } }
func devAll() devOpt          { return func(d *resourceapi.Device) { d.AllNodes = ptr.To(true) } }
func devSelector() devOpt {
	return func(d *resourceapi.Device) { d.NodeSelector = selectorTerms(1) }
}
func shared() devOpt {
	return func(d *resourceapi.Device) { d.AllowMultipleAllocations = ptr.To(true) }
}

func taint(effect resourceapi.DeviceTaintEffect) devOpt {
	return func(d *resourceapi.Device) {
		d.Taints = append(d.Taints, resourceapi.DeviceTaint{Key: fmt.Sprint("k", len(d.Taints)), Effect: effect})
	}
}

func taints(n int) devOpt {
	return func(d *resourceapi.Device) {
		for range n {
			taint(resourceapi.DeviceTaintEffectNone)(d)
		}
	}
}

// scalarAttrs adds n string attributes.
func scalarAttrs(n int) devOpt {
	return func(d *resourceapi.Device) {
		if d.Attributes == nil {
			d.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
		}
		for range n {
			d.Attributes[resourceapi.QualifiedName(fmt.Sprintf("a%d", len(d.Attributes)))] = resourceapi.DeviceAttribute{StringValue: ptr.To("x")}
		}
	}
}

// capacities adds n capacities.
func capacities(n int) devOpt {
	return func(d *resourceapi.Device) {
		if d.Capacity == nil {
			d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{}
		}
		for range n {
			d.Capacity[resourceapi.QualifiedName(fmt.Sprintf("cap%d", len(d.Capacity)))] = resourceapi.DeviceCapacity{Value: resource.MustParse("1")}
		}
	}
}

// listAttr adds one string-list attribute with n values.
func listAttr(name string, n int) devOpt {
	return func(d *resourceapi.Device) {
		if d.Attributes == nil {
			d.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
		}
		vals := make([]string, n)
		for i := range vals {
			vals[i] = fmt.Sprint("v", i)
		}
		d.Attributes[resourceapi.QualifiedName(name)] = resourceapi.DeviceAttribute{StringValues: vals}
	}
}

// result is one allocation result of a test claim.
type result struct {
	pool, device string
	admin        bool
}

func claim(name string, results ...result) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	if len(results) == 0 {
		return c
	}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for i, r := range results {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request:     fmt.Sprint("r", i),
			Driver:      drv,
			Pool:        r.pool,
			Device:      r.device,
			AdminAccess: ptr.To(r.admin),
		})
	}
	return c
}

// onlyPool groups slices and returns the single pool they form.
func onlyPool(t interface {
	Helper()
	Fatalf(string, ...any)
}, slices ...*resourceapi.ResourceSlice) *Pool {
	t.Helper()
	return onlyPoolWith(t, Options{}, slices...)
}

// onlyPoolWith is onlyPool with GroupWith's options.
func onlyPoolWith(t interface {
	Helper()
	Fatalf(string, ...any)
}, opts Options, slices ...*resourceapi.ResourceSlice) *Pool {
	t.Helper()
	pools := GroupWith(slices, opts)
	if len(pools) != 1 {
		t.Fatalf("Group returned %d pools, want 1", len(pools))
	}
	return pools[0]
}

// reasons lists "Reason/Severity/slice/device" of problems, in order.
func reasons(ps []Problem) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, fmt.Sprintf("%s/%s/%s/%s", p.Reason, p.Severity, p.Slice, p.Device))
	}
	return out
}
