package placement

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func hostsSelector(hosts ...string) *corev1.NodeSelector {
	return &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
		Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: hosts,
	}}}}}
}

func TestNeedsPin(t *testing.T) {
	fits := []*corev1.Node{node("a"), node("b"), node("c")}
	for _, tc := range []struct {
		name      string
		fits      []*corev1.Node
		selectors []*corev1.NodeSelector
		want      bool
	}{
		{"a node-local device pins the pod", fits, []*corev1.NodeSelector{hostsSelector("a")}, false},
		{"a multi-host device leaves two hosts the pod fits", fits, []*corev1.NodeSelector{hostsSelector("a", "b")}, true},
		{"two claims whose hosts meet only on a", fits, []*corev1.NodeSelector{hostsSelector("a", "b"), hostsSelector("a", "c")}, false},
		{"the other host does not fit the pod", []*corev1.Node{node("a")}, []*corev1.NodeSelector{hostsSelector("a", "b")}, false},
		{"no selector (devices of every node)", fits, []*corev1.NodeSelector{nil}, true},
		{"no claims with devices", fits, nil, true},
		{"a selector that does not parse", fits, []*corev1.NodeSelector{{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "k", Operator: "Bad"}}}}}}, true},
	} {
		if got := NeedsPin("a", tc.fits, tc.selectors); got != tc.want {
			t.Errorf("%s: NeedsPin = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestPinToNode(t *testing.T) {
	unlabelled := node("bare", labelled("zone", "a"))
	delete(unlabelled.Labels, HostnameLabel)
	other := node("host-b", labelled(HostnameLabel, "b.example"))
	withTerms := func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}},
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}}},
			},
		}}}
	}
	byName := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"bare"}}
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		node    *corev1.Node
		changed bool
		check   func(*corev1.Pod) string
		wantErr string
	}{
		{name: "the host name label goes into the node selector", pod: pod("p", "1", ""), node: other, changed: true,
			check: func(p *corev1.Pod) string {
				if p.Spec.NodeSelector[HostnameLabel] != "b.example" {
					return "nodeSelector " + p.Spec.NodeSelector[HostnameLabel]
				}
				return ""
			}},
		{name: "already pinned there", pod: pod("p", "1", "", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{HostnameLabel: "b.example"} }), node: other},
		{name: "pinned elsewhere", pod: pod("p", "1", "", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{HostnameLabel: "c"} }), node: other,
			wantErr: `spec.nodeSelector[kubernetes.io/hostname] is "c", not node host-b's "b.example"`},
		{name: "a node without the label: a field requirement", pod: pod("p", "1", ""), node: unlabelled, changed: true,
			check: func(p *corev1.Pod) string {
				terms := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
				if len(terms) != 1 || !reflect.DeepEqual(terms[0].MatchFields, []corev1.NodeSelectorRequirement{byName}) {
					return "terms " + terms[0].String()
				}
				return ""
			}},
		{name: "ORed terms each get the requirement (narrowing, as a gated pod allows)", pod: pod("p", "1", "", withTerms), node: unlabelled, changed: true,
			check: func(p *corev1.Pod) string {
				for _, term := range p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
					if len(term.MatchExpressions) != 1 || !reflect.DeepEqual(term.MatchFields, []corev1.NodeSelectorRequirement{byName}) {
						return "term " + term.String()
					}
				}
				return ""
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.pod.DeepCopy()
			got, changed, err := PinToNode(tc.pod, tc.node)
			if !reflect.DeepEqual(before, tc.pod) {
				t.Error("the input pod was modified")
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if changed != tc.changed {
				t.Errorf("changed = %v, want %v", changed, tc.changed)
			}
			if tc.check != nil {
				if msg := tc.check(got); msg != "" {
					t.Error(msg)
				}
			}
			if ok, why := Fits(got, tc.node, nil); !ok {
				t.Errorf("the pinned pod does not fit its node: %s", why)
			}
			if tc.changed {
				if ok, _ := Fits(got, node("elsewhere", labelled("zone", "a")), nil); ok {
					t.Error("the pinned pod still fits another node")
				}
			}
		})
	}
}

func TestTogether(t *testing.T) {
	a, b := node("a"), node("b") // 4 cpu each
	running := pod("running", "1", "")
	pods := []*corev1.Pod{pod("m0", "2", ""), pod("m1", "2", ""), pod("m2", "1", "")}
	for _, tc := range []struct {
		name   string
		nodes  []*corev1.Node
		byNode map[string][]*corev1.Pod
		want   int
		why    string
	}{
		{"spread over two nodes", []*corev1.Node{a, b, a}, nil, -1, ""},
		{"two members fill a, the third does not fit", []*corev1.Node{a, a, a}, nil, 2, "Insufficient cpu"},
		{"with a pod already running on a", []*corev1.Node{a, a, b}, map[string][]*corev1.Pod{"a": {running}}, 1, "Insufficient cpu"},
		{"a member without a node is skipped", []*corev1.Node{a, nil, a}, nil, -1, ""},
	} {
		got, why := Together(pods, tc.nodes, tc.byNode)
		if got != tc.want || !strings.Contains(why, tc.why) {
			t.Errorf("%s: Together = %d %q, want %d %q", tc.name, got, why, tc.want, tc.why)
		}
	}
}
