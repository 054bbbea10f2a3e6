package native

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/nodedeclaredfeatures/features/draoptionalnodeoperations"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// nodeSel is a node selector of a slice or device with its result per node
// (indexes into Session.nodes), evaluated once per session.
type nodeSel struct {
	sel *nodeaffinity.NodeSelector
	// bad is set when the selector does not parse; it then matches nothing.
	bad     bool
	matches []int8 // 0 unknown, 1 match, 2 no match
}

func newNodeSel(ns *corev1.NodeSelector) *nodeSel {
	sel, err := nodeaffinity.NewNodeSelector(ns)
	return &nodeSel{sel: sel, bad: err != nil}
}

func (n *nodeSel) match(nodeIdx int, node *corev1.Node) bool {
	if n.bad {
		return false
	}
	for len(n.matches) <= nodeIdx {
		n.matches = append(n.matches, 0)
	}
	switch n.matches[nodeIdx] {
	case 1:
		return true
	case 2:
		return false
	}
	ok := n.sel.Match(node)
	n.matches[nodeIdx] = 2
	if ok {
		n.matches[nodeIdx] = 1
	}
	return ok
}

// reachable reports whether device d can be used from node nodeIdx.
func (s *Session) reachable(d int32, nodeIdx int) bool {
	dev := &s.devs[d]
	switch {
	case dev.node != "":
		return nodeIdx >= 0 && int(dev.nodeIdx) == nodeIdx
	case dev.allNodes:
		return true
	case dev.sel >= 0:
		return nodeIdx >= 0 && s.nodeSels[dev.sel].match(nodeIdx, s.nodes[nodeIdx])
	}
	return false
}

func metaName(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name} }

// declaresNodeOps reports whether node ni declares the
// DRAOptionalNodeOperations feature in status.declaredFeatures, which
// kube-scheduler requires for devices whose slice skips node operations.
func (s *Session) declaresNodeOps(ni int) bool {
	return slices.Contains(s.nodes[ni].Status.DeclaredFeatures, draoptionalnodeoperations.DRAOptionalNodeOperationsFeatureGate)
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}
