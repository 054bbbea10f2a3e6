package frag

import (
	"container/heap"
	"context"
	"fmt"
	"math/rand"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/test/bench/workload"
)

// Result is one placer's replay of one sequence.
type Result struct {
	Sequence string `json:"sequence"`
	Placer   string `json:"placer"`
	// Arrivals and Events (arrivals plus the departures before the last
	// arrival) replayed.
	Arrivals int `json:"arrivals"`
	Events   int `json:"events"`
	// Placed and Refused count arrivals (claims, or gangs); PlacedUnits
	// is what the placed ones asked for (memory slices, chips, GPUs).
	Placed      int   `json:"placed"`
	Refused     int   `json:"refused"`
	PlacedUnits int64 `json:"placedUnits"`
	// RefusedWithRoom counts refusals while the cluster had at least as
	// much capacity free in total as the request asked for.
	RefusedWithRoom int `json:"refusedWithRoom"`
	// RefusedPlaceable (gangs) counts gangs refused although a placement
	// existed in that state (an exact search on the model decides).
	RefusedPlaceable int `json:"refusedPlaceable"`
	// RefusedByKind counts refusals per kind (partition sequences).
	RefusedByKind map[string]int `json:"refusedByKind,omitempty"`
	// LargestMean and LargestMin are the largest placeable partition (in
	// units; for gangs the most free GPUs of one rack, the largest gang
	// that could fit) over the samples taken after every arrival;
	// BigFreeMean is the mean number of placeable partitions of the
	// largest kind (7g, 8x8; for gangs: nodes with every GPU free).
	LargestMean float64 `json:"largestMean"`
	LargestMin  int64   `json:"largestMin"`
	BigFreeMean float64 `json:"bigFreeMean"`
	// Decision times: the placer's call for one arrival (engine calls and
	// recording the result in the session).
	P50Seconds float64 `json:"p50Seconds"`
	P99Seconds float64 `json:"p99Seconds"`
	MaxSeconds float64 `json:"maxSeconds"`
	// Seconds is the whole replay, Missed the nodes the model found room
	// on that the upstream allocator refused (0 unless the model is wrong).
	Seconds float64 `json:"seconds"`
	Missed  int     `json:"missed"`
}

// departure is a placed arrival's end.
type departure struct {
	at     float64
	i      int
	claims []*resourceapi.ResourceClaim
}

type departures []departure

func (d departures) Len() int { return len(d) }
func (d departures) Less(a, b int) bool {
	if d[a].at != d[b].at {
		return d[a].at < d[b].at
	}
	return d[a].i < d[b].i
}
func (d departures) Swap(a, b int) { d[a], d[b] = d[b], d[a] }
func (d *departures) Push(x any)   { *d = append(*d, x.(departure)) }
func (d *departures) Pop() any {
	old := *d
	x := old[len(old)-1]
	*d = old[:len(old)-1]
	return x
}

// Run replays sequence s with placer name on a fresh build of its cluster.
func Run(ctx context.Context, s *Sequence, name string) (Result, error) {
	w := s.Build()
	m, err := newModel(w.Inputs)
	if err != nil {
		return Result{}, err
	}
	var p placer
	var kube *kubePlacer
	switch name {
	case KubeScheduler:
		kube, err = newKube(ctx, w, m, nil)
		p = kube
	case KubeRandom:
		// Seeded: the same run draws the same nodes.
		kube, err = newKube(ctx, w, m, rand.New(rand.NewSource(int64(len(s.Arrivals)))))
		p = kube
	case NativeFirst:
		p, err = newNative(ctx, w, allocator.PlacementFirstFit)
	case NativePack:
		p, err = newNative(ctx, w, allocator.PlacementPack)
	default:
		err = fmt.Errorf("unknown placer %q", name)
	}
	if err != nil {
		return Result{}, err
	}
	r := &runner{s: s, m: m, res: Result{Sequence: s.Name, Placer: name, RefusedByKind: map[string]int{}, LargestMin: -1}}
	r.index()
	start := time.Now()
	var pending departures
	var times []time.Duration
	for i, a := range s.Arrivals {
		for len(pending) > 0 && pending[0].at <= a.At {
			d := heap.Pop(&pending).(departure)
			for _, c := range d.claims {
				m.give(c.Status.Allocation)
				if err := p.release(c); err != nil {
					return r.res, fmt.Errorf("arrival %d: release %s: %w", d.i, c.Name, err)
				}
			}
			r.res.Events++
		}
		r.res.Arrivals++
		r.res.Events++
		free := m.freeUnits()
		claims := r.claims(i, a)
		t0 := time.Now()
		var allocs []*resourceapi.AllocationResult
		if a.Kind >= 0 {
			var alloc *resourceapi.AllocationResult
			alloc, err = p.place(ctx, claims[0], r.fits(a.Kind))
			if alloc != nil {
				allocs = []*resourceapi.AllocationResult{alloc}
			}
		} else {
			allocs, err = p.placeGang(ctx, fmt.Sprintf("gang-%05d", i), claims)
		}
		times = append(times, time.Since(t0))
		if err != nil {
			return r.res, fmt.Errorf("%s, %s, arrival %d: %w", s.Name, name, i, err)
		}
		if allocs == nil {
			r.refused(a, free)
		} else {
			dep := departure{at: a.Until, i: i}
			for k, alloc := range allocs {
				if err := m.take(alloc); err != nil {
					return r.res, fmt.Errorf("%s, %s, arrival %d: %w", s.Name, name, i, err)
				}
				done := claims[k].DeepCopy()
				done.Status.Allocation = alloc
				dep.claims = append(dep.claims, done)
			}
			heap.Push(&pending, dep)
			r.res.Placed++
			r.res.PlacedUnits += s.Units(a)
		}
		r.sample()
	}
	r.res.Seconds = time.Since(start).Seconds()
	if kube != nil {
		r.res.Missed = kube.missed
	}
	r.finish(times)
	return r.res, nil
}

type runner struct {
	s   *Sequence
	m   *model
	res Result
	// byKind lists the devices of each kind; nodeOf maps node names.
	byKind  [][]int
	samples int
	sumL    int64
	sumBig  int64
}

func (r *runner) index() {
	r.byKind = make([][]int, len(r.s.Kinds))
	for d := range r.m.devs {
		for k, kind := range r.s.Kinds {
			if r.m.attr(d, kind.Attribute) == kind.Value {
				r.byKind[k] = append(r.byKind[k], d)
			}
		}
	}
}

// claims builds arrival i's claims: one per pod, unique names and UIDs.
func (r *runner) claims(i int, a Arrival) []*resourceapi.ResourceClaim {
	mk := func(name string, req resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: name, UID: types.UID("frag-" + name), ResourceVersion: "1"},
			Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}},
		}
	}
	if a.Kind >= 0 {
		k := r.s.Kinds[a.Kind]
		class := "gpu"
		if k.Attribute == "shape" {
			class = "tpu"
		}
		return []*resourceapi.ResourceClaim{mk(fmt.Sprintf("c-%05d", i), request(class, 1, k.Selector))}
	}
	var out []*resourceapi.ResourceClaim
	for p, n := range a.Pods {
		out = append(out, mk(fmt.Sprintf("g-%05d-%d", i, p), request("gpu", int64(n), "")))
	}
	return out
}

func request(class string, count int64, selector string) resourceapi.DeviceRequest {
	r := resourceapi.DeviceRequest{Name: "dev", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
	}}
	if selector != "" {
		r.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}
	}
	return r
}

// fits is the model's answer to "does node ni have a free device of kind
// k?", for the kube-scheduler placer.
func (r *runner) fits(k int) func(ni int) bool {
	return func(ni int) bool {
		node := r.m.nodes[ni].Name
		for _, d := range r.byKind[k] {
			if r.m.reaches(d, node) && r.m.free(d) {
				return true
			}
		}
		return false
	}
}

func (r *runner) refused(a Arrival, free int64) {
	r.res.Refused++
	if free >= r.s.Units(a) {
		r.res.RefusedWithRoom++
	}
	if a.Kind >= 0 {
		r.res.RefusedByKind[r.s.Kinds[a.Kind].Name]++
		return
	}
	if r.placeable(a.Pods) {
		r.res.RefusedPlaceable++
	}
}

// placeable decides whether the pods fit into one rack as the model stands:
// each pod on one node with enough free GPUs, found by an exact search.
func (r *runner) placeable(pods []int) bool {
	racks := map[string][]int{}
	var order []string
	for ni, n := range r.m.nodes {
		rack := n.Labels[workload.RackLabel]
		if _, ok := racks[rack]; !ok {
			order = append(order, rack)
		}
		racks[rack] = append(racks[rack], r.m.freeOnNode(ni))
	}
	sorted := slices.Clone(pods)
	slices.Sort(sorted)
	slices.Reverse(sorted)
	for _, rack := range order {
		if packs(racks[rack], sorted) {
			return true
		}
	}
	return false
}

// packs reports whether items (largest first) fit into bins of the given
// free sizes, each item into one bin.
func packs(bins, items []int) bool {
	total := 0
	for _, b := range bins {
		total += b
	}
	need := 0
	for _, it := range items {
		need += it
	}
	if need > total {
		return false
	}
	bins = slices.Clone(bins)
	var try func(i int) bool
	try = func(i int) bool {
		if i == len(items) {
			return true
		}
		for b := range bins {
			// Bins with the same room left are interchangeable.
			if bins[b] < items[i] || slices.Contains(bins[:b], bins[b]) {
				continue
			}
			bins[b] -= items[i]
			ok := try(i + 1)
			bins[b] += items[i]
			if ok {
				return true
			}
		}
		return false
	}
	return try(0)
}

// sample records the largest placeable partition after an arrival.
func (r *runner) sample() {
	var largest, big int64
	if r.s.Gangs {
		racks := map[string]int64{}
		for ni, n := range r.m.nodes {
			f := int64(r.m.freeOnNode(ni))
			racks[n.Labels[workload.RackLabel]] += f
			if f == int64(len(r.m.local[ni])) {
				big++
			}
		}
		for _, f := range racks {
			largest = max(largest, f)
		}
	} else {
		for k := len(r.s.Kinds) - 1; k >= 0 && largest == 0; k-- {
			for _, d := range r.byKind[k] {
				if r.m.free(d) {
					largest = r.s.Kinds[k].Units
					break
				}
			}
		}
		top := len(r.s.Kinds) - 1
		for _, d := range r.byKind[top] {
			if r.m.free(d) {
				big++
			}
		}
	}
	r.samples++
	r.sumL += largest
	r.sumBig += big
	if r.res.LargestMin < 0 || largest < r.res.LargestMin {
		r.res.LargestMin = largest
	}
}

func (r *runner) finish(times []time.Duration) {
	if r.samples > 0 {
		r.res.LargestMean = float64(r.sumL) / float64(r.samples)
		r.res.BigFreeMean = float64(r.sumBig) / float64(r.samples)
	}
	if len(times) == 0 {
		return
	}
	slices.Sort(times)
	pct := func(p float64) float64 {
		i := int(p*float64(len(times))+0.999999) - 1
		return times[max(0, min(i, len(times)-1))].Seconds()
	}
	r.res.P50Seconds, r.res.P99Seconds, r.res.MaxSeconds = pct(0.5), pct(0.99), times[len(times)-1].Seconds()
}
