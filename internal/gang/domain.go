package gang

import (
	"fmt"
	"sort"
)

// Domain returns the value of each node label constraint of the gang that
// members already running fix: the members placed now must run on nodes
// with the same values. placed maps the name of each node a member of the
// gang is bound to to its labels. A constraint no running member fixes is
// left out. Running members on nodes that disagree (or lack the label) are
// an error: no new member can share the domain with all of them.
func Domain(spec Spec, placed map[string]map[string]string) (map[string]string, error) {
	nodes := make([]string, 0, len(placed))
	for n := range placed {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	out := map[string]string{}
	for _, c := range spec.Constraints {
		if c.NodeLabel == "" || len(nodes) == 0 {
			continue
		}
		first := ""
		for i, n := range nodes {
			v, ok := placed[n][c.NodeLabel]
			if !ok {
				return nil, fmt.Errorf("gang %s: member on node %s runs outside any %s domain (the node has no such label)", spec.Key(), n, c.NodeLabel)
			}
			if i == 0 {
				first = v
				continue
			}
			if v != first {
				return nil, fmt.Errorf("gang %s: members run in two %s domains (%s on node %s, %s on node %s)", spec.Key(), c.NodeLabel, first, nodes[0], v, n)
			}
		}
		out[c.NodeLabel] = first
	}
	return out, nil
}

// InDomain reports whether a node with labels is in the domain (Domain's
// result).
func InDomain(labels, domain map[string]string) bool {
	for k, v := range domain {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
