package placement

import (
	corev1 "k8s.io/api/core/v1"
)

// Together checks that pods placed at once still fit their nodes when
// they run side by side: Candidates judges each pod alone, next to the
// pods already there, so two pods of one gang placed on one node could
// together ask for more cpu, memory or pods than it has. nodes[i] is the
// node chosen for pods[i] (nil: the pod needs none and is skipped);
// podsByNode are the pods that count against each node already, as for
// Candidates. It returns the index of the first pod that does not fit
// beside the pods before it on its node, with the reason, or -1.
func Together(pods []*corev1.Pod, nodes []*corev1.Node, podsByNode map[string][]*corev1.Pod) (int, string) {
	added := map[string][]*corev1.Pod{}
	for i, p := range pods {
		n := nodes[i]
		if n == nil {
			continue
		}
		others := append(append([]*corev1.Pod(nil), podsByNode[n.Name]...), added[n.Name]...)
		if ok, why := Fits(p, n, others); !ok {
			return i, why
		}
		added[n.Name] = append(added[n.Name], p)
	}
	return -1, ""
}
