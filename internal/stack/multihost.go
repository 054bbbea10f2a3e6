package stack

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// Which nodes a spec.multiHost entry publishes on, and what it names its
// pools, decided once here: the central publisher (which builds the pools)
// and the whole-spec check (which refuses entries whose hosts or pools
// collide) must agree exactly.

// MultiHostSelector is an entry's node selector as a labels.Selector:
// every node when the entry has none.
func MultiHostSelector(e *v1alpha1.MultiHostSpec) (labels.Selector, error) {
	if e.NodeSelector == nil {
		return labels.Everything(), nil
	}
	return metav1.LabelSelectorAsSelector(e.NodeSelector)
}

// MultiHostDomain is the domain a node belongs to for an entry: the value
// of the entry's domain label when the selector picks the node, else "".
// Cordoned nodes and nodes being deleted count: they are hosts of their
// domain that are missing for now, and a cordon must not make two entries'
// hosts look disjoint.
func MultiHostDomain(e *v1alpha1.MultiHostSpec, sel labels.Selector, node *corev1.Node) string {
	if !sel.Matches(labels.Set(node.Labels)) {
		return ""
	}
	return node.Labels[e.DomainLabel]
}

// PoolName is the pool of one domain of an entry: "<entry>-<domain>". A
// domain is a label value (upper case, "_" and "." allowed) while a pool
// name is made of DNS subdomains, so the domain is lower-cased and every
// character other than a-z and 0-9 becomes "-" (runs collapsed). When that
// changed the domain, an 8-digit hash of the raw value is appended, so
// that "Rack_1" and "rack-1" stay two pools.
func PoolName(entry, domain string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(domain) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
			continue
		}
		if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	clean := strings.TrimRight(b.String(), "-")
	if clean != domain {
		h := fnv.New32a()
		_, _ = h.Write([]byte(domain))
		if clean != "" {
			clean += "-"
		}
		clean += fmt.Sprintf("%08x", h.Sum32())
	}
	return entry + "-" + clean
}

// MultiHostConflict is two spec.multiHost entries of one driver that would
// publish devices on the same host, or pools of the same name. Either way
// one chip would be two devices of two pools, which two claims could get.
type MultiHostConflict struct {
	// First and Second index spec.multiHost, First < Second.
	First, Second int
	// Driver both entries publish under.
	Driver string
	// SameSelection: the entries have the same nodeSelector and
	// domainLabel, so they select the same hosts whatever the nodes.
	SameSelection bool
	// Nodes both entries select (sorted).
	Nodes []string
	// Pools both entries would publish (sorted).
	Pools []string
}

// Message describes the conflict, naming both entries by field path.
func (c MultiHostConflict) Message(entries []v1alpha1.MultiHostSpec) string {
	other := fmt.Sprintf("spec.multiHost[%d] (%s)", c.First, entries[c.First].Name)
	var what []string
	if c.SameSelection {
		what = append(what, "the same nodeSelector and domainLabel")
	}
	if len(c.Nodes) > 0 {
		what = append(what, listNames("host", c.Nodes))
	}
	if len(c.Pools) > 0 {
		what = append(what, listNames("pool name", c.Pools))
	}
	return fmt.Sprintf("publishes driver %s with %s as %s: one chip would be a device of two pools and could go to two claims; give the entries disjoint hosts (nodeSelector or domainLabel) or different drivers",
		c.Driver, strings.Join(what, " and "), other)
}

// MultiHostConflicts finds the pairs of entries of one driver that share a
// host or a pool name among nodes (nil: only what the spec alone shows,
// the same selection). Entries whose selector does not parse select
// nothing here; Validate reports them.
func MultiHostConflicts(entries []v1alpha1.MultiHostSpec, nodes []corev1.Node) []MultiHostConflict {
	type selection struct {
		domains map[string]string // node -> domain
		pools   map[string]bool
	}
	// Only entries that share their driver with another can conflict: the
	// nodes are walked for those alone (most specs have none).
	perDriver := map[string]int{}
	for i := range entries {
		perDriver[entries[i].Driver]++
	}
	sel := make([]selection, len(entries))
	for i := range entries {
		e := &entries[i]
		s := selection{domains: map[string]string{}, pools: map[string]bool{}}
		if selector, err := MultiHostSelector(e); err == nil && perDriver[e.Driver] > 1 {
			for j := range nodes {
				if d := MultiHostDomain(e, selector, &nodes[j]); d != "" {
					s.domains[nodes[j].Name] = d
					s.pools[PoolName(e.Name, d)] = true
				}
			}
		}
		sel[i] = s
	}
	var out []MultiHostConflict
	for j := range entries {
		for i := 0; i < j; i++ {
			a, b := &entries[i], &entries[j]
			if a.Driver != b.Driver {
				continue
			}
			c := MultiHostConflict{First: i, Second: j, Driver: a.Driver,
				SameSelection: a.DomainLabel == b.DomainLabel && apiequality.Semantic.DeepEqual(a.NodeSelector, b.NodeSelector)}
			for n := range sel[j].domains {
				if _, ok := sel[i].domains[n]; ok {
					c.Nodes = append(c.Nodes, n)
				}
			}
			for p := range sel[j].pools {
				if sel[i].pools[p] {
					c.Pools = append(c.Pools, p)
				}
			}
			if !c.SameSelection && len(c.Nodes) == 0 && len(c.Pools) == 0 {
				continue
			}
			slices.Sort(c.Nodes)
			slices.Sort(c.Pools)
			out = append(out, c)
		}
	}
	return out
}

// maxListed bounds the names a message lists.
const maxListed = 5

// listNames is "host a" or "hosts a, b, c and 4 more".
func listNames(noun string, names []string) string {
	if len(names) == 1 {
		return noun + " " + names[0]
	}
	shown := names[:min(len(names), maxListed)]
	s := noun + "s " + strings.Join(shown, ", ")
	if more := len(names) - len(shown); more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s
}
