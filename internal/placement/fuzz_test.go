package placement

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// FuzzFits feeds arbitrary affinity requirements, taints, tolerations and
// quantities (API data the operator reads from any user's pod) through
// Fits: it must never panic, and a refusal always has a reason.
func FuzzFits(f *testing.F) {
	f.Add("zone", "In", "a", "dedicated", "ml", "Equal", "ml", "500m", "1Gi", "4")
	f.Add("metadata.name", "NotIn", "", "", "", "Gt", "x", "-1", "0", "0")
	f.Add("k", "Lt", "10", "k", "9", "Lt", "10", "1e3", "1Ei", "abc")
	f.Fuzz(func(t *testing.T, key, op, value, taintKey, taintValue, tolOp, tolValue, cpu, mem, nodeCPU string) {
		p := pod("p", "", "")
		if q, err := resource.ParseQuantity(cpu); err == nil {
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = q
		}
		if q, err := resource.ParseQuantity(mem); err == nil {
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = q
		}
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOperator(op), Values: []string{value}}}},
				{MatchFields: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOperator(op), Values: []string{value}}}},
			}},
		}}
		p.Spec.Tolerations = []corev1.Toleration{{Key: taintKey, Operator: corev1.TolerationOperator(tolOp), Value: tolValue}}
		n := node("n", tainted(taintKey, taintValue, corev1.TaintEffectNoSchedule), labelled("zone", value))
		if q, err := resource.ParseQuantity(nodeCPU); err == nil {
			n.Status.Allocatable[corev1.ResourceCPU] = q
		}
		ok, reason := Fits(p, n, []*corev1.Pod{pod("other", "", "")})
		if !ok && reason == "" {
			t.Fatal("refused without a reason")
		}
		if ok && reason != "" {
			t.Fatalf("fits with a reason %q", reason)
		}
	})
}

// FuzzPinToNode: whatever a pod's node affinity and selector say (API data
// of any user), pinning it never panics, and a pod pinned to a node still
// fits that node's labels and fields exactly when it did before, and fits
// no other node.
func FuzzPinToNode(f *testing.F) {
	f.Add("zone", "In", "a", "host-a", true)
	f.Add("metadata.name", "NotIn", "n", "", false)
	f.Add("k", "Exists", "", "x", true)
	f.Fuzz(func(t *testing.T, key, op, value, host string, labelled bool) {
		p := pod("p", "", "")
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOperator(op), Values: []string{value}}}},
			}},
		}}
		n := node("n")
		n.Labels[key] = value
		if labelled {
			n.Labels[HostnameLabel] = host
		} else {
			delete(n.Labels, HostnameLabel)
		}
		before, _ := Fits(p, n, nil)
		pinned, _, err := PinToNode(p, n)
		if err != nil {
			return
		}
		after, why := Fits(pinned, n, nil)
		if before != after {
			t.Fatalf("pinning changed whether the pod fits its node: %v -> %v (%s)", before, after, why)
		}
		other := node("other-node")
		other.Labels[key] = value
		if labelled {
			other.Labels[HostnameLabel] = host + "-other"
		} else {
			delete(other.Labels, HostnameLabel)
		}
		if ok, _ := Fits(pinned, other, nil); ok {
			t.Fatal("the pinned pod fits another node")
		}
		_ = NeedsPin(n.Name, []*corev1.Node{n, other}, []*corev1.NodeSelector{pinned.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution})
	})
}
