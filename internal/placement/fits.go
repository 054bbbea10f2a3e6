package placement

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// Reasons, worded as kube-scheduler's Filter plugins word them, so an Event
// from the operator reads like a FailedScheduling event.
const (
	// ReasonUnschedulable is NodeUnschedulable's: the node is cordoned and
	// the pod does not tolerate node.kubernetes.io/unschedulable.
	ReasonUnschedulable = "node(s) were unschedulable"
	// ReasonNodeName is NodeName's: the pod names another node.
	ReasonNodeName = "node(s) didn't match the requested node name"
	// ReasonAffinity is NodeAffinity's: nodeSelector or required node
	// affinity do not match.
	ReasonAffinity = "node(s) didn't match Pod's node affinity/selector"
	// ReasonTooManyPods is NodeResourcesFit's when the node runs as many
	// pods as its allocatable pods allow.
	ReasonTooManyPods = "Too many pods"
)

// comparisonOperators enables the Gt and Lt toleration operators. The API
// server refuses them unless the cluster enables them, so any toleration
// that uses them is meant to work.
const comparisonOperators = true

// resourceOptions are kube-scheduler's: requests of bound pods count what
// the kubelet actually allocated after an in-place resize, which may be more
// than the spec says.
var resourceOptions = resourcehelper.PodResourcesOptions{UseStatusResources: true}

// Fits says whether pod fits node next to podsOnNode, and if not, why, in
// kube-scheduler's words. Like kube-scheduler it stops at the first filter
// that fails; only the resource filter lists every missing resource.
//
// podsOnNode are the pods that count against the node's allocatable: the
// pods bound to it, and any the caller has placed there but kube-scheduler
// has not bound yet. Terminated pods (Succeeded or Failed) and pod itself
// (same UID) are ignored, so a pod being placed again does not count twice.
func Fits(pod *corev1.Pod, node *corev1.Node, podsOnNode []*corev1.Pod) (bool, string) {
	for _, filter := range []func(*corev1.Pod, *corev1.Node, []*corev1.Pod) string{
		unschedulable, nodeName, taints, affinity, resources,
	} {
		if reason := filter(pod, node, podsOnNode); reason != "" {
			return false, reason
		}
	}
	return true, ""
}

// unschedulable is NodeUnschedulable: a cordoned node accepts only pods
// that tolerate the taint the node lifecycle would put there.
func unschedulable(pod *corev1.Pod, node *corev1.Node, _ []*corev1.Pod) string {
	if !node.Spec.Unschedulable {
		return ""
	}
	cordon := corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}
	if corev1helpers.TolerationsTolerateTaint(klog.Background(), pod.Spec.Tolerations, &cordon, comparisonOperators) {
		return ""
	}
	return ReasonUnschedulable
}

// nodeName is NodeName: a pod that names its node fits no other.
func nodeName(pod *corev1.Pod, node *corev1.Node, _ []*corev1.Pod) string {
	if pod.Spec.NodeName != "" && pod.Spec.NodeName != node.Name {
		return ReasonNodeName
	}
	return ""
}

// taints is TaintToleration: every NoSchedule and NoExecute node taint must
// be tolerated; PreferNoSchedule only affects scoring.
func taints(pod *corev1.Pod, node *corev1.Node, _ []*corev1.Pod) string {
	hard := func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}
	taint, found := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations, hard, comparisonOperators)
	if !found {
		return ""
	}
	return fmt.Sprintf("node(s) had untolerated taint {%s: %s}", taint.Key, taint.Value)
}

// affinity is NodeAffinity's filter: nodeSelector and the required terms
// of node affinity (preferred terms only score). A term that does not parse
// fails the node with the parse error, as kube-scheduler does.
func affinity(pod *corev1.Pod, node *corev1.Node, _ []*corev1.Pod) string {
	ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)
	if err != nil {
		return err.Error()
	}
	if !ok {
		return ReasonAffinity
	}
	return ""
}

// resources is NodeResourcesFit for cpu, memory and the pod count: what
// the pod requests must fit in the node's allocatable minus what the other
// pods there request. A resource the pod does not request never fails it.
func resources(pod *corev1.Pod, node *corev1.Node, podsOnNode []*corev1.Pod) string {
	var reasons []string
	counted := 0
	used := corev1.ResourceList{}
	for _, p := range podsOnNode {
		if p == nil || terminated(p) || (pod.UID != "" && p.UID == pod.UID) {
			continue
		}
		counted++
		for name, q := range resourcehelper.PodRequests(p, resourceOptions) {
			add(used, name, q)
		}
	}
	// A node that states no allocatable pods takes none, as in kube-scheduler.
	if allowed := node.Status.Allocatable[corev1.ResourcePods]; int64(counted)+1 > allowed.Value() {
		reasons = append(reasons, ReasonTooManyPods)
	}
	want := resourcehelper.PodRequests(pod, resourceOptions)
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		q, ok := want[name]
		if !ok || q.IsZero() {
			continue
		}
		free := node.Status.Allocatable[name].DeepCopy()
		free.Sub(used[name])
		if q.Cmp(free) > 0 {
			reasons = append(reasons, "Insufficient "+string(name))
		}
	}
	return strings.Join(reasons, ", ")
}

// terminated pods hold no resources: kube-scheduler drops them from a
// node's accounting.
func terminated(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// add adds q to list[name].
func add(list corev1.ResourceList, name corev1.ResourceName, q resource.Quantity) {
	sum := list[name].DeepCopy()
	sum.Add(q)
	list[name] = sum
}
