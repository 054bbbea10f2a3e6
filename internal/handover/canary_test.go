package handover

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/central"
)

func TestCanaryObjects(t *testing.T) {
	rule := CanaryRule("r7")
	slice := CanarySlice()
	if len(slice.Spec.Devices) != 1 || !ptr.Deref(slice.Spec.AllNodes, false) {
		t.Fatalf("canary slice: want one device reachable from every node: %+v", slice.Spec)
	}
	dev := slice.Spec.Devices[0].Name
	if !central.Selects(rule.Spec.DeviceSelector, CanaryDriver, CanaryPool, dev) ||
		central.Selects(rule.Spec.DeviceSelector, CanaryDriver, CanaryPool, "other") ||
		central.Selects(rule.Spec.DeviceSelector, "gpu.example.com", CanaryPool, dev) {
		t.Errorf("canary rule selector %+v: want exactly the canary device", rule.Spec.DeviceSelector)
	}
	if rule.Spec.Taint.Effect != "NoSchedule" || PoolRule(rule) || central.Owned(rule) {
		t.Errorf("canary rule %+v: want a NoSchedule taint, and no central rule", rule)
	}
	claim := CanaryClaim("ops", "r7", 2)
	pod := CanaryPod("ops", "r7", 2, PauseImage)
	req := claim.Spec.Devices.Requests[0].Exactly
	if req.DeviceClassName != CanaryClass().Name || !ptr.Deref(req.AdminAccess, false) || req.Count != 1 || len(req.Tolerations) != 0 {
		t.Errorf("canary request %+v: want the canary class, admin access, one device, no toleration", req)
	}
	if pod.Spec.ResourceClaims[0].ResourceClaimName == nil || *pod.Spec.ResourceClaims[0].ResourceClaimName != claim.Name || pod.Namespace != "ops" {
		t.Errorf("canary pod claims %+v: want its attempt's claim %s", pod.Spec.ResourceClaims, claim.Name)
	}
	if pod.Spec.PriorityClassName != "" || len(pod.Spec.Tolerations) != 1 || pod.Spec.Tolerations[0].Operator != corev1.TolerationOpExists {
		t.Errorf("canary pod: want the default priority and every taint tolerated: %+v", pod.Spec)
	}
	sc := pod.Spec.Containers[0].SecurityContext
	if !ptr.Deref(pod.Spec.SecurityContext.RunAsNonRoot, false) || pod.Spec.SecurityContext.SeccompProfile == nil ||
		ptr.Deref(sc.AllowPrivilegeEscalation, true) || len(sc.Capabilities.Drop) != 1 {
		t.Errorf("canary pod does not meet the restricted Pod Security Standard: %+v %+v", pod.Spec.SecurityContext, sc)
	}
	for _, o := range []metav1.Object{rule, claim, pod} {
		if !IsCanary(o) || RoundOf(o) != "r7" {
			t.Errorf("%s: IsCanary %v, round %q; want a canary object of r7", o.GetName(), IsCanary(o), RoundOf(o))
		}
	}
	for _, o := range []metav1.Object{slice, CanaryClass()} {
		if !IsCanary(o) || RoundOf(o) != "" {
			t.Errorf("%s: want a canary object of no round", o.GetName())
		}
	}
	if IsCanary(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelRound: "r7"}}}) {
		t.Error("a pod with only the round label is not a canary")
	}
}
