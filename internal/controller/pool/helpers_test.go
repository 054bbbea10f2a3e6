package pool

import (
	"fmt"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	poolpkg "github.com/drastack/drastack/internal/pool"
)

// Builders that keep the tables short.

const testDriver = "gpu.example.com"

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func pid(pool string) poolpkg.ID { return poolpkg.ID{Driver: testDriver, Pool: pool} }

// gpuSlice is a node-local slice of pool on node with the named devices.
func gpuSlice(name, pool, node string, gen, count int64, devices ...string) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   testDriver,
			Pool:     resourceapi.ResourcePool{Name: pool, Generation: gen, ResourceSliceCount: count},
			NodeName: ptr.To(node),
		},
	}
	for _, d := range devices {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: d})
	}
	return s
}

// counterSlice publishes one counter set "gpu-0" with memory=capacity.
func counterSlice(name, pool, node string, gen, count int64, capacity string) *resourceapi.ResourceSlice {
	s := gpuSlice(name, pool, node, gen, count)
	s.Spec.SharedCounters = []resourceapi.CounterSet{{
		Name:     "gpu-0",
		Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse(capacity)}},
	}}
	return s
}

// partitionSlice publishes partitions that each consume memory=each from
// counter set "gpu-0" (counter "memory", or another name to break it).
func partitionSlice(name, pool, node string, gen, count int64, counter, each string, devices ...string) *resourceapi.ResourceSlice {
	s := gpuSlice(name, pool, node, gen, count, devices...)
	for i := range s.Spec.Devices {
		s.Spec.Devices[i].ConsumesCounters = []resourceapi.DeviceCounterConsumption{{
			CounterSet: "gpu-0",
			Counters:   map[string]resourceapi.Counter{counter: {Value: resource.MustParse(each)}},
		}}
	}
	return s
}

type alloc struct {
	pool, device string
	admin        bool
}

func claim(name string, allocs ...alloc) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)}}
	if len(allocs) == 0 {
		return c
	}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for i, a := range allocs {
		r := resourceapi.DeviceRequestAllocationResult{Request: fmt.Sprint("r", i), Driver: testDriver, Pool: a.pool, Device: a.device}
		if a.admin {
			r.AdminAccess = ptr.To(true)
		}
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, r)
	}
	return c
}

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }
