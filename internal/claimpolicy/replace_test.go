package claimpolicy

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

func TestSelectCentralClass(t *testing.T) {
	cfg := ConfigFrom(&v1alpha1.DRAStack{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DRAStackName},
		Spec: v1alpha1.DRAStackSpec{Claims: v1alpha1.ClaimsSpec{
			ImmediateClasses: []string{"tpu"},
			Central:          []v1alpha1.CentralDevices{{Driver: "gpu.example.com", Classes: []string{"gpu-topology"}}},
		}}})
	for _, tc := range []struct {
		name string
		c    func() Why
		want Why
	}{
		{"a request for a central class", func() Why { return SelectClaim(cfg, claim("a", withClass("gpu-topology"))) }, WhyCentralClass},
		{"a subrequest for a central class", func() Why { return SelectClaim(cfg, claim("b", withFirstAvailable("plain", "gpu-topology"))) }, WhyCentralClass},
		{"an immediate class wins over a central one", func() Why { return SelectClaim(cfg, claim("c", withFirstAvailable("gpu-topology", "tpu"))) }, WhyImmediateClass},
		{"another class is kube-scheduler's", func() Why { return SelectClaim(cfg, claim("d", withClass("gpu"))) }, WhyNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.c(); got != tc.want {
				t.Errorf("Select = %q, want %q", got, tc.want)
			}
		})
	}
	if !WhyImmediateLabel.Immediate() || !WhyImmediateClass.Immediate() || WhyCentralClass.Immediate() || WhyCELConstraints.Immediate() {
		t.Error("only the immediate reasons are Immediate")
	}
}

func TestReplace(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	cfg := Config{Active: true, Engine: "native", GatePods: true, PlacementTimeout: time.Minute}
	// judged: kube-scheduler wrote Unschedulable this long ago (its
	// condition itself is as old as the pod, as for a pod that was gated).
	judged := func(ago time.Duration) podOpt {
		return func(p *corev1.Pod) {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{
				Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
				LastTransitionTime: metav1.NewTime(now.Add(-24 * time.Hour)),
			})
			p.ManagedFields = append(p.ManagedFields,
				metav1.ManagedFieldsEntry{Manager: "kube-scheduler", Subresource: "status", Time: ptrTime(now.Add(-ago))},
				metav1.ManagedFieldsEntry{Manager: "kubelet", Subresource: "status", Time: ptrTime(now)})
		}
	}
	bound := func(p *corev1.Pod) { p.Spec.NodeName = "n1" }
	// ours was allocated this long ago.
	ours := func(ago time.Duration, opts ...claimOpt) *resourceapi.ResourceClaim {
		c := claim("c", append([]claimOpt{withCEL, allocated(0, "d/p/x"), managedBy("drastack-claims")}, opts...)...)
		c.Status.Allocation.AllocationTimestamp = ptrTime(now.Add(-ago))
		return c
	}
	for _, tc := range []struct {
		name      string
		claim     *resourceapi.ResourceClaim
		pod       *corev1.Pod
		wantNow   bool
		wantAfter time.Duration
	}{
		{"judged after the allocation, which is older than the timeout: placed again", ours(2 * time.Minute), pod(judged(time.Minute)), true, 0},
		{"judged after an allocation 20 s old: look again when the timeout ends", ours(20 * time.Second), pod(judged(10 * time.Second)), false, 40 * time.Second},
		{"judged before the allocation (a verdict about an earlier placement)", ours(2 * time.Minute), pod(judged(3 * time.Minute)), false, 0},
		{"judged in the allocation's second counts", ours(2 * time.Minute), pod(judged(2 * time.Minute)), true, 0},
		{"bound pod keeps its claim", ours(time.Hour), pod(judged(time.Minute), bound), false, 0},
		{"gated pod keeps its claim (the operator places it)", ours(time.Hour), pod(judged(time.Minute), gated(SchedulingGate)), false, 0},
		{"a pod kube-scheduler has not judged keeps its claim", ours(time.Hour), pod(), false, 0},
		{"reserved claims stay", ours(time.Hour, reserved), pod(judged(time.Minute)), false, 0},
		{"claims kube-scheduler allocated stay", claim("c", withCEL, allocated(0, "d/p/x"), managedBy("kube-scheduler")), pod(judged(time.Minute)), false, 0},
		{"immediate claims are never moved", ours(time.Hour, withImmediateLabel), pod(judged(time.Minute)), false, 0},
		{"no pod: nothing to follow", ours(time.Hour), nil, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Replace(cfg, tc.claim, tc.pod, "drastack-claims", now)
			if got.Now != tc.wantNow || got.After != tc.wantAfter {
				t.Fatalf("Replace = %+v, want now=%v after=%s", got, tc.wantNow, tc.wantAfter)
			}
			if got.Now && !strings.Contains(got.Reason, "placementTimeout") {
				t.Errorf("reason %q does not name the setting", got.Reason)
			}
		})
	}
}

func ptrTime(t time.Time) *metav1.Time {
	mt := metav1.NewTime(t.Truncate(time.Second))
	return &mt
}
