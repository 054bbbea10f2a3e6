package claims

import (
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drastack/drastack/internal/allocator"
)

func TestLastFirst(t *testing.T) {
	s := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Devices: []resourceapi.Device{{Name: "a"}, {Name: "b"}, {Name: "c"}}}}
	got := lastFirst(s)
	var names []string
	for _, d := range got.Spec.Devices {
		names = append(names, d.Name)
	}
	if !slices.Equal(names, []string{"c", "b", "a"}) {
		t.Errorf("lastFirst = %v, want c b a", names)
	}
	if s.Spec.Devices[0].Name != "a" {
		t.Error("lastFirst modified the cached slice")
	}
	one := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Devices: []resourceapi.Device{{Name: "a"}}}}
	if lastFirst(one) != one {
		t.Error("a slice with one device needs no copy")
	}
}

func inFlightPod(uid, node string, gated bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)}}
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "c"}}
	p.Status.NominatedNodeName = node
	if gated {
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "x"}}
	}
	return p
}

func TestBindings(t *testing.T) {
	b := newBindings()
	t0 := time.Unix(100, 0)
	b.observe(inFlightPod("p1", "n1", false), t0)
	b.observe(inFlightPod("p2", "n2", false), t0.Add(2*time.Second))
	b.observe(inFlightPod("gated", "n3", true), t0)                  // gated pods are not being bound
	b.observe(inFlightPod("waiting", "", false), t0)                 // no nominated node yet
	b.observe(inFlightPod("p1", "n1", false), t0.Add(5*time.Second)) // first sight counts
	if got := b.busyNodes(); len(got) != 2 || !got["n1"] || !got["n2"] {
		t.Errorf("busyNodes = %v, want n1 and n2", got)
	}
	if n := b.startedBefore(t0.Add(time.Second)); n != 1 {
		t.Errorf("startedBefore = %d, want 1 (p1)", n)
	}
	bound := inFlightPod("p1", "n1", false)
	bound.Spec.NodeName = "n1"
	b.observe(bound, t0.Add(6*time.Second))
	b.forget("p2")
	if got := b.busyNodes(); len(got) != 0 {
		t.Errorf("after binding and deletion: busyNodes = %v, want none", got)
	}
}

func TestUsesBusy(t *testing.T) {
	busy := map[string]bool{"n1": true}
	n1 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"zone": "a"}}}
	sel := func(zone string) *resourceapi.AllocationResult {
		return &resourceapi.AllocationResult{NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{zone}}},
		}}}}
	}
	for _, tc := range []struct {
		name string
		res  allocator.Result
		want bool
	}{
		{"node-local on a busy node", allocator.Result{Node: "n1", Allocation: &resourceapi.AllocationResult{}}, true},
		{"node-local elsewhere", allocator.Result{Node: "n2", Allocation: &resourceapi.AllocationResult{}}, false},
		{"selector admitting a busy node", allocator.Result{Allocation: sel("a")}, true},
		{"selector admitting none", allocator.Result{Allocation: sel("b")}, false},
		{"reachable from every node", allocator.Result{Allocation: &resourceapi.AllocationResult{}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := usesBusy(tc.res, busy, []*corev1.Node{n1}); got != tc.want {
				t.Errorf("usesBusy = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestShorten(t *testing.T) {
	if got := shorten("short"); got != "short" {
		t.Errorf("shorten changed a short note: %q", got)
	}
	long := strings.Repeat("é", 800) // 1600 bytes
	got := shorten(long)
	if len(got) > maxNote || !strings.HasSuffix(got, " ...") || !utf8.ValidString(got) {
		t.Errorf("shorten = %d bytes, valid UTF-8 %v, want at most %d ending in ...", len(got), utf8.ValidString(got), maxNote)
	}
}
