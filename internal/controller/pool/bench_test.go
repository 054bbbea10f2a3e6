package pool

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	poolpkg "github.com/drastack/drastack/internal/pool"
)

// The scale of issue 4: 5,000 nodes x 2 drivers = 10,000 pools.
//
//   - gpu.example.com: one slice per node with 8 whole GPUs.
//   - mig.example.com: MIG-like partitions of 8 A100s per node, one pool
//     of 3 slices: a counter slice with 8 counter sets of 15 counters, and
//     two device slices of 52 partitions each (per GPU 7x 1g.5gb, 3x
//     2g.10gb, 2x 3g.20gb, 1x 7g.40gb; at most 64 devices per slice when
//     devices consume counters).
//
// Every node has one claim on a whole GPU and one on a 1g.5gb partition.
const (
	benchNodes       = 5000
	benchGPUsPerNode = 8
)

var migProfiles = []struct {
	name            string
	count, slices   int
	memory, sms, ce int
}{
	{"1g-5gb", 7, 1, 5, 14, 1},
	{"2g-10gb", 3, 2, 10, 28, 2},
	{"3g-20gb", 2, 4, 20, 42, 3},
	{"7g-40gb", 1, 8, 40, 98, 7},
}

func a100Set() map[string]resourceapi.Counter {
	q := func(s string) resourceapi.Counter { return resourceapi.Counter{Value: resource.MustParse(s)} }
	m := map[string]resourceapi.Counter{
		"memory": q("40Gi"), "multiprocessors": q("98"), "copy-engines": q("7"), "decoders": q("5"),
		"encoders": q("0"), "jpeg-engines": q("1"), "ofa-engines": q("1"),
	}
	for i := range 8 {
		m["memory-slice-"+strconv.Itoa(i)] = q("1")
	}
	return m
}

func benchAttributes(gpu int) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	return map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"index":         {IntValue: ptr.To(int64(gpu))},
		"uuid":          {StringValue: ptr.To(fmt.Sprint("GPU-", gpu))},
		"productName":   {StringValue: ptr.To("A100-SXM4-40GB")},
		"driverVersion": {VersionValue: ptr.To("550.54.15")},
	}
}

func benchSlice(name, driver, node string, count int64) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   driver,
			Pool:     resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: count},
			NodeName: ptr.To(node),
		},
	}
}

// benchWorld builds the slices and claims of the 10,000-pool cluster.
func benchWorld() ([]*resourceapi.ResourceSlice, []*resourceapi.ResourceClaim) {
	slicesOut := make([]*resourceapi.ResourceSlice, 0, 4*benchNodes)
	claims := make([]*resourceapi.ResourceClaim, 0, 2*benchNodes)
	for n := range benchNodes {
		node := fmt.Sprintf("node-%05d", n)
		gpus := benchSlice(node+"-gpu", "gpu.example.com", node, 1)
		counters := benchSlice(node+"-mig-counters", "mig.example.com", node, 3)
		parts := []*resourceapi.ResourceSlice{
			benchSlice(node+"-mig-0", "mig.example.com", node, 3),
			benchSlice(node+"-mig-1", "mig.example.com", node, 3),
		}
		for g := range benchGPUsPerNode {
			gpus.Spec.Devices = append(gpus.Spec.Devices, resourceapi.Device{
				Name:       fmt.Sprint("gpu-", g),
				Attributes: benchAttributes(g),
				Capacity:   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("40Gi")}},
			})
			set := fmt.Sprintf("gpu-%d-counters", g)
			counters.Spec.SharedCounters = append(counters.Spec.SharedCounters, resourceapi.CounterSet{Name: set, Counters: a100Set()})
			target := parts[g/(benchGPUsPerNode/2)]
			for _, p := range migProfiles {
				for i := range p.count {
					use := map[string]resourceapi.Counter{
						"memory":          {Value: resource.MustParse(fmt.Sprintf("%dGi", p.memory))},
						"multiprocessors": {Value: *resource.NewQuantity(int64(p.sms), resource.DecimalSI)},
						"copy-engines":    {Value: *resource.NewQuantity(int64(p.ce), resource.DecimalSI)},
					}
					for s := i * p.slices; s < (i+1)*p.slices; s++ {
						use["memory-slice-"+strconv.Itoa(s)] = resourceapi.Counter{Value: resource.MustParse("1")}
					}
					target.Spec.Devices = append(target.Spec.Devices, resourceapi.Device{
						Name:             fmt.Sprintf("gpu-%d-%s-%d", g, p.name, i),
						Attributes:       benchAttributes(g),
						ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: set, Counters: use}},
					})
				}
			}
		}
		slicesOut = append(slicesOut, gpus, counters, parts[0], parts[1])
		claims = append(claims,
			benchClaim(node+"-gpu", "gpu.example.com", node, "gpu-0"),
			benchClaim(node+"-mig", "mig.example.com", node, "gpu-1-1g-5gb-0"))
	}
	return slicesOut, claims
}

func benchClaim(name, driver, pool, device string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: name, UID: types.UID("uid-" + name)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "r", Driver: driver, Pool: pool, Device: device},
			}},
		}},
	}
}

// benchState is the controller's in-memory state at full size: the model
// fed through the same event methods the informers call, every pool
// validated once, its status kept as the DevicePool cache would.
type benchState struct {
	r      *Reconciler
	slices []*resourceapi.ResourceSlice
	status map[poolpkg.ID]*v1alpha1.DevicePoolStatus
	now    time.Time
	cfg    config
	// heap in MB: the API objects alone (what the informer caches hold),
	// plus the model, plus the statuses and board entries.
	objectsMB, modelMB, statusMB float64
}

func heapMB() float64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}

func newBenchState(tb testing.TB) *benchState {
	base := heapMB()
	slices, claims := benchWorld()
	st := &benchState{r: newTestReconciler(), slices: slices, now: t0, cfg: defaultConfig(),
		status: make(map[poolpkg.ID]*v1alpha1.DevicePoolStatus, 2*benchNodes)}
	afterObjects := heapMB()
	for _, s := range slices {
		st.r.model.upsertSlice(nil, s)
	}
	for _, c := range claims {
		st.r.model.upsertClaim(nil, c)
	}
	for n := range benchNodes {
		st.r.model.setNode(fmt.Sprintf("node-%05d", n), true)
	}
	afterModel := heapMB()
	st.fullPass(tb)
	afterStatus := heapMB()
	st.objectsMB, st.modelMB, st.statusMB = afterObjects-base, afterModel-afterObjects, afterStatus-afterModel
	return st
}

// fullPass validates every pool once, as a resync does (minus the API
// writes, which the comparison shows are not needed), and checks that the
// whole cluster is healthy and accounted for.
func (st *benchState) fullPass(tb testing.TB) {
	ids := st.r.allIDs()
	if len(ids) != 2*benchNodes {
		tb.Fatalf("%d pools, want %d", len(ids), 2*benchNodes)
	}
	allocated := 0
	for _, id := range ids {
		allocated += st.validateOne(tb, id)
	}
	if allocated != 2*benchNodes {
		tb.Fatalf("%d allocated devices, want %d", allocated, 2*benchNodes)
	}
}

// validateOne is Reconcile without the API server: validate, compare with
// the stored status, store it if it changed, update the board.
func (st *benchState) validateOne(tb testing.TB, id poolpkg.ID) (allocated int) {
	prev := st.status[id]
	v, ok := st.r.validate(id, prev, st.now, st.cfg)
	if !ok || v.status.Health != v1alpha1.PoolHealthy {
		tb.Fatalf("pool %s: exists %v, health %s, problems %+v", id, ok, v.status.Health, v.status.Problems)
	}
	changed := prev == nil || !statusEqual(prev, &v.status)
	if changed {
		st.status[id] = &v.status
	}
	if changed || st.r.board.get(id) == nil || v.status.MoreProblems > 0 {
		st.r.board.set(newEntry(id, &v.status, v.problems, false, ""))
	}
	return int(v.status.Devices.Allocated)
}

// BenchmarkFullValidation10kPools: one op validates all 10,000 pools.
//
//	go test ./internal/controller/pool/ -run '^$' -bench 'FullValidation|IncrementalUpdate' -benchtime 5x
func BenchmarkFullValidation10kPools(b *testing.B) {
	st := newBenchState(b)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		st.fullPass(b)
	}
	// After the loop: ResetTimer drops metrics reported before it.
	b.ReportMetric(st.objectsMB, "MB-objects")
	b.ReportMetric(st.modelMB, "MB-model")
	b.ReportMetric(st.statusMB, "MB-status")
}

// BenchmarkIncrementalUpdate: one op is one changed slice (a MIG device
// slice gets a new resourceVersion and a taint, or loses it again) going
// through the model and the validation of the one pool it touched.
func BenchmarkIncrementalUpdate(b *testing.B) {
	st := newBenchState(b)
	orig := st.slices[len(st.slices)/2+2] // a MIG device slice mid-cluster
	tainted := orig.DeepCopy()
	tainted.ResourceVersion = "2"
	tainted.Spec.Devices[0].Taints = []resourceapi.DeviceTaint{{Key: "example.com/maintenance", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	versions := [2]*resourceapi.ResourceSlice{tainted, orig}
	cur := orig
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		next := versions[i%2]
		touched := st.r.model.upsertSlice(cur, next)
		if len(touched) != 1 {
			b.Fatalf("touched %v", touched)
		}
		st.validateOne(b, touched[0])
		cur = next
		i++
	}
	b.StopTimer()
	if got := st.status[poolpkg.KeyOf(orig)].Devices.Tainted; got > 1 {
		b.Fatalf("tainted = %d", got)
	}
}
