// Package frag is the fragmentation benchmark of issue 27 (`make
// bench-fragmentation`, `go run ./test/bench -fragmentation`): long seeded
// sequences of arrivals and departures replayed side by side by
// kube-scheduler's first fit (the upstream allocator asked node after node,
// one pod at a time) and the native engine under its FirstFit and Pack
// policies, on the same cluster with the same offered load.
package frag

import (
	"fmt"
	"math/rand"

	"github.com/drastack/drastack/test/bench/workload"
)

// Sequence is one benchmark sequence: a cluster and the arrivals to replay.
type Sequence struct {
	Name        string
	Description string
	// Build returns a fresh cluster (without claims) for each placer.
	Build func() *workload.Workload
	// Kinds are the requests of a partition sequence, smallest first;
	// empty for a gang sequence.
	Kinds []Kind
	// Gangs: arrivals are gangs of whole GPUs, each in one rack
	// (workload.RackLabel).
	Gangs bool
	// Arrivals in time order.
	Arrivals []Arrival
	// Load is the offered load: arrival rate x mean lifetime x mean size,
	// divided by the cluster's capacity.
	Load float64
	// Capacity is the cluster's capacity in Kind units (or GPUs).
	Capacity int64
}

// Kind is one kind of request: a partition profile or shape.
type Kind struct {
	workload.Profile
	// Selector picks the devices of the kind (with class "gpu" or "tpu").
	Selector string
	// Attribute is the device attribute the selector reads and its value.
	Attribute, Value string
	// Weight is the kind's share of the arrivals.
	Weight int
}

// Arrival is one request: a claim of a kind, or a gang of pods.
type Arrival struct {
	// At and Until are the arrival and (if placed) departure times.
	At, Until float64
	// Kind indexes Sequence.Kinds; -1 for a gang.
	Kind int
	// Pods are a gang's devices per pod.
	Pods []int
}

// Units is what the arrival asks for, in the sequence's units.
func (s *Sequence) Units(a Arrival) int64 {
	if a.Kind >= 0 {
		return s.Kinds[a.Kind].Units
	}
	var n int64
	for _, p := range a.Pods {
		n += int64(p)
	}
	return n
}

// Options size the sequences.
type Options struct {
	// Arrivals per sequence (default 10,000).
	Arrivals int
	// Seed of the arrivals (default 27).
	Seed int64
	// Load is the offered load (default 1.0: on average as much capacity
	// asked for as the cluster has).
	Load float64
	// MIGNodes and GangNodes are the sizes of the MIG and the gang
	// cluster (default 100 nodes each).
	MIGNodes, GangNodes int
}

func (o Options) withDefaults() Options {
	if o.Arrivals <= 0 {
		o.Arrivals = 10_000
	}
	if o.Seed == 0 {
		o.Seed = 27
	}
	if o.Load <= 0 {
		o.Load = 1.0
	}
	if o.GangNodes <= 0 {
		o.GangNodes = 100
	}
	if o.MIGNodes <= 0 {
		o.MIGNodes = 100
	}
	return o
}

// Sequences returns the three sequences of the benchmark.
func Sequences(o Options) []*Sequence {
	o = o.withDefaults()
	migNodes := o.MIGNodes
	mig := &Sequence{
		Name:        fmt.Sprintf("mig-%dn", migNodes),
		Description: fmt.Sprintf("partitionable-100n's cluster (%d nodes x 8 A100-like GPUs with MIG placements on shared counters); MIG profile claims", migNodes),
		Build:       func() *workload.Workload { return workload.PartitionableCluster(migNodes) },
		Capacity:    int64(migNodes) * 8 * 8,
	}
	// The partitionable workload's mix: mostly small profiles.
	weights := map[string]int{"1g.5gb": 5, "2g.10gb": 2, "3g.20gb": 1, "4g.20gb": 1, "7g.40gb": 1}
	for _, p := range workload.MIGProfiles() {
		mig.Kinds = append(mig.Kinds, Kind{Profile: p, Selector: p.Selector(workload.GPUDriver, "profile"), Attribute: "profile", Value: p.Name, Weight: weights[p.Name]})
	}
	tpu := &Sequence{
		Name:        "multihost",
		Description: "two 64-host TPU-like pools (8x8 hosts of 2x2 chips) published centrally; 2x4-, 4x4- and 8x8-host slices",
		Build:       multihost,
		Capacity:    2 * 64 * 4,
	}
	tw := map[string]int{"2x4": 3, "4x4": 2, "8x8": 1}
	for _, p := range workload.TPUShapes() {
		tpu.Kinds = append(tpu.Kinds, Kind{Profile: p, Selector: p.Selector(workload.TPUDriver, "shape"), Attribute: "shape", Value: p.Attribute, Weight: tw[p.Name]})
	}
	gangNodes := o.GangNodes
	gangs := &Sequence{
		Name:        fmt.Sprintf("gangs-%dn", gangNodes),
		Description: fmt.Sprintf("%d nodes x 8 GPUs in racks of 10; gangs of 2-8 pods of 1-8 GPUs each, all in one rack", gangNodes),
		Build:       func() *workload.Workload { return workload.GangCluster(gangNodes, 8, 10) },
		Gangs:       true,
		Capacity:    int64(gangNodes) * 8,
	}
	for i, s := range []*Sequence{mig, tpu, gangs} {
		s.Load = o.Load
		s.Arrivals = generate(s, o.Arrivals, o.Seed+int64(i), o.Load)
	}
	return []*Sequence{mig, tpu, gangs}
}

func multihost() *workload.Workload {
	w := workload.Multihost()
	w.Claims = nil
	return w
}

// generate draws n arrivals: exponential inter-arrival times of mean 1,
// kinds by weight (gangs: 2-8 pods of 1-8 GPUs, uniform), and exponential
// lifetimes whose mean makes the offered load load.
func generate(s *Sequence, n int, seed int64, load float64) []Arrival {
	r := rand.New(rand.NewSource(seed))
	total := 0
	for _, k := range s.Kinds {
		total += k.Weight
	}
	out := make([]Arrival, 0, n)
	var sum int64
	t := 0.0
	for i := 0; i < n; i++ {
		t += r.ExpFloat64()
		a := Arrival{At: t, Kind: -1}
		if s.Gangs {
			pods := 2 + r.Intn(7)
			for p := 0; p < pods; p++ {
				a.Pods = append(a.Pods, 1+r.Intn(8))
			}
		} else {
			w := r.Intn(total)
			for k, kind := range s.Kinds {
				if w < kind.Weight {
					a.Kind = k
					break
				}
				w -= kind.Weight
			}
		}
		sum += s.Units(a)
		// The lifetime's unit draw comes now; its mean is set below.
		a.Until = r.ExpFloat64()
		out = append(out, a)
	}
	// Little's law: load = rate (1) x mean lifetime x mean size / capacity.
	mean := load * float64(s.Capacity) / (float64(sum) / float64(n))
	for i := range out {
		out[i].Until = out[i].At + out[i].Until*mean
	}
	return out
}
