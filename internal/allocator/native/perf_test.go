package native

import (
	"context"
	"fmt"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

// These benchmarks are small versions of the bench harness workloads
// (test/bench) to watch the engine's own cost: each operation is one claim
// allocated (or refused) and recorded, against a session that is rebuilt
// when the cluster is full.

func gpuCluster(nodes, perNode int) allocator.Inputs {
	var in allocator.Inputs
	for n := range nodes {
		name := fmt.Sprintf("node-%03d", n)
		var devs []resourceapi.Device
		for g := range perNode {
			devs = append(devs, dev(fmt.Sprintf("gpu-%d", g), "model", "a100", "index", g))
		}
		s := nodeSlice(name, devs...)
		s.UID, s.ResourceVersion = ktypes.UID("uid-"+name), "1"
		in.Slices = append(in.Slices, s)
		in.Nodes = append(in.Nodes, node(name, nil))
	}
	in.Classes = []*resourceapi.DeviceClass{class("gpu", `device.driver == "gpu.example.com"`)}
	return in
}

func migCluster(nodes int) allocator.Inputs {
	var in allocator.Inputs
	for n := range nodes {
		name := fmt.Sprintf("node-%03d", n)
		var devs []resourceapi.Device
		var sets []resourceapi.CounterSet
		for g := range 8 {
			set := fmt.Sprintf("gpu-%d", g)
			cs := counterSlice("", name, 1, set, map[string]string{"memory": "40Gi", "slices": "7"}).Spec.SharedCounters[0]
			sets = append(sets, cs)
			add := func(profile, mem, slices string, count int) {
				for i := range count {
					d := consumes(dev(fmt.Sprintf("%s-%s-%d", set, profile, i), "profile", profile, "gpu", g), set, map[string]string{"memory": mem, "slices": slices})
					devs = append(devs, d)
				}
			}
			add("7g", "40Gi", "7", 1)
			add("3g", "20Gi", "3", 2)
			add("2g", "10Gi", "2", 3)
			add("1g", "5Gi", "1", 7)
		}
		var slices []*resourceapi.ResourceSlice
		for start := 0; start < len(devs); start += 64 {
			s := poolSlice(fmt.Sprintf("%s-devices-%d", name, start/64), name, 0, devs[start:min(start+64, len(devs))]...)
			slices = append(slices, s)
		}
		c := poolSlice(name+"-counters", name, 0)
		c.Spec.SharedCounters = sets
		slices = append(slices, c)
		for _, s := range slices {
			s.Spec.AllNodes, s.Spec.NodeName = nil, ptr.To(name)
			s.Spec.Pool.ResourceSliceCount = int64(len(slices))
			s.UID, s.ResourceVersion = ktypes.UID("uid-"+s.Name), "1"
		}
		in.Slices = append(in.Slices, slices...)
		in.Nodes = append(in.Nodes, node(name, nil))
	}
	in.Classes = []*resourceapi.DeviceClass{class("gpu")}
	return in
}

// runWorkload allocates and records claims from next until b.N are done.
func runWorkload(b *testing.B, e *Engine, in allocator.Inputs, next func(i int) *resourceapi.ResourceClaim) {
	ctx := context.Background()
	var s allocator.Session
	fresh := func() {
		var err error
		if s, err = e.NewSession(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
	fresh()
	var worst time.Duration
	failures := 0
	b.ResetTimer()
	for i := range b.N {
		c := next(i)
		start := time.Now()
		res, err := s.Allocate(ctx, []*resourceapi.ResourceClaim{c}, allocator.Options{})
		if d := time.Since(start); d > worst {
			worst = d
		}
		if err != nil {
			failures++
			b.StopTimer()
			fresh()
			b.StartTimer()
			continue
		}
		done := c.DeepCopy()
		done.Status.Allocation = res[0].Allocation
		if err := s.Record(done); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(worst.Microseconds()), "worst-µs/claim")
	b.ReportMetric(float64(failures), "refused")
}

func numbered(c *resourceapi.ResourceClaim, i int) *resourceapi.ResourceClaim {
	c = c.DeepCopy()
	c.Name = fmt.Sprintf("%s-%d", c.Name, i)
	c.UID = ktypes.UID(c.Name)
	return c
}

func BenchmarkSteady500n(b *testing.B) {
	in := gpuCluster(500, 8)
	c := claim("steady", req("r", 1, `device.attributes["gpu.example.com"].model == "a100"`))
	runWorkload(b, newEngine(), in, func(i int) *resourceapi.ResourceClaim { return numbered(c, i) })
}

func BenchmarkPartitionable100n(b *testing.B) {
	in := migCluster(100)
	profiles := []string{"1g", "2g", "3g", "1g", "7g", "1g", "2g"}
	runWorkload(b, newEngine(), in, func(i int) *resourceapi.ResourceClaim {
		return numbered(claim("mig", req("r", 1, profile(profiles[i%len(profiles)]))), i)
	})
}

func BenchmarkUnsatisfiable(b *testing.B) {
	var devs []resourceapi.Device
	for i := range 32 {
		devs = append(devs, dev(fmt.Sprintf("d%d", i), "group", "g"))
	}
	in := allocator.Inputs{
		Slices:    []*resourceapi.ResourceSlice{nodeSlice("n1", devs...)},
		Nodes:     hosts("n1"),
		Classes:   []*resourceapi.DeviceClass{class("gpu")},
		Allocated: []*resourceapi.ResourceClaim{allocatedClaim("old", false, "n1", "d0")},
	}
	c := withConstraints(claim("all32", req("r", 32)), match(drv+"/group"))
	runWorkload(b, newEngine(), in, func(i int) *resourceapi.ResourceClaim { return numbered(c, i) })
}

func BenchmarkCELContiguous(b *testing.B) {
	in := allocator.Inputs{Slices: ring(32), Classes: []*resourceapi.DeviceClass{class("gpu")}}
	c := withCEL(claim("four", req("mla", 4)), celAnnotation(contiguous))
	runWorkload(b, newEngine(), in, func(i int) *resourceapi.ResourceClaim { return numbered(c, i) })
}

func BenchmarkCELContiguousUnsatisfiable(b *testing.B) {
	// Every fourth device is in use: 24 free devices, never 4 in a row.
	in := allocator.Inputs{Slices: ring(32), Classes: []*resourceapi.DeviceClass{class("gpu")}}
	for i := 3; i < 32; i += 4 {
		in.Allocated = append(in.Allocated, allocatedClaim(fmt.Sprint("old", i), false, "n1", fmt.Sprintf("d%d", i)))
	}
	c := withCEL(claim("four", req("mla", 4)), celAnnotation(contiguous))
	runWorkload(b, newEngine(), in, func(i int) *resourceapi.ResourceClaim { return numbered(c, i) })
}

func BenchmarkCELGrid(b *testing.B) {
	in := allocator.Inputs{Slices: ring(16), Classes: []*resourceapi.DeviceClass{class("gpu")}}
	c := withCEL(claim("grid", req("mla", 4)), celAnnotation(grid2x2))
	runWorkload(b, newEngine(), in, func(i int) *resourceapi.ResourceClaim { return numbered(c, i) })
}
