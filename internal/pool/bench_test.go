package pool

import (
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const (
	benchNodes       = 5000
	benchGPUsPerNode = 8
	benchMIGsPerGPU  = 7
)

// a100Counters is the counter set of one A100 40GB (KEP-4815): 15 counters.
func a100Counters() map[string]resourceapi.Counter {
	m := counterMap("copy-engines=7", "decoders=5", "encoders=0", "jpeg-engines=1",
		"memory=40Gi", "multiprocessors=98", "ofa-engines=1")
	for i := range 8 {
		m[fmt.Sprint("memorySlice", i)] = resourceapi.Counter{Value: resource.MustParse("1")}
	}
	return m
}

func benchAttrs(gpu int) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	return map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"index":         {IntValue: ptr.To(int64(gpu))},
		"uuid":          {StringValue: ptr.To(fmt.Sprint("GPU-", gpu))},
		"productName":   {StringValue: ptr.To("A100-SXM4-40GB")},
		"driverVersion": {VersionValue: ptr.To("550.54.15")},
		"cudaCapable":   {BoolValue: ptr.To(true)},
	}
}

// benchCluster is 10,000 pools: on each of 5,000 nodes one pool of 8 full
// GPUs (driver gpu.example.com, one slice) and one MIG pool (driver
// mig.example.com, two slices: 8 A100 counter sets, and 8 x 7 1g.5gb
// partitions each consuming one memory slice of its GPU).
func benchCluster(nodes int) []*resourceapi.ResourceSlice {
	out := make([]*resourceapi.ResourceSlice, 0, 3*nodes)
	for n := range nodes {
		node := fmt.Sprintf("node-%05d", n)
		gpus := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: node + "-gpu"},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:   "gpu.example.com",
				Pool:     resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
				NodeName: ptr.To(node),
			},
		}
		counters := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: node + "-mig-counters"},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:   "mig.example.com",
				Pool:     resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 2},
				NodeName: ptr.To(node),
			},
		}
		migs := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: node + "-mig-devices"},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:   "mig.example.com",
				Pool:     resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 2},
				NodeName: ptr.To(node),
			},
		}
		for g := range benchGPUsPerNode {
			gpus.Spec.Devices = append(gpus.Spec.Devices, resourceapi.Device{
				Name:       fmt.Sprint("gpu-", g),
				Attributes: benchAttrs(g),
				Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
					"memory": {Value: resource.MustParse("40Gi")},
				},
			})
			set := fmt.Sprintf("gpu-%d-counter-set", g)
			counters.Spec.SharedCounters = append(counters.Spec.SharedCounters, resourceapi.CounterSet{Name: set, Counters: a100Counters()})
			for m := range benchMIGsPerGPU {
				migs.Spec.Devices = append(migs.Spec.Devices, resourceapi.Device{
					Name:       fmt.Sprintf("gpu-%d-mig-1g-5gb-%d", g, m),
					Attributes: benchAttrs(g),
					ConsumesCounters: []resourceapi.DeviceCounterConsumption{{
						CounterSet: set,
						Counters: counterMap("copy-engines=1", "decoders=0", "memory=4864Mi",
							fmt.Sprintf("memorySlice%d=1", m), "multiprocessors=14"),
					}},
				})
			}
		}
		out = append(out, gpus, counters, migs)
	}
	return out
}

func BenchmarkGroup10kPools(b *testing.B) {
	in := benchCluster(benchNodes)
	b.ReportAllocs()
	b.ResetTimer()
	var pools []*Pool
	for b.Loop() {
		pools = Group(in)
	}
	b.StopTimer()
	if len(pools) != 2*benchNodes {
		b.Fatalf("%d pools, want %d", len(pools), 2*benchNodes)
	}
	for _, p := range pools {
		if !p.Allocatable() || len(p.Problems) != 0 {
			b.Fatalf("pool %s not allocatable: %v", p.ID, p.Problems)
		}
	}
}

// BenchmarkBuildOnePool is the incremental path: one MIG pool rebuilt after
// one of its slices changed.
func BenchmarkBuildOnePool(b *testing.B) {
	in := benchCluster(1)[1:3]
	id := KeyOf(in[0])
	b.ReportAllocs()
	for b.Loop() {
		Build(id, in)
	}
}

// BenchmarkPoolUsageTakeRelease is the engine's inner loop on a MIG pool:
// check a partition, take it, release it.
func BenchmarkPoolUsageTakeRelease(b *testing.B) {
	in := benchCluster(1)[1:3]
	p := Group(in)[0]
	l := NewLedger()
	u := l.SetPool(p)
	n := len(p.Devices)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if u.CanAllocate(i) {
			u.Take(i)
			u.Release(i)
		}
		i++
		if i == n {
			i = 0
		}
	}
}

// BenchmarkAssessMIGPool is the validator's per-pool cost with some
// allocations.
func BenchmarkAssessMIGPool(b *testing.B) {
	in := benchCluster(1)[1:3]
	p := Group(in)[0]
	l := NewLedger()
	l.SetPool(p)
	for g := range benchGPUsPerNode {
		c := claim(fmt.Sprint("c", g), result{p.Pool, fmt.Sprintf("gpu-%d-mig-1g-5gb-0", g), false})
		c.Status.Allocation.Devices.Results[0].Driver = p.Driver
		l.AddClaim(c)
	}
	if r := Assess(p, l, t0, t0, grace); r.Devices.Allocated != benchGPUsPerNode {
		b.Fatalf("allocated %d, want %d", r.Devices.Allocated, benchGPUsPerNode)
	}
	b.ReportAllocs()
	for b.Loop() {
		Assess(p, l, t0, t0, grace)
	}
}
