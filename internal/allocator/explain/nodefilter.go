package explain

import (
	"cmp"
	"slices"

	"github.com/drastack/drastack/internal/placement"
)

// NodeFilter is a node a pod's node filters ruled out before its claims
// were tried there.
type NodeFilter struct {
	Node string `json:"node"`
	// Reason is kube-scheduler's wording ("node(s) were unschedulable").
	Reason string `json:"reason"`
}

// filterNodes records the nodes opts.NodeFilter rules out and returns the
// candidate nodes left, in their order.
func (r *Report) filterNodes(nodes []string, opts Options) []string {
	for n, why := range opts.NodeFilter {
		r.NodeFilters = append(r.NodeFilters, NodeFilter{Node: n, Reason: why})
	}
	slices.SortFunc(r.NodeFilters, func(a, b NodeFilter) int { return cmp.Compare(a.Node, b.Node) })
	total := opts.NodesTotal
	if total < len(opts.NodeFilter) {
		total = len(opts.NodeFilter)
		for _, n := range nodes {
			if _, out := opts.NodeFilter[n]; !out {
				total++
			}
		}
	}
	r.FilterSummary = placement.Summary(total, opts.NodeFilter)
	return slices.DeleteFunc(slices.Clone(nodes), func(n string) bool {
		_, out := opts.NodeFilter[n]
		return out
	})
}

// fitFromGroups decides Fits from the nodes that passed the filters: the
// central allocation may have chosen a node the pod cannot run on.
func (r *Report) fitFromGroups() {
	r.Fits, r.Node, r.Devices = false, "", nil
	for _, g := range r.Groups {
		if g.Fits {
			r.Fits, r.Node, r.Devices, r.Reason = true, firstNode(&g), g.Devices, ""
			return
		}
	}
	if r.Reason == "" {
		r.Reason = "no node that passes the pod's node filters fits the claims"
	}
}
