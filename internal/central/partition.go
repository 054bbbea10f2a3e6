package central

import (
	"cmp"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/drastack/drastack/api/v1alpha1"
)

// PoolID names a pool: pool names are unique per driver only.
type PoolID struct {
	// Driver is the DRA driver name (slice.spec.driver).
	Driver string
	// Pool is the pool name (slice.spec.pool.name).
	Pool string
}

// Inputs are what a Partition is built from.
type Inputs struct {
	// Entries are spec.claims.central.
	Entries []v1alpha1.CentralDevices
	// Slices are all ResourceSlices, of every generation. They tell which
	// pools exist and which of them are node-local to which node.
	Slices []*resourcev1.ResourceSlice
	// Nodes are all Nodes; only their names and labels are read.
	Nodes []*corev1.Node
	// Published are the drivers whose node-less slices the operator
	// publishes itself (spec.multiHost) with the operator's taint written
	// into every device, so those pools need no DeviceTaintRule. This is
	// what keeps multi-host devices central on clusters that do not serve
	// DeviceTaintRule.
	Published []string
}

// Partition says which devices are central and which claims may use them.
// It is immutable once built and safe for concurrent reads.
type Partition struct {
	entries []v1alpha1.CentralDevices
	// wide maps a driver to the entries that select all of its devices.
	wide map[string][]int
	// pools maps a pool to the entries that select it by name or as the
	// node-local pool of a matching node.
	pools map[PoolID][]int
	// seen are all pools present in the slices.
	seen map[PoolID]poolFacts
	// classes maps a central DeviceClass name to its entries.
	classes   map[string][]int
	published map[string]bool
}

// poolFacts is what the partition needs to know about a pool's slices.
type poolFacts struct {
	// nodeLocal: some slice of the pool names a node (spec.nodeName).
	nodeLocal bool
}

// NewPartition builds the partition for in. An entry whose nodeSelector is
// not a valid label selector fails the whole build, naming the field: a
// partition without that entry would untaint its devices, so the caller
// should report the spec as invalid and change nothing.
func NewPartition(in Inputs) (*Partition, error) {
	p := &Partition{
		entries:   make([]v1alpha1.CentralDevices, len(in.Entries)),
		wide:      map[string][]int{},
		pools:     map[PoolID][]int{},
		seen:      map[PoolID]poolFacts{},
		classes:   map[string][]int{},
		published: map[string]bool{},
	}
	// A deep copy: the partition is immutable even if the caller's spec is
	// reused.
	for i := range in.Entries {
		in.Entries[i].DeepCopyInto(&p.entries[i])
	}
	for _, d := range in.Published {
		p.published[d] = true
	}
	// nodePools are the node-local pools of each node, per driver.
	nodePools := map[string][]PoolID{}
	for _, s := range in.Slices {
		if s == nil {
			continue
		}
		id := PoolID{Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name}
		f := p.seen[id]
		if s.Spec.NodeName != nil && *s.Spec.NodeName != "" {
			f.nodeLocal = true
			node := *s.Spec.NodeName
			if !slices.Contains(nodePools[node], id) {
				nodePools[node] = append(nodePools[node], id)
			}
		}
		p.seen[id] = f
	}
	for i, e := range in.Entries {
		for _, c := range e.Classes {
			p.classes[c] = appendOnce(p.classes[c], i)
		}
		switch {
		case e.NodeSelector != nil:
			sel, err := metav1.LabelSelectorAsSelector(e.NodeSelector)
			if err != nil {
				return nil, fmt.Errorf("spec.claims.central[%d].nodeSelector: %w", i, err)
			}
			for _, n := range in.Nodes {
				if n == nil || !sel.Matches(labels.Set(n.Labels)) {
					continue
				}
				for _, id := range nodePools[n.Name] {
					if id.Driver == e.Driver {
						p.pools[id] = appendOnce(p.pools[id], i)
					}
				}
			}
		case len(e.Pools) > 0:
			for _, pool := range e.Pools {
				id := PoolID{Driver: e.Driver, Pool: pool}
				p.pools[id] = appendOnce(p.pools[id], i)
			}
		default:
			p.wide[e.Driver] = appendOnce(p.wide[e.Driver], i)
		}
	}
	return p, nil
}

// appendOnce appends i unless it is already last; entries are visited in
// order, so that keeps each list sorted and free of duplicates.
func appendOnce(list []int, i int) []int {
	if n := len(list); n > 0 && list[n-1] == i {
		return list
	}
	return append(list, i)
}

// Entries returns the indexes into spec.claims.central of the entries that
// select the device, in order; none when the device is not central. The
// device name is part of the question so callers need not know that the
// partition is pool-granular today.
func (p *Partition) Entries(driver, pool, device string) []int {
	wide := p.wide[driver]
	byPool := p.pools[PoolID{Driver: driver, Pool: pool}]
	switch {
	case len(wide) == 0:
		return slices.Clone(byPool)
	case len(byPool) == 0:
		return slices.Clone(wide)
	}
	out := append(slices.Clone(wide), byPool...)
	slices.Sort(out)
	return slices.Compact(out)
}

// Central says whether the device is central: only the operator allocates it.
func (p *Partition) Central(driver, pool, device string) bool {
	return len(p.wide[driver]) > 0 || len(p.pools[PoolID{Driver: driver, Pool: pool}]) > 0
}

// Classes returns the DeviceClass names whose claims the operator serves
// from the device: the union of the classes of every entry that selects it,
// sorted. Empty for a device that is not central, and for a central device
// whose entries list no classes (it serves only claims that are the
// operator's for another reason, such as CEL constraints).
func (p *Partition) Classes(driver, pool, device string) []string {
	var out []string
	for _, i := range p.Entries(driver, pool, device) {
		out = append(out, p.entries[i].Classes...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// IsCentralClass says whether claims with a request for this DeviceClass
// are the operator's.
func (p *Partition) IsCentralClass(class string) bool {
	return len(p.classes[class]) > 0
}

// CentralClasses returns every DeviceClass name listed by some entry, sorted.
func (p *Partition) CentralClasses() []string {
	out := make([]string, 0, len(p.classes))
	for c := range p.classes {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}

// Pools returns the central pools present in the slices, sorted by driver
// and pool: what the operator can allocate from once they are tainted.
func (p *Partition) Pools() []PoolID {
	var out []PoolID
	for id := range p.seen {
		if p.Central(id.Driver, id.Pool, "") {
			out = append(out, id)
		}
	}
	slices.SortFunc(out, comparePools)
	return out
}

// SelfPublished says whether the operator's own publisher writes the taint
// into the pool's slices (a node-less pool of a published driver): such a
// pool needs no DeviceTaintRule, and joins the partition at once
// (docs/allocation-protocol.md, section 4).
func (p *Partition) SelfPublished(id PoolID) bool { return p.selfPublished(id) }

// selfPublished is SelfPublished.
func (p *Partition) selfPublished(id PoolID) bool {
	return p.published[id.Driver] && !p.seen[id].nodeLocal
}

// comparePools orders pools by driver, then pool name.
func comparePools(a, b PoolID) int {
	if c := cmp.Compare(a.Driver, b.Driver); c != 0 {
		return c
	}
	return cmp.Compare(a.Pool, b.Pool)
}
