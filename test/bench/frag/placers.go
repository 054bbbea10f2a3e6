package frag

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/native"
	"github.com/drastack/drastack/internal/allocator/upstream"
	"github.com/drastack/drastack/test/bench/workload"
)

// Placer names, in the order the table shows them.
const (
	KubeScheduler = "kube-scheduler first fit"
	KubeRandom    = "kube-scheduler scored"
	NativeFirst   = "native FirstFit"
	NativePack    = "native Pack"
)

// Placers lists the placers of a run.
var Placers = []string{KubeScheduler, KubeRandom, NativeFirst, NativePack}

// placer places one claim or one gang and releases claims that depart.
// Results are recorded in the placer's session before it returns.
type placer interface {
	// place returns the claim's allocation, or nil when it is refused.
	// fits(ni) says whether node ni (an index into the inputs' nodes) has
	// a free device of the claim's kind, by the benchmark's model.
	place(ctx context.Context, claim *resourceapi.ResourceClaim, fits func(ni int) bool) (*resourceapi.AllocationResult, error)
	// placeGang places one claim per pod, all in one rack, or none (nil).
	placeGang(ctx context.Context, name string, pods []*resourceapi.ResourceClaim) ([]*resourceapi.AllocationResult, error)
	release(claim *resourceapi.ResourceClaim) error
}

// nativePlacer is the native engine as the operator runs it: one central
// Allocate call per claim (the engine picks the node), AllocateGang for a
// gang, Release when a claim goes.
type nativePlacer struct {
	sess   allocator.Session
	policy allocator.PlacementPolicy
}

func newNative(ctx context.Context, w *workload.Workload, policy allocator.PlacementPolicy) (*nativePlacer, error) {
	sess, err := native.New().NewSession(ctx, w.Inputs)
	if err != nil {
		return nil, err
	}
	return &nativePlacer{sess: sess, policy: policy}, nil
}

func (p *nativePlacer) place(ctx context.Context, claim *resourceapi.ResourceClaim, _ func(int) bool) (*resourceapi.AllocationResult, error) {
	res, err := p.sess.Allocate(ctx, []*resourceapi.ResourceClaim{claim}, allocator.Options{Policy: p.policy})
	if errors.Is(err, allocator.ErrUnsatisfiable) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return res[0].Allocation, record(p.sess, claim, res[0].Allocation)
}

func (p *nativePlacer) placeGang(ctx context.Context, name string, pods []*resourceapi.ResourceClaim) ([]*resourceapi.AllocationResult, error) {
	gang := allocator.Gang{Name: name, Constraints: []allocator.GangConstraint{{NodeLabel: workload.RackLabel}}}
	for _, c := range pods {
		gang.Members = append(gang.Members, allocator.GangMember{Name: c.Name, Claims: []*resourceapi.ResourceClaim{c}})
	}
	res, err := p.sess.(allocator.GangSession).AllocateGang(ctx, gang, allocator.Options{Policy: p.policy})
	if errors.Is(err, allocator.ErrUnsatisfiable) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]*resourceapi.AllocationResult, len(pods))
	for i, m := range res {
		out[i] = m.Results[0].Allocation
		if err := record(p.sess, pods[i], out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (p *nativePlacer) release(claim *resourceapi.ResourceClaim) error {
	return p.sess.(allocator.Releaser).Release(claim)
}

// kubePlacer is kube-scheduler's first fit with the upstream allocator: for
// one pod, nodes in order, one Allocate call per node with the node in the
// request (kube-scheduler's Filter), the first node that fits wins. Nodes
// where the benchmark's model finds no free device of the claim's kind are
// not asked: the upstream allocator would refuse them too, and asking would
// only make the run longer (the placement is the same; its time per
// decision is therefore a lower bound of kube-scheduler's). A gang is
// placed as kube-scheduler 1.37's pod group cycle with a topology
// constraint places it: for each rack in turn, the pods one at a time,
// each on the first node of the rack that fits, the allocations assumed
// for the next pods; the first rack where every pod fits is kept (a real
// kube-scheduler tries them all and keeps the best scored; the placement
// of this gang does not depend on which).
//
// With random set it picks the node as a default kube-scheduler does
// instead: its score plugins rate every node that fits (the upstream
// Filter on each) alike when pods request no CPU or memory and no
// prioritized list, and it breaks the tie at random, so the pod goes to a
// node drawn uniformly among those that fit (racks, for a gang, in random
// order too).
type kubePlacer struct {
	sess   allocator.Session
	nodes  []string
	racks  [][]int
	m      *model
	missed int
	random *rand.Rand
}

func newKube(ctx context.Context, w *workload.Workload, m *model, random *rand.Rand) (*kubePlacer, error) {
	sess, err := upstream.New().NewSession(ctx, w.Inputs)
	if err != nil {
		return nil, err
	}
	p := &kubePlacer{sess: sess, m: m, random: random}
	rackIdx := map[string]int{}
	for i, n := range w.Inputs.Nodes {
		p.nodes = append(p.nodes, n.Name)
		r, ok := n.Labels[workload.RackLabel]
		if !ok {
			continue
		}
		k, seen := rackIdx[r]
		if !seen {
			k = len(p.racks)
			rackIdx[r] = k
			p.racks = append(p.racks, nil)
		}
		p.racks[k] = append(p.racks[k], i)
	}
	return p, nil
}

func (p *kubePlacer) place(ctx context.Context, claim *resourceapi.ResourceClaim, fits func(int) bool) (*resourceapi.AllocationResult, error) {
	var order []int
	for ni := range p.nodes {
		if fits(ni) {
			order = append(order, ni)
		}
	}
	p.shuffle(order)
	for _, ni := range order {
		alloc, err := p.onNode(ctx, claim, p.nodes[ni])
		if err != nil || alloc != nil {
			return alloc, err
		}
	}
	return nil, nil
}

// shuffle puts the nodes that fit in a random order when the placer picks
// at random (the first that the upstream allocator accepts is then a
// uniform draw among them); first fit keeps their order.
func (p *kubePlacer) shuffle(nodes []int) {
	if p.random != nil {
		p.random.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
	}
}

// onNode is one Filter call: the claim on node name, recorded when it fits.
func (p *kubePlacer) onNode(ctx context.Context, claim *resourceapi.ResourceClaim, name string) (*resourceapi.AllocationResult, error) {
	res, err := p.sess.Allocate(ctx, []*resourceapi.ResourceClaim{claim}, allocator.Options{Node: name})
	if errors.Is(err, allocator.ErrUnsatisfiable) {
		// The model said a device fits here; count the disagreement.
		p.missed++
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return res[0].Allocation, record(p.sess, claim, res[0].Allocation)
}

func (p *kubePlacer) placeGang(ctx context.Context, name string, pods []*resourceapi.ResourceClaim) ([]*resourceapi.AllocationResult, error) {
	racks := slices.Clone(p.racks)
	if p.random != nil {
		p.random.Shuffle(len(racks), func(i, j int) { racks[i], racks[j] = racks[j], racks[i] })
	}
	for _, rack := range racks {
		var placed []*resourceapi.AllocationResult
		ok := true
		for i, pod := range pods {
			want := int(pod.Spec.Devices.Requests[0].Exactly.Count)
			var got *resourceapi.AllocationResult
			var fit []int
			for _, ni := range rack {
				if p.m.freeOnNode(ni) >= want {
					fit = append(fit, ni)
				}
			}
			p.shuffle(fit)
			for _, ni := range fit {
				alloc, err := p.onNode(ctx, pod, p.nodes[ni])
				if err != nil {
					return nil, err
				}
				if alloc != nil {
					got = alloc
					break
				}
			}
			if got == nil {
				ok = false
				break
			}
			// Assumed for the next pods, as kube-scheduler assumes a pod
			// and its claims' allocations within the cycle.
			if err := p.m.take(got); err != nil {
				return nil, fmt.Errorf("gang %s, pod %d: %w", name, i, err)
			}
			placed = append(placed, got)
		}
		// The runner takes the allocations into the model itself.
		for i, alloc := range placed {
			p.m.give(alloc)
			if !ok {
				done := pods[i].DeepCopy()
				done.Status.Allocation = alloc
				if err := p.release(done); err != nil {
					return nil, err
				}
			}
		}
		if ok {
			return placed, nil
		}
	}
	return nil, nil
}

func (p *kubePlacer) release(claim *resourceapi.ResourceClaim) error {
	return p.sess.(allocator.Releaser).Release(claim)
}

// record adds a placed claim's allocation to a session.
func record(sess allocator.Session, claim *resourceapi.ResourceClaim, alloc *resourceapi.AllocationResult) error {
	done := claim.DeepCopy()
	done.Status.Allocation = alloc
	if err := sess.Record(done); err != nil {
		return fmt.Errorf("record claim %s: %w", claim.Name, err)
	}
	return nil
}
