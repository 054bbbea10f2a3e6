package gang

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

func pod(labels, annotations map[string]string, group string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "worker-0", Labels: labels, Annotations: annotations}}
	if group != "" {
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(group)}
	}
	return p
}

func podGroup(name string, minCount int32, topology ...string) *schedulingv1beta1.PodGroup {
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	if minCount > 0 {
		pg.Spec.SchedulingPolicy.Gang = &schedulingv1beta1.GangSchedulingPolicy{MinCount: minCount}
	} else {
		pg.Spec.SchedulingPolicy.Basic = &schedulingv1beta1.BasicSchedulingPolicy{}
	}
	if len(topology) > 0 {
		pg.Spec.SchedulingConstraints = &schedulingv1beta1.PodGroupSchedulingConstraints{}
		for _, k := range topology {
			pg.Spec.SchedulingConstraints.Topology = append(pg.Spec.SchedulingConstraints.Topology, schedulingv1beta1.TopologyConstraint{Key: k})
		}
	}
	return pg
}

func TestOf(t *testing.T) {
	rack := allocator.GangConstraint{NodeLabel: "topology.kubernetes.io/rack"}
	clique := allocator.GangConstraint{MatchAttribute: "gpu.nvidia.com/cliqueID"}
	tests := []struct {
		name    string
		pod     *corev1.Pod
		pg      *schedulingv1beta1.PodGroup
		want    Spec
		ok      bool
		wantErr string
	}{
		{name: "no gang", pod: pod(nil, nil, ""), ok: false},
		{
			name: "a PodGroup with the gang policy and a topology constraint",
			pod:  pod(nil, nil, "train"), pg: podGroup("train", 4, "topology.kubernetes.io/rack"),
			want: Spec{Namespace: "ns", Name: "train", Source: SourcePodGroup, MinCount: 4, Constraints: []allocator.GangConstraint{rack}}, ok: true,
		},
		{
			name: "the PodGroup decides membership; the label is ignored, the attribute annotation added",
			pod:  pod(map[string]string{LabelName: "other"}, map[string]string{AnnotationMinCount: "9", AnnotationMatchAttribute: "gpu.nvidia.com/cliqueID"}, "train"),
			pg:   podGroup("train", 2),
			want: Spec{Namespace: "ns", Name: "train", Source: SourcePodGroup, MinCount: 2, Constraints: []allocator.GangConstraint{clique}}, ok: true,
		},
		{name: "a PodGroup with the basic policy is no gang", pod: pod(nil, nil, "web"), pg: podGroup("web", 0), ok: false},
		{name: "a PodGroup that does not exist yet: wait", pod: pod(map[string]string{LabelName: "g"}, nil, "train"), ok: false},
		{name: "another PodGroup than the pod's", pod: pod(nil, nil, "train"), pg: podGroup("eval", 2), ok: false},
		{
			name: "the drastack label with every annotation",
			pod: pod(map[string]string{LabelName: "job-7"}, map[string]string{
				AnnotationMinCount: " 8 ", AnnotationTopologyKey: "topology.kubernetes.io/rack", AnnotationMatchAttribute: "gpu.nvidia.com/cliqueID",
			}, ""),
			want: Spec{Namespace: "ns", Name: "job-7", Source: SourceLabel, MinCount: 8, Constraints: []allocator.GangConstraint{rack, clique}}, ok: true,
		},
		{
			name: "the label alone: one pod is enough",
			pod:  pod(map[string]string{LabelName: "job-7"}, nil, ""),
			want: Spec{Namespace: "ns", Name: "job-7", Source: SourceLabel, MinCount: 1}, ok: true,
		},
		{name: "bad minimum count", pod: pod(map[string]string{LabelName: "g"}, map[string]string{AnnotationMinCount: "0"}, ""), wantErr: "pod ns/worker-0: metadata.annotations[resource.drastack.io/gang-min-count]: \"0\" is not a positive integer"},
		{name: "bad topology key", pod: pod(map[string]string{LabelName: "g"}, map[string]string{AnnotationTopologyKey: "no spaces"}, ""), wantErr: "metadata.annotations[resource.drastack.io/gang-topology-key]: \"no spaces\" is not a label key"},
		{name: "attribute without domain", pod: pod(map[string]string{LabelName: "g"}, map[string]string{AnnotationMatchAttribute: "cliqueID"}, ""), wantErr: "is not a fully qualified attribute name"},
		{name: "empty gang name", pod: pod(map[string]string{LabelName: ""}, nil, ""), wantErr: "metadata.labels[resource.drastack.io/gang]: must name the gang"},
		{name: "PodGroup with a bad topology key", pod: pod(nil, nil, "train"), pg: podGroup("train", 2, "Bad Key"), wantErr: "podgroup ns/train: spec.schedulingConstraints.topology[0].key"},
		{name: "PodGroup with minCount 0", pod: pod(nil, nil, "train"), pg: func() *schedulingv1beta1.PodGroup {
			pg := podGroup("train", 1)
			pg.Spec.SchedulingPolicy.Gang.MinCount = 0
			return pg
		}(), wantErr: "spec.schedulingPolicy.gang.minCount: 0 is not positive"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := Of(tc.pod, tc.pg)
			if tc.wantErr != "" {
				var fe *FieldError
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.As(err, &fe) {
					t.Fatalf("got %v, want a FieldError containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ok != tc.ok || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestConsistentAndReady(t *testing.T) {
	a := Spec{Namespace: "ns", Name: "g", MinCount: 3, Constraints: []allocator.GangConstraint{{NodeLabel: "rack"}}}
	if err := Consistent([]Spec{a, a, a}); err != nil {
		t.Errorf("equal members: %v", err)
	}
	b := a
	b.MinCount = 4
	if err := Consistent([]Spec{a, b}); err == nil || !strings.Contains(err.Error(), "minimum count (3 and 4)") {
		t.Errorf("min count: got %v", err)
	}
	c := a
	c.Constraints = nil
	if err := Consistent([]Spec{a, c}); err == nil || !strings.Contains(err.Error(), "node label rack and none") {
		t.Errorf("constraints: got %v", err)
	}
	d := a
	d.Name = "h"
	if err := Consistent([]Spec{a, d}); err == nil {
		t.Error("two gangs: want an error")
	}
	if a.Ready(2) || !a.Ready(3) {
		t.Error("Ready: want false at 2 and true at 3 of 3")
	}
}

// FuzzOf: no label or annotation value panics Of, and what it accepts is
// usable: a positive minimum count and constraints the engine validates.
func FuzzOf(f *testing.F) {
	f.Add("g", "3", "topology.kubernetes.io/rack", "gpu.nvidia.com/cliqueID")
	f.Add("", "-1", "", "/")
	f.Add("x", "9999999999999999999999", "a/b/c", "d.e/f g")
	f.Fuzz(func(t *testing.T, name, minCount, key, attr string) {
		p := pod(map[string]string{LabelName: name}, map[string]string{AnnotationMinCount: minCount, AnnotationTopologyKey: key, AnnotationMatchAttribute: attr}, "")
		spec, ok, err := Of(p, nil)
		if err != nil {
			return
		}
		if !ok || spec.MinCount < 1 {
			t.Fatalf("accepted %+v, %v", spec, ok)
		}
		for _, c := range spec.Constraints {
			if err := c.Validate(); err != nil {
				t.Fatalf("accepted an invalid constraint: %v", err)
			}
		}
	})
}
