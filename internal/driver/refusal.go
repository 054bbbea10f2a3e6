package driver

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// NodeFacts is what a profile's placement needs to know about one node:
// its name, its labels, and which of the extended resources the profile
// asked about (NodeResources) the node has capacity for. The controller
// passes only nodes that have at least one of them.
type NodeFacts struct {
	Name      string
	Labels    map[string]string
	Resources []string
}

// Refusal is the set of nodes a profile keeps its kubelet plugin off,
// although the node selector and the profile's node affinity pick them.
type Refusal struct {
	// Nodes are the refused nodes, sorted.
	Nodes []string
	// Why says what runs there that the plugin would collide with.
	Why string
	// Remedy says how the spec can let the plugin run there.
	Remedy string
}

// refuseNodes keeps the plugin pod off the nodes the profile refuses:
// of the nodes given, those the pod would otherwise be placed on (its node
// selector and required node affinity, as the DaemonSet controller reads
// them) get a metadata.name NotIn requirement in every required node
// affinity term (terms are ORed, so each must exclude them).
func refuseNodes(prof Profile, spec *v1alpha1.DriverSpec, nodes []NodeFacts, pod *corev1.PodSpec) *Refusal {
	r, ok := prof.(nodeRefuser)
	if !ok || len(nodes) == 0 {
		return nil
	}
	selector := labels.SelectorFromSet(pod.NodeSelector)
	var required *nodeaffinity.LazyErrorNodeSelector
	if a := pod.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		required = nodeaffinity.NewLazyErrorNodeSelector(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution)
	}
	var placed []NodeFacts
	for _, n := range nodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels}}
		if !selector.Matches(labels.Set(n.Labels)) {
			continue
		}
		if required != nil {
			if ok, _ := required.Match(node); !ok {
				continue
			}
		}
		placed = append(placed, n)
	}
	refusal := r.refuse(spec, placed)
	if refusal == nil || len(refusal.Nodes) == 0 {
		return nil
	}
	slices.Sort(refusal.Nodes)
	refusal.Nodes = slices.Compact(refusal.Nodes)
	excludeNodes(pod, refusal.Nodes)
	return refusal
}

// excludeNodes adds metadata.name NotIn nodes to every required node
// affinity term of the pod, or a term with only that when it has none.
func excludeNodes(pod *corev1.PodSpec, nodes []string) {
	notIn := corev1.NodeSelectorRequirement{Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpNotIn, Values: slices.Clone(nodes)}
	if pod.Affinity == nil {
		pod.Affinity = &corev1.Affinity{}
	}
	if pod.Affinity.NodeAffinity == nil {
		pod.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := pod.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil || len(na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 0 {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{}}}
	}
	terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for i := range terms {
		terms[i].MatchFields = append(terms[i].MatchFields, *notIn.DeepCopy())
	}
}
