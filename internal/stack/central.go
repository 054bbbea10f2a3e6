package stack

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// centralWarnings reports spec.claims.central entries that are allowed but
// most likely a mistake: one whose driver nothing publishes (its taint
// rule taints nothing, its classes get no device), and entries that select
// the same devices (a device of both serves the classes of both, which the
// API allows, so it is a warning).
func centralWarnings(spec *v1alpha1.DRAStackSpec, f Facts, path *field.Path) []string {
	entries := spec.Claims.Central
	var out []string
	for i := range entries {
		c := &entries[i]
		if f.Published != nil && !declaredDriver(spec, f, c.Driver) && !f.Published[c.Driver] {
			out = append(out, fmt.Sprintf("%s: no driver publishes devices under %s: no spec.drivers or spec.multiHost entry has that name and no ResourceSlice names it; the entry makes no device central until one does",
				path.Index(i).Child("driver"), c.Driver))
		}
	}
	for j := range entries {
		for i := 0; i < j; i++ {
			if what := centralOverlap(&entries[i], &entries[j], f.Nodes); what != "" {
				out = append(out, fmt.Sprintf("%s overlaps %s: both select %s of driver %s; such devices serve the classes of both entries",
					path.Index(j), path.Index(i), what, entries[j].Driver))
			}
		}
	}
	return out
}

// declaredDriver says whether the spec itself publishes devices under the
// driver name: a spec.drivers entry (by any name its profile publishes
// under) or a spec.multiHost entry.
func declaredDriver(spec *v1alpha1.DRAStackSpec, f Facts, name string) bool {
	for i := range spec.Drivers {
		names := []string{spec.Drivers[i].Name}
		if i < len(f.DriverNames) && len(f.DriverNames[i]) > 0 {
			names = f.DriverNames[i]
		}
		if slices.Contains(names, name) {
			return true
		}
	}
	return slices.ContainsFunc(spec.MultiHost, func(m v1alpha1.MultiHostSpec) bool { return m.Driver == name })
}

// centralOverlap says which devices two central entries both select, or
// "" when none can be shown to: an entry without pools and nodeSelector
// selects the whole driver; pools overlap by name; node selectors overlap
// when they are equal or both pick a node. A nodeSelector entry (node-local
// pools) and a pools entry are not compared: which pools are node-local
// only the slices tell.
func centralOverlap(a, b *v1alpha1.CentralDevices, nodes []corev1.Node) string {
	if a.Driver != b.Driver {
		return ""
	}
	whole := func(c *v1alpha1.CentralDevices) bool { return len(c.Pools) == 0 && c.NodeSelector == nil }
	switch {
	case whole(a) || whole(b):
		return "every device"
	case len(a.Pools) > 0 && len(b.Pools) > 0:
		var shared []string
		for _, p := range b.Pools {
			if slices.Contains(a.Pools, p) && !slices.Contains(shared, p) {
				shared = append(shared, p)
			}
		}
		if len(shared) > 0 {
			return "the devices of " + listNames("pool", shared)
		}
	case a.NodeSelector != nil && b.NodeSelector != nil:
		if equality.Semantic.DeepEqual(a.NodeSelector, b.NodeSelector) {
			return "the node-local pools of the same nodeSelector"
		}
		if shared := bothSelect(a.NodeSelector, b.NodeSelector, nodes); len(shared) > 0 {
			return "the node-local pools of " + listNames("node", shared)
		}
	}
	return ""
}

// bothSelect lists the nodes both selectors pick; a selector that does not
// parse picks none.
func bothSelect(a, b *metav1.LabelSelector, nodes []corev1.Node) []string {
	sa, errA := metav1.LabelSelectorAsSelector(a)
	sb, errB := metav1.LabelSelectorAsSelector(b)
	if errA != nil || errB != nil {
		return nil
	}
	var out []string
	for i := range nodes {
		set := labels.Set(nodes[i].Labels)
		if sa.Matches(set) && sb.Matches(set) {
			out = append(out, nodes[i].Name)
		}
	}
	slices.Sort(out)
	return out
}
