package central

import (
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// LabelKeys are the node label keys that can change what an allocation
// engine sees of these slices and central entries: the keys of every
// slice's and every device's node selector, and of the central entries'
// node selectors. A node label change that touches none of them leaves
// every allocation decision as it was, so the claim controller keeps its
// engine session (node labels change in bulk on a fresh cluster, when
// kube-controller-manager adds the beta.kubernetes.io labels, and at any
// time when a labeller such as node-feature-discovery runs).
func LabelKeys(slices []*resourceapi.ResourceSlice, entries []v1alpha1.CentralDevices) map[string]bool {
	keys := map[string]bool{}
	addSelector := func(sel *corev1.NodeSelector) {
		if sel == nil {
			return
		}
		for _, term := range sel.NodeSelectorTerms {
			for _, req := range term.MatchExpressions {
				keys[req.Key] = true
			}
			// matchFields select by metadata.name, not by labels.
		}
	}
	for _, sl := range slices {
		if sl == nil {
			continue
		}
		addSelector(sl.Spec.NodeSelector)
		for i := range sl.Spec.Devices {
			addSelector(sl.Spec.Devices[i].NodeSelector)
		}
	}
	for _, e := range entries {
		if e.NodeSelector == nil {
			continue
		}
		for k := range e.NodeSelector.MatchLabels {
			keys[k] = true
		}
		for _, req := range e.NodeSelector.MatchExpressions {
			keys[req.Key] = true
		}
	}
	return keys
}

// LabelsChanged says whether a node's labels differ, from old to cur, in
// one of keys.
func LabelsChanged(keys map[string]bool, old, cur map[string]string) bool {
	for k := range keys {
		a, inOld := old[k]
		b, inCur := cur[k]
		if inOld != inCur || a != b {
			return true
		}
	}
	return false
}
