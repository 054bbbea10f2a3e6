package claimpolicy

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/drastack/drastack/internal/allocator"
)

func TestPodClaims(t *testing.T) {
	p := pod(usesClaim("direct", "shared"), usesTemplate("a", "t1"), usesTemplate("b", "t2"), usesTemplate("c", "t3"),
		generated("a", "pod-a-xyz"), generated("b", ""))
	want := []PodClaim{
		{Name: "direct", ClaimName: "shared"},
		{Name: "a", ClaimName: "pod-a-xyz", Template: "t1"},
		{Name: "b", Template: "t2", NotNeeded: true},
		{Name: "c", Template: "t3"},
	}
	if got := PodClaims(p); !slices.Equal(got, want) {
		t.Errorf("PodClaims = %+v\nwant %+v", got, want)
	}
}

func TestNeedsGate(t *testing.T) {
	cel := map[string]string{allocator.CELConstraintsAnnotation: `[{"expression": "true"}]`}
	claims := claimsByName(
		claim("plain"),
		claim("constrained", withCEL),
		claim("done", withCEL, allocated(0, "d/p/a")),
		claim("going", withCEL, deleting),
	)
	templates := templatesByName(
		template("plain", nil, nil, "gpu"),
		template("constrained", nil, cel, "gpu"),
		template("immediate", nil, nil, "tpu"),
	)
	noGating := active
	noGating.GatePods = false
	for _, tc := range []struct {
		name    string
		cfg     Config
		pod     *corev1.Pod
		want    bool
		mention string
	}{
		{"pod without claims", active, pod(), false, ""},
		{"plain claim: kube-scheduler allocates", active, pod(usesClaim("x", "plain")), false, ""},
		{"claim with CEL constraints, unallocated", active, pod(usesClaim("x", "constrained")), true, "constrained"},
		{"ours and already allocated: gated until placed with the pod's other claims", active, pod(usesClaim("x", "done")), true, "claim done"},
		{"ours but being deleted: not ours to wait for", active, pod(usesClaim("x", "going")), false, ""},
		{"direct claim missing (created after the pod): not gated", active, pod(usesClaim("x", "later")), false, ""},
		{"a missing claim next to an operator's template", active, pod(usesClaim("x", "later"), usesTemplate("y", "constrained")), true, "template constrained"},
		{"plain template", active, pod(usesTemplate("x", "plain")), false, ""},
		{"template with CEL constraints", active, pod(usesTemplate("x", "constrained")), true, "template constrained"},
		{"template of an immediate class", active, pod(usesTemplate("x", "immediate")), true, "ImmediateClass"},
		{"template missing: not gated", active, pod(usesTemplate("x", "later")), false, ""},
		{"one constrained claim among plain ones", active, pod(usesClaim("x", "plain"), usesTemplate("y", "plain"), usesTemplate("z", "constrained")), true, "constrained"},
		{"already gated (webhook called twice)", active, pod(usesClaim("x", "constrained"), gated(SchedulingGate)), false, ""},
		{"gatePods false", noGating, pod(usesClaim("x", "constrained")), false, ""},
		{"no DRAStack", Config{}, pod(usesClaim("x", "constrained")), false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := NeedsGate(tc.cfg, tc.pod, claims, templates)
			if got != tc.want {
				t.Fatalf("NeedsGate = %v (%q), want %v", got, why, tc.want)
			}
			if !strings.Contains(why, tc.mention) {
				t.Errorf("reason %q does not mention %q", why, tc.mention)
			}
		})
	}
}

func TestRelease(t *testing.T) {
	claims := claimsByName(
		claim("plain"),
		claim("pending", withCEL),
		claim("done", withCEL, allocated(0, "d/p/a")),
		claim("pod-x-1", withCEL),
		claim("pod-y-1", withCEL, allocated(0, "d/p/b")),
	)
	noGating := active
	noGating.GatePods = false
	for _, tc := range []struct {
		name    string
		cfg     Config
		pod     *corev1.Pod
		release bool
		waiting []string
	}{
		{"not gated: nothing to do", active, pod(usesClaim("x", "pending")), false, nil},
		{"all claims allocated", active, pod(gated(SchedulingGate), usesClaim("x", "done"), usesClaim("y", "plain")), true, nil},
		{"a claim still waits for the operator", active, pod(gated(SchedulingGate), usesClaim("x", "done"), usesClaim("y", "pending")), false,
			[]string{"claim pending is not allocated yet"}},
		{"template claim not created yet", active, pod(gated(SchedulingGate), usesTemplate("x", "t")), false,
			[]string{"claim x: kube-controller-manager has not created it from template t yet"}},
		{"template claim created, not allocated", active, pod(gated(SchedulingGate), usesTemplate("x", "t"), generated("x", "pod-x-1")), false,
			[]string{"claim pod-x-1 is not allocated yet"}},
		{"template claim allocated", active, pod(gated(SchedulingGate), usesTemplate("y", "t"), generated("y", "pod-y-1")), true, nil},
		{"no claim needed for the template", active, pod(gated(SchedulingGate), usesTemplate("y", "t"), generated("y", "")), true, nil},
		{"direct claim missing", active, pod(gated(SchedulingGate), usesClaim("x", "later")), false, []string{"claim later does not exist"}},
		{"gating turned off releases everything", noGating, pod(gated(SchedulingGate), usesClaim("x", "pending")), true, nil},
		{"DRAStack deleted releases everything", Config{}, pod(gated(SchedulingGate), usesClaim("x", "later")), true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Release(tc.cfg, tc.pod, claims)
			if v.Release != tc.release || !slices.Equal(v.Waiting, tc.waiting) {
				t.Errorf("Release = %+v, want release=%v waiting=%q", v, tc.release, tc.waiting)
			}
		})
	}
}

func TestWithoutGate(t *testing.T) {
	gates := []corev1.PodSchedulingGate{{Name: "a"}, {Name: SchedulingGate}, {Name: "b"}}
	got := WithoutGate(gates)
	if want := []corev1.PodSchedulingGate{{Name: "a"}, {Name: "b"}}; !slices.Equal(got, want) {
		t.Errorf("WithoutGate = %v, want %v", got, want)
	}
	if len(gates) != 3 || gates[1].Name != SchedulingGate {
		t.Error("WithoutGate modified its input")
	}
}
