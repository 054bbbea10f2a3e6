package handover

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/claimpolicy"
)

func claimObj(name string, allocated bool) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), ResourceVersion: "100"}}
	if allocated {
		c.Status.Allocation = &resourceapi.AllocationResult{}
	}
	return c
}

// podUsing uses the named claims directly and, for each entry of
// templates, a template claim (resolved to its name, "" unresolved, "-"
// not needed).
func podUsing(name string, claims []string, templates ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
	for _, c := range claims {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: c, ResourceClaimName: ptr.To(c)})
	}
	for i, resolved := range templates {
		entry := "t" + string(rune('0'+i))
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: entry, ResourceClaimTemplateName: ptr.To("tmpl")})
		switch resolved {
		case "":
		case "-":
			p.Status.ResourceClaimStatuses = append(p.Status.ResourceClaimStatuses, corev1.PodResourceClaimStatus{Name: entry})
		default:
			p.Status.ResourceClaimStatuses = append(p.Status.ResourceClaimStatuses, corev1.PodResourceClaimStatus{Name: entry, ResourceClaimName: ptr.To(resolved)})
		}
	}
	return p
}

func TestCandidatesAndWaitSet(t *testing.T) {
	claims := map[string]*resourceapi.ResourceClaim{
		"open": claimObj("open", false), "open2": claimObj("open2", false), "done": claimObj("done", true),
		"other-pool": claimObj("other-pool", false), "tmpl-x": claimObj("tmpl-x", false),
	}
	lookup := func(ns, name string) (*resourceapi.ResourceClaim, bool) {
		c, ok := claims[name]
		return c, ok && ns == "ns"
	}
	bound := podUsing("bound", []string{"open"})
	bound.Spec.NodeName = "n1"
	gated := podUsing("gated", []string{"open"})
	gated.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: claimpolicy.SchedulingGate}}
	pods := []*corev1.Pod{
		podUsing("waits", []string{"open", "done"}),
		podUsing("both", []string{"open2", "other-pool"}),
		podUsing("all-done", []string{"done"}),
		bound, gated,
		podUsing("unresolved", []string{"open"}, ""),
		podUsing("template", nil, "tmpl-x", "-"),
		podUsing("claim-gone", []string{"gone"}),
		podUsing("elsewhere", []string{"other-pool"}),
	}
	cands := Candidates(pods, lookup)
	var names []string
	for _, c := range cands {
		names = append(names, c.Pod.Name)
	}
	if want := []string{"waits", "both", "template", "elsewhere"}; !slices.Equal(names, want) {
		t.Fatalf("candidates %v, want %v", names, want)
	}
	waiters := WaitSet(cands, func(c *resourceapi.ResourceClaim) bool { return c.Name != "other-pool" })
	got := map[string][]string{}
	for _, w := range waiters {
		for _, c := range w.Claims {
			got[w.Pod.Name] = append(got[w.Pod.Name], c.Name)
			if c.Version != 100 || c.UID != types.UID("uid-"+c.Name) {
				t.Errorf("claim ref %+v: want the read's UID and version", c)
			}
		}
	}
	want := map[string][]string{"waits": {"open"}, "both": {"open2"}, "template": {"tmpl-x"}}
	if len(got) != len(want) {
		t.Fatalf("wait set %v, want %v", got, want)
	}
	for k, v := range want {
		if !slices.Equal(got[k], v) {
			t.Errorf("waiter %s waits on %v, want %v", k, got[k], v)
		}
	}
}

func TestResolve(t *testing.T) {
	r := Refusal{Version: 50, At: t0}
	w := Waiter{Pod: types.NamespacedName{Namespace: "ns", Name: "p-a"}, UID: "uid-a", Claims: []ClaimRef{{Name: "c1"}, {Name: "c2"}}}
	refusedAt := func(rv string, at time.Time) *corev1.Pod {
		return judged("a", rv, corev1.PodReasonUnschedulable, allocFail, at)
	}
	nominated := refusedAt("60", t0.Add(2*time.Second))
	nominated.Status.NominatedNodeName = "n1"
	bound := refusedAt("61", t0)
	bound.Spec.NodeName = "n1"
	replaced := refusedAt("62", t0)
	replaced.UID = "uid-new"
	tests := []struct {
		name   string
		now    PodNow
		claims []ClaimNow
		want   Resolution
	}{
		{"the pod is gone, a claim not: its binding cycle may still write it", PodNow{}, []ClaimNow{ClaimGone, ClaimOpen}, Unresolved},
		{"the pod and its claims are gone", PodNow{}, []ClaimNow{ClaimGone, ClaimGone}, ResolvedClaims},
		{"a new pod of the same name refused", PodNow{Pod: replaced, RefusedAt: 70}, []ClaimNow{ClaimOpen, ClaimOpen}, Unresolved},
		{"every claim allocated or deleted", PodNow{Pod: bound}, []ClaimNow{ClaimAllocated, ClaimGone}, ResolvedClaims},
		{"bound, one claim not seen allocated yet", PodNow{Pod: bound}, []ClaimNow{ClaimAllocated, ClaimOpen}, Unresolved},
		{"refused, written after the canary's version", PodNow{Pod: refusedAt("55", t0), RefusedAt: 55}, []ClaimNow{ClaimOpen, ClaimOpen}, ResolvedRefused},
		{"refused before the canary", PodNow{Pod: refusedAt("40", t0), RefusedAt: 40}, []ClaimNow{ClaimOpen, ClaimOpen}, Unresolved},
		{"refused in the canary's second, no version seen", PodNow{Pod: refusedAt("70", t0.Add(500*time.Millisecond))}, []ClaimNow{ClaimOpen, ClaimOpen}, Unresolved},
		{"refused in a later second", PodNow{Pod: refusedAt("70", t0.Add(time.Second))}, []ClaimNow{ClaimOpen, ClaimOpen}, ResolvedRefused},
		{"a binding cycle announced after the canary", PodNow{Pod: nominated, RefusedAt: 55}, []ClaimNow{ClaimOpen, ClaimOpen}, Unresolved},
		{"no time known", PodNow{Pod: refusedAt("70", time.Time{})}, []ClaimNow{ClaimOpen, ClaimOpen}, Unresolved},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Resolve(w, r, tt.now, tt.claims); got != tt.want {
				t.Errorf("Resolve = %q, want %q", got, tt.want)
			}
		})
	}
	if got := Resolve(w, Refusal{Version: 50}, PodNow{Pod: refusedAt("70", t0.Add(time.Hour))}, []ClaimNow{ClaimOpen, ClaimOpen}); got != Unresolved {
		t.Errorf("a refusal of unknown time: Resolve = %q, want unresolved", got)
	}
}
