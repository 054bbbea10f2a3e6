package placement

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// node is a Ready node with 4 cpu, 8Gi and 110 pods allocatable, changed by opts.
func node(name string, opts ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("4"),
			corev1.ResourceMemory: resource.MustParse("8Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}},
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

func cordoned(n *corev1.Node) { n.Spec.Unschedulable = true }

func tainted(key, value string, effect corev1.TaintEffect) func(*corev1.Node) {
	return func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Value: value, Effect: effect})
	}
}

func labelled(k, v string) func(*corev1.Node) {
	return func(n *corev1.Node) { n.Labels[k] = v }
}

func allocatable(name corev1.ResourceName, q string) func(*corev1.Node) {
	return func(n *corev1.Node) {
		if q == "" {
			delete(n.Status.Allocatable, name)
			return
		}
		n.Status.Allocatable[name] = resource.MustParse(q)
	}
}

// pod has one container requesting cpu and memory ("" requests nothing).
func pod(name, cpu, mem string, opts ...func(*corev1.Pod)) *corev1.Pod {
	req := corev1.ResourceList{}
	if cpu != "" {
		req[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		req[corev1.ResourceMemory] = resource.MustParse(mem)
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "c", Resources: corev1.ResourceRequirements{Requests: req},
		}}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func tolerating(t corev1.Toleration) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.Tolerations = append(p.Spec.Tolerations, t) }
}

func selecting(k, v string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		if p.Spec.NodeSelector == nil {
			p.Spec.NodeSelector = map[string]string{}
		}
		p.Spec.NodeSelector[k] = v
	}
}

func requiring(terms ...corev1.NodeSelectorTerm) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms},
		}}
	}
}

func phase(ph corev1.PodPhase) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Status.Phase = ph }
}

func TestFits(t *testing.T) {
	in := func(key string, values ...string) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
			Key: key, Operator: corev1.NodeSelectorOpIn, Values: values,
		}}}
	}
	tests := []struct {
		name   string
		pod    *corev1.Pod
		node   *corev1.Node
		others []*corev1.Pod
		want   string // "" means fits
	}{
		{name: "a plain pod fits an empty node", pod: pod("p", "1", "1Gi"), node: node("n")},

		// NodeUnschedulable
		{name: "a cordoned node is refused", pod: pod("p", "1", "1Gi"), node: node("n", cordoned), want: ReasonUnschedulable},
		{
			name: "a cordoned node takes a pod tolerating node.kubernetes.io/unschedulable",
			pod: pod("p", "1", "1Gi", tolerating(corev1.Toleration{
				Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule,
			})),
			node: node("n", cordoned),
		},
		{
			name: "a pod tolerating everything (DaemonSet style) fits a cordoned node",
			pod:  pod("p", "1", "1Gi", tolerating(corev1.Toleration{Operator: corev1.TolerationOpExists})),
			node: node("n", cordoned),
		},
		{
			name: "cordoning is checked before taints, as kube-scheduler orders its filters",
			pod:  pod("p", "1", "1Gi"),
			node: node("n", cordoned, tainted("gpu", "true", corev1.TaintEffectNoSchedule)),
			want: ReasonUnschedulable,
		},

		// NodeName
		{
			name: "a pod naming another node does not fit",
			pod:  pod("p", "", "", func(p *corev1.Pod) { p.Spec.NodeName = "m" }),
			node: node("n"), want: ReasonNodeName,
		},

		// TaintToleration
		{
			name: "a NoSchedule taint keeps an intolerant pod off",
			pod:  pod("p", "1", "1Gi"), node: node("n", tainted("dedicated", "ml", corev1.TaintEffectNoSchedule)),
			want: "node(s) had untolerated taint {dedicated: ml}",
		},
		{
			name: "a NoExecute taint keeps an intolerant pod off",
			pod:  pod("p", "1", "1Gi"), node: node("n", tainted("node.kubernetes.io/not-ready", "", corev1.TaintEffectNoExecute)),
			want: "node(s) had untolerated taint {node.kubernetes.io/not-ready: }",
		},
		{
			name: "a PreferNoSchedule taint only affects scoring",
			pod:  pod("p", "1", "1Gi"), node: node("n", tainted("dedicated", "ml", corev1.TaintEffectPreferNoSchedule)),
		},
		{
			name: "an Equal toleration with the taint's value fits",
			pod: pod("p", "1", "1Gi", tolerating(corev1.Toleration{
				Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "ml", Effect: corev1.TaintEffectNoSchedule,
			})),
			node: node("n", tainted("dedicated", "ml", corev1.TaintEffectNoSchedule)),
		},
		{
			name: "a toleration with another value does not",
			pod: pod("p", "1", "1Gi", tolerating(corev1.Toleration{
				Key: "dedicated", Value: "web", Effect: corev1.TaintEffectNoSchedule,
			})),
			node: node("n", tainted("dedicated", "ml", corev1.TaintEffectNoSchedule)),
			want: "node(s) had untolerated taint {dedicated: ml}",
		},
		{
			name: "a toleration for NoSchedule does not tolerate NoExecute",
			pod: pod("p", "1", "1Gi", tolerating(corev1.Toleration{
				Key: "dedicated", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule,
			})),
			node: node("n", tainted("dedicated", "ml", corev1.TaintEffectNoExecute)),
			want: "node(s) had untolerated taint {dedicated: ml}",
		},
		{
			name: "every hard taint must be tolerated; the first untolerated one is named",
			pod: pod("p", "1", "1Gi", tolerating(corev1.Toleration{
				Key: "a", Operator: corev1.TolerationOpExists,
			})),
			node: node("n", tainted("a", "1", corev1.TaintEffectNoSchedule), tainted("b", "2", corev1.TaintEffectNoSchedule)),
			want: "node(s) had untolerated taint {b: 2}",
		},
		{
			name: "an Lt toleration compares numerically (taint 50 < 90)",
			pod: pod("p", "1", "1Gi", tolerating(corev1.Toleration{
				Key: "reliability", Operator: corev1.TolerationOpLt, Value: "90", Effect: corev1.TaintEffectNoSchedule,
			})),
			node: node("n", tainted("reliability", "50", corev1.TaintEffectNoSchedule)),
		},

		// NodeAffinity
		{name: "nodeSelector matches", pod: pod("p", "1", "1Gi", selecting("zone", "a")), node: node("n", labelled("zone", "a"))},
		{name: "nodeSelector does not match", pod: pod("p", "1", "1Gi", selecting("zone", "a")), node: node("n", labelled("zone", "b")), want: ReasonAffinity},
		{name: "nodeSelector on a missing label", pod: pod("p", "1", "1Gi", selecting("zone", "a")), node: node("n"), want: ReasonAffinity},
		{name: "required affinity matches", pod: pod("p", "1", "1Gi", requiring(in("zone", "a", "b"))), node: node("n", labelled("zone", "b"))},
		{name: "required affinity does not match", pod: pod("p", "1", "1Gi", requiring(in("zone", "a"))), node: node("n", labelled("zone", "c")), want: ReasonAffinity},
		{
			name: "required affinity terms are ORed",
			pod:  pod("p", "1", "1Gi", requiring(in("zone", "a"), in("kubernetes.io/hostname", "n"))),
			node: node("n", labelled("zone", "c")),
		},
		{
			name: "nodeSelector and affinity must both match",
			pod:  pod("p", "1", "1Gi", selecting("gpu", "yes"), requiring(in("zone", "a"))),
			node: node("n", labelled("zone", "a")), want: ReasonAffinity,
		},
		{
			name: "matchFields on metadata.name",
			pod: pod("p", "1", "1Gi", requiring(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{
				Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"m"},
			}}})),
			node: node("n"), want: ReasonAffinity,
		},
		{
			name: "preferred affinity is not a filter",
			pod: pod("p", "1", "1Gi", func(p *corev1.Pod) {
				p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
					PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 1, Preference: in("zone", "a")}},
				}}
			}),
			node: node("n", labelled("zone", "b")),
		},

		// NodeResourcesFit
		{name: "cpu exactly fills the node", pod: pod("p", "4", "1Gi"), node: node("n")},
		{name: "cpu beyond allocatable", pod: pod("p", "4100m", "1Gi"), node: node("n"), want: "Insufficient cpu"},
		{name: "memory beyond allocatable", pod: pod("p", "1", "9Gi"), node: node("n"), want: "Insufficient memory"},
		{name: "both are listed", pod: pod("p", "5", "9Gi"), node: node("n"), want: "Insufficient cpu, Insufficient memory"},
		{
			name:   "requests of pods on the node count",
			pod:    pod("p", "2", "1Gi"),
			node:   node("n"),
			others: []*corev1.Pod{pod("a", "1", "1Gi"), pod("b", "1500m", "1Gi")},
			want:   "Insufficient cpu",
		},
		{
			name:   "terminated pods on the node do not count",
			pod:    pod("p", "2", "1Gi"),
			node:   node("n"),
			others: []*corev1.Pod{pod("a", "3", "1Gi", phase(corev1.PodSucceeded)), pod("b", "3", "1Gi", phase(corev1.PodFailed)), pod("c", "2", "1Gi", phase(corev1.PodRunning))},
		},
		{
			name:   "the pod itself in the list is not counted twice",
			pod:    pod("p", "3", "1Gi"),
			node:   node("n"),
			others: []*corev1.Pod{pod("p", "3", "1Gi")},
		},
		{
			name: "init containers count by their maximum",
			pod: pod("p", "1", "1Gi", func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("5")},
				}}}
			}),
			node: node("n"), want: "Insufficient cpu",
		},
		{
			name: "pod overhead counts",
			pod: pod("p", "3500m", "1Gi", func(p *corev1.Pod) {
				p.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("600m")}
			}),
			node: node("n"), want: "Insufficient cpu",
		},
		{
			name: "a pod that requests nothing fits a full node",
			pod:  pod("p", "", ""), node: node("n"),
			others: []*corev1.Pod{pod("a", "4", "8Gi")},
		},
		{
			name: "a node without allocatable cpu refuses a pod requesting cpu",
			pod:  pod("p", "100m", ""), node: node("n", allocatable(corev1.ResourceCPU, "")),
			want: "Insufficient cpu",
		},
		{
			name:   "the pod count is a resource too",
			pod:    pod("p", "", ""),
			node:   node("n", allocatable(corev1.ResourcePods, "2")),
			others: []*corev1.Pod{pod("a", "", ""), pod("b", "", "")},
			want:   ReasonTooManyPods,
		},
		{
			name:   "terminated pods free their pod slot",
			pod:    pod("p", "", ""),
			node:   node("n", allocatable(corev1.ResourcePods, "2")),
			others: []*corev1.Pod{pod("a", "", ""), pod("b", "", "", phase(corev1.PodSucceeded))},
		},
		{
			name: "a node that states no allocatable pods takes none, as in kube-scheduler",
			pod:  pod("p", "", ""), node: node("n", allocatable(corev1.ResourcePods, "")),
			want: ReasonTooManyPods,
		},
		{
			name: "filters stop at the first failure: affinity before resources",
			pod:  pod("p", "9", "1Gi", selecting("zone", "a")), node: node("n"),
			want: ReasonAffinity,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			podBefore, nodeBefore := tc.pod.DeepCopy(), tc.node.DeepCopy()
			ok, reason := Fits(tc.pod, tc.node, tc.others)
			if ok != (tc.want == "") || reason != tc.want {
				t.Errorf("Fits = %v, %q; want %v, %q", ok, reason, tc.want == "", tc.want)
			}
			if tc.pod.String() != podBefore.String() || tc.node.String() != nodeBefore.String() {
				t.Error("Fits modified its inputs")
			}
		})
	}
}
