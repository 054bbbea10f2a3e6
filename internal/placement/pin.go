package placement

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// HostnameLabel is the node label kube-scheduler's and the kubelet's
// conventions put the node's host name in.
const HostnameLabel = corev1.LabelHostname

// NeedsPin reports whether a pod placed on node must be told so: its
// allocations (their node selectors; nil selects every node) let it run on
// another of the nodes it fits too. Node-local devices pin a pod by
// themselves; devices of several hosts (multi-host slices) do not, and
// kube-scheduler could then bind the pod to another of their hosts than
// the one the placement counted it on.
func NeedsPin(node string, fits []*corev1.Node, selectors []*corev1.NodeSelector) bool {
	matchers := make([]nodeaffinity.NodeSelector, 0, len(selectors))
	for _, s := range selectors {
		if s == nil {
			continue
		}
		m, err := nodeaffinity.NewNodeSelector(s)
		if err != nil {
			// A selector that does not parse pins nothing we can tell.
			return true
		}
		matchers = append(matchers, *m)
	}
	for _, n := range fits {
		if n.Name == node {
			continue
		}
		all := true
		for i := range matchers {
			if !matchers[i].Match(n) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// PinToNode returns a copy of a gated pod that runs only on node, and
// whether anything had to change. It narrows the pod's scheduling
// constraints the way the API server lets a gated pod's be narrowed: it
// adds the node's host name to spec.nodeSelector when the node carries
// HostnameLabel, else (a node without it) it adds a metadata.name field
// requirement to every term of the required node affinity. A pod whose
// node selector names another host cannot run on node: that is an error.
func PinToNode(pod *corev1.Pod, node *corev1.Node) (*corev1.Pod, bool, error) {
	if host, ok := node.Labels[HostnameLabel]; ok {
		if cur, set := pod.Spec.NodeSelector[HostnameLabel]; set {
			if cur != host {
				return nil, false, fmt.Errorf("pod %s/%s: spec.nodeSelector[%s] is %q, not node %s's %q", pod.Namespace, pod.Name, HostnameLabel, cur, node.Name, host)
			}
			return pod, false, nil
		}
		out := pod.DeepCopy()
		if out.Spec.NodeSelector == nil {
			out.Spec.NodeSelector = map[string]string{}
		}
		out.Spec.NodeSelector[HostnameLabel] = host
		return out, true, nil
	}
	req := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node.Name}}
	out := pod.DeepCopy()
	if out.Spec.Affinity == nil {
		out.Spec.Affinity = &corev1.Affinity{}
	}
	if out.Spec.Affinity.NodeAffinity == nil {
		out.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := out.Spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil || len(na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 0 {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{req}}}}
		return out, true, nil
	}
	// Terms are ORed: the requirement goes into each of them.
	terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for i := range terms {
		terms[i].MatchFields = append(terms[i].MatchFields, req)
	}
	return out, true, nil
}
