package placement

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Candidates returns the nodes pod fits, sorted by name so that the same
// cluster gives the same order (the caller tries them in turn and a retry
// must not wander), and for every other node the reason it does not fit,
// keyed by node name. podsByNode maps a node name to the pods that count
// against it (see Fits). Nil nodes are skipped; the inputs are not modified.
func Candidates(pod *corev1.Pod, nodes []*corev1.Node, podsByNode map[string][]*corev1.Pod) (fit []*corev1.Node, reasons map[string]string) {
	reasons = map[string]string{}
	for _, n := range nodes {
		if n == nil {
			continue
		}
		if ok, why := Fits(pod, n, podsByNode[n.Name]); ok {
			fit = append(fit, n)
		} else {
			reasons[n.Name] = why
		}
	}
	slices.SortFunc(fit, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	return fit, reasons
}

// Summary words the outcome of Candidates the way kube-scheduler's
// FailedScheduling event does, for the operator's Events: "0/5 nodes are
// available: 2 Insufficient cpu, 3 node(s) were unschedulable." Reasons are
// counted (a node failing several resources counts once per resource) and
// listed alphabetically.
func Summary(total int, reasons map[string]string) string {
	count := map[string]int{}
	for _, r := range reasons {
		for _, part := range strings.Split(r, ", ") {
			count[part]++
		}
	}
	parts := make([]string, 0, len(count))
	for _, r := range slices.Sorted(maps.Keys(count)) {
		parts = append(parts, fmt.Sprintf("%d %s", count[r], r))
	}
	msg := fmt.Sprintf("%d/%d nodes are available", total-len(reasons), total)
	if len(parts) == 0 {
		return msg + "."
	}
	return msg + ": " + strings.Join(parts, ", ") + "."
}
