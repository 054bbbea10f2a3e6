package placement

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestCandidates(t *testing.T) {
	nodes := []*corev1.Node{
		node("n3"),
		node("n1", labelled("zone", "a")),
		nil,
		node("n2", cordoned),
		node("n4", labelled("zone", "a")),
		node("n0", tainted("dedicated", "db", corev1.TaintEffectNoSchedule)),
	}
	busy := map[string][]*corev1.Pod{"n4": {pod("big", "4", "1Gi")}}
	tests := []struct {
		name        string
		pod         *corev1.Pod
		podsByNode  map[string][]*corev1.Pod
		wantFit     []string
		wantReasons map[string]string
		wantSummary string
	}{
		{
			name:    "fitting nodes come sorted by name, whatever the input order",
			pod:     pod("p", "1", "1Gi"),
			wantFit: []string{"n1", "n3", "n4"},
			wantReasons: map[string]string{
				"n0": "node(s) had untolerated taint {dedicated: db}",
				"n2": ReasonUnschedulable,
			},
			wantSummary: "3/5 nodes are available: 1 node(s) had untolerated taint {dedicated: db}, 1 node(s) were unschedulable.",
		},
		{
			name:       "the pod's nodeSelector and the pods on each node narrow it down",
			pod:        pod("p", "1", "1Gi", selecting("zone", "a")),
			podsByNode: busy,
			wantFit:    []string{"n1"},
			wantReasons: map[string]string{
				"n0": "node(s) had untolerated taint {dedicated: db}",
				"n2": ReasonUnschedulable,
				"n3": ReasonAffinity,
				"n4": "Insufficient cpu",
			},
			wantSummary: "1/5 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint {dedicated: db}, 1 node(s) were unschedulable.",
		},
		{
			name:    "no node fits",
			pod:     pod("p", "64", "1Gi"),
			wantFit: nil,
			wantReasons: map[string]string{
				"n0": "node(s) had untolerated taint {dedicated: db}",
				"n1": "Insufficient cpu",
				"n2": ReasonUnschedulable,
				"n3": "Insufficient cpu",
				"n4": "Insufficient cpu",
			},
			wantSummary: "0/5 nodes are available: 3 Insufficient cpu, 1 node(s) had untolerated taint {dedicated: db}, 1 node(s) were unschedulable.",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fit, reasons := Candidates(tc.pod, nodes, tc.podsByNode)
			var names []string
			for _, n := range fit {
				names = append(names, n.Name)
			}
			if !reflect.DeepEqual(names, tc.wantFit) {
				t.Errorf("fit = %v, want %v", names, tc.wantFit)
			}
			if !reflect.DeepEqual(reasons, tc.wantReasons) {
				t.Errorf("reasons = %v, want %v", reasons, tc.wantReasons)
			}
			if got := Summary(5, reasons); got != tc.wantSummary {
				t.Errorf("Summary = %q\nwant      %q", got, tc.wantSummary)
			}
		})
	}
}

func TestSummary(t *testing.T) {
	tests := []struct {
		name    string
		total   int
		reasons map[string]string
		want    string
	}{
		{name: "no nodes", total: 0, want: "0/0 nodes are available."},
		{name: "all fit", total: 2, reasons: map[string]string{}, want: "2/2 nodes are available."},
		{
			name: "a node short of several resources counts once per resource", total: 2,
			reasons: map[string]string{"a": "Insufficient cpu, Insufficient memory", "b": "Insufficient cpu"},
			want:    "0/2 nodes are available: 2 Insufficient cpu, 1 Insufficient memory.",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Summary(tc.total, tc.reasons); got != tc.want {
				t.Errorf("Summary = %q, want %q", got, tc.want)
			}
		})
	}
}
