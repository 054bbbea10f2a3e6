package central

import (
	resourcev1 "k8s.io/api/resource/v1"
)

// CentralSlices returns the slices the operator allocates its claims from:
// every slice (device slices and counter slices, of every generation) of
// each central pool whose devices all carry the operator's taint, in input
// order. Pools are kept or dropped whole, never thinned, so a kept pool has
// the slice count, counter sets and devices its generation declares and
// does not look incomplete or invalid to the engine, and a dropped pool is
// simply absent.
//
// Pass slices with the DeviceTaintRules already applied (ApplyTaintRules
// with the existing rules). A central pool with an untainted device in its
// current generation is dropped until the taint is in place (the rule is not
// created yet, or a new device appeared), because kube-scheduler may still
// allocate such a device: the operator allocates only what kube-scheduler is
// already kept away from. The returned slices are the input pointers.
func CentralSlices(p *Partition, slices []*resourcev1.ResourceSlice) []*resourcev1.ResourceSlice {
	// The current generation of each central pool, and whether every
	// device in it carries the taint.
	gen := map[PoolID]int64{}
	for _, s := range slices {
		if s == nil {
			continue
		}
		id := PoolID{Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name}
		if !p.Central(id.Driver, id.Pool, "") {
			continue
		}
		if g, ok := gen[id]; !ok || s.Spec.Pool.Generation > g {
			gen[id] = s.Spec.Pool.Generation
		}
	}
	tainted := make(map[PoolID]bool, len(gen))
	for id := range gen {
		tainted[id] = true
	}
	for _, s := range slices {
		if s == nil {
			continue
		}
		id := PoolID{Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name}
		if g, ok := gen[id]; !ok || s.Spec.Pool.Generation != g {
			continue
		}
		for _, d := range s.Spec.Devices {
			if !hasTaint(d.Taints) {
				tainted[id] = false
				break
			}
		}
	}
	var out []*resourcev1.ResourceSlice
	for _, s := range slices {
		if s == nil {
			continue
		}
		if tainted[PoolID{Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name}] {
			out = append(out, s)
		}
	}
	return out
}
