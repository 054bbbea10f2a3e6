package handover

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
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
	claim := CanaryClaim("ops", "r7", 2, nil)
	pod := CanaryPod("ops", "r7", 2, PauseImage)
	req := claim.Spec.Devices.Requests[0].Exactly
	if req.DeviceClassName != CanaryClass().Name || !ptr.Deref(req.AdminAccess, false) || req.Count != 1 || len(req.Tolerations) != 0 {
		t.Errorf("canary request %+v: want the canary class, admin access, one device, no toleration", req)
	}
	// The clearance tolerates the round's taint and the earlier rounds'
	// given; the probe only those.
	tolerates := func(c *resourceapi.ResourceClaim, round string) bool {
		taint := CanaryRule(round).Spec.Taint
		for _, tol := range c.Spec.Devices.Requests[0].Exactly.Tolerations {
			if tol.Key == taint.Key && tol.Value == taint.Value && tol.Effect == taint.Effect && tol.Operator == resourceapi.DeviceTolerationOpEqual {
				return true
			}
		}
		return false
	}
	clear := CanaryClaim("ops", "r7", Clearance, []string{"r5", "r6"})
	probe := CanaryClaim("ops", "r7", 0, []string{"r5", "r6"})
	if !tolerates(clear, "r7") || !tolerates(clear, "r6") || !tolerates(probe, "r5") || tolerates(probe, "r7") || tolerates(clear, "r4") {
		t.Errorf("tolerations: clearance %+v, probe %+v", clear.Spec.Devices.Requests[0].Exactly.Tolerations, probe.Spec.Devices.Requests[0].Exactly.Tolerations)
	}
	var many []string
	for i := range 40 {
		many = append(many, fmt.Sprintf("old%d", i))
	}
	if n := len(CanaryClaim("ops", "r7", Clearance, many).Spec.Devices.Requests[0].Exactly.Tolerations); n != MaxTolerated+1 {
		t.Errorf("%d tolerations, want at most %d", n, MaxTolerated+1)
	}
	if CanaryPodName("r7", Clearance) == CanaryPodName("r7", 0) {
		t.Error("the clearance pod and the first probe share a name")
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

func TestOthersTaintingCanary(t *testing.T) {
	rule := func(name string, sel *resourceapi.DeviceTaintSelector, effect resourceapi.DeviceTaintEffect) resourceapi.DeviceTaintRule {
		return resourceapi.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.DeviceTaintRuleSpec{DeviceSelector: sel, Taint: resourceapi.DeviceTaint{Key: "k", Effect: effect}}}
	}
	everything := &resourceapi.DeviceTaintSelector{}
	rules := []resourceapi.DeviceTaintRule{
		*CanaryRule("r1"),
		*CanaryRule("r0"), // an earlier round's, not cleaned up yet
		rule("maintenance-all", everything, resourceapi.DeviceTaintEffectNoSchedule),
		rule("canary-driver", &resourceapi.DeviceTaintSelector{Driver: ptr.To(CanaryDriver)}, resourceapi.DeviceTaintEffectNoExecute),
		rule("informational", everything, resourceapi.DeviceTaintEffectNone),
		rule("other-driver", &resourceapi.DeviceTaintSelector{Driver: ptr.To("gpu.example.com")}, resourceapi.DeviceTaintEffectNoSchedule),
		rule("other-device", &resourceapi.DeviceTaintSelector{Driver: ptr.To(CanaryDriver), Device: ptr.To("x")}, resourceapi.DeviceTaintEffectNoSchedule),
		rule("no-selector", nil, resourceapi.DeviceTaintEffectNoSchedule),
	}
	got := OthersTaintingCanary(rules, "r1")
	want := []string{"canary-driver", CanaryRuleName("r0"), "maintenance-all"}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("OthersTaintingCanary = %v, want %v", got, want)
	}
}
