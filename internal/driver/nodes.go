package driver

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// NodeFit says why a kubelet-plugin DaemonSet targets the nodes it does,
// filter by filter, the way the DaemonSet controller picks nodes: the node
// selector, then the required node affinity (a profile's own, such as
// nvidia-gpu's GPU labels), then the taints.
type NodeFit struct {
	// Nodes is how many nodes the cluster has.
	Nodes int
	// Selected match the node selector.
	Selected int
	// Affine are the selected nodes that also satisfy the required node
	// affinity.
	Affine int
	// Tolerated are the affine nodes whose NoSchedule and NoExecute taints
	// the plugin tolerates.
	Tolerated int
	// Selector is the node selector as "key=value, ..."; empty when none.
	Selector string
	// Affinity describes the required node affinity terms; empty when none.
	Affinity string
	// Taints are the taints that keep the plugin off affine nodes.
	Taints []string
	// Fit names the nodes that pass every filter: the nodes the
	// DaemonSet runs the plugin on.
	Fit []string
}

// daemonTolerations are the tolerations the DaemonSet controller adds to
// every daemon pod (k8s.io/kubernetes pkg/controller/daemon/util
// AddOrUpdateDaemonPodTolerations), so a node's condition taints never
// keep a plugin away.
var daemonTolerations = []corev1.Toleration{
	{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	{Key: corev1.TaintNodeDiskPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodePIDPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
}

// FitNodes applies a plugin pod template's node selector, required node
// affinity and tolerations to the nodes.
func FitNodes(spec *corev1.PodSpec, nodes []corev1.Node) NodeFit {
	fit := NodeFit{Nodes: len(nodes), Selector: labels.Set(spec.NodeSelector).String()}
	var required *corev1.NodeSelector
	if a := spec.Affinity; a != nil && a.NodeAffinity != nil {
		required = a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	fit.Affinity = describeNodeSelector(required)
	var affinity *nodeaffinity.LazyErrorNodeSelector
	if required != nil {
		affinity = nodeaffinity.NewLazyErrorNodeSelector(required)
	}
	selector := labels.SelectorFromSet(spec.NodeSelector)
	tolerations := append(slices.Clone(spec.Tolerations), daemonTolerations...)
	scheduling := func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}
	taints := map[string]bool{}
	for i := range nodes {
		n := &nodes[i]
		if !selector.Matches(labels.Set(n.Labels)) {
			continue
		}
		fit.Selected++
		if affinity != nil {
			// A malformed term matches nothing, as for the scheduler.
			if ok, _ := affinity.Match(n); !ok {
				continue
			}
		}
		fit.Affine++
		if t, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), n.Spec.Taints, tolerations, scheduling, true); untolerated {
			taints[t.ToString()] = true
			continue
		}
		fit.Tolerated++
		fit.Fit = append(fit.Fit, n.Name)
	}
	slices.Sort(fit.Fit)
	for t := range taints {
		fit.Taints = append(fit.Taints, t)
	}
	slices.Sort(fit.Taints)
	return fit
}

// Message explains why no node runs the plugin.
func (f NodeFit) Message() string {
	selector := "{" + f.Selector + "}"
	switch {
	case f.Nodes == 0:
		return "the cluster has no nodes"
	case f.Selected == 0 && f.Selector != "":
		return fmt.Sprintf("no node matches the plugin's node selector %s (%d %s in the cluster)", selector, f.Nodes, plural(f.Nodes, "node", "nodes"))
	case f.Affine == 0:
		picked := fmt.Sprintf("the %d %s the node selector %s picks", f.Selected, plural(f.Selected, "node", "nodes"), selector)
		if f.Selector == "" {
			picked = fmt.Sprintf("the %d %s", f.Selected, plural(f.Selected, "node", "nodes"))
		}
		return fmt.Sprintf("none of %s satisfies the profile's required node affinity: %s", picked, f.Affinity)
	case f.Tolerated == 0:
		return fmt.Sprintf("every node the plugin could run on has a taint it does not tolerate (%s); add tolerations to the driver", listSome(f.Taints, 5))
	}
	return fmt.Sprintf("the DaemonSet targets no node although %d %s fit", f.Tolerated, plural(f.Tolerated, "node", "nodes"))
}

// describeNodeSelector writes required node affinity terms the way a
// person reads them: terms joined by "or", expressions by "and".
func describeNodeSelector(ns *corev1.NodeSelector) string {
	if ns == nil {
		return ""
	}
	var terms []string
	for _, t := range ns.NodeSelectorTerms {
		var exprs []string
		for _, list := range [][]corev1.NodeSelectorRequirement{t.MatchExpressions, t.MatchFields} {
			for _, r := range list {
				e := r.Key + " " + string(r.Operator)
				if len(r.Values) > 0 {
					e += " (" + strings.Join(r.Values, ", ") + ")"
				}
				exprs = append(exprs, e)
			}
		}
		if len(exprs) > 0 {
			terms = append(terms, strings.Join(exprs, " and "))
		}
	}
	return strings.Join(terms, " or ")
}
