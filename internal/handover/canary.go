package handover

import (
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/driver"
)

// The canary: a slice of one device that no one else publishes, a class
// that selects only it, and per barrier round a rule that taints it and a
// claim and pod that only it can serve.
const (
	// CanaryDriver is the driver name of the canary slice. No kubelet
	// plugin serves it; the canary pod never runs with it prepared.
	CanaryDriver = "canary.drastack.io"
	// CanaryPool and CanaryDevice name the canary's one device.
	CanaryPool   = "drastack-canary"
	CanaryDevice = "canary"
	// CanaryName names the canary slice and its DeviceClass.
	CanaryName = "drastack-canary"
	// CanaryTaintKey is the key of the taint the canary rule puts on the
	// canary device (NoSchedule); the canary claim does not tolerate it.
	CanaryTaintKey = "resource.drastack.io/canary"
	// ComponentCanary is the drastack.io/component label of every canary
	// object.
	ComponentCanary = "canary"
	// LabelRound names the barrier round a canary rule, claim or pod
	// belongs to.
	LabelRound = "drastack.io/canary-round"
	// PauseImage is the canary pod's image: a canary pod that
	// kube-scheduler binds runs until the operator deletes it.
	PauseImage = "registry.k8s.io/pause:3.10"
	// canaryRequest names the canary claim's request and the pod's claim.
	canaryRequest = "canary"
)

// CanaryLabels are the labels of the canary objects of round (none for
// the slice and class, which serve every round).
func CanaryLabels(round string) map[string]string {
	l := map[string]string{driver.LabelComponent: ComponentCanary, driver.LabelManagedBy: driver.ManagedByValue}
	if round != "" {
		l[LabelRound] = round
	}
	return l
}

// IsCanary says whether an object is one of the operator's canary objects.
func IsCanary(obj metav1.Object) bool {
	l := obj.GetLabels()
	return l[driver.LabelComponent] == ComponentCanary && l[driver.LabelManagedBy] == driver.ManagedByValue
}

// IsCanarySlice says whether a ResourceSlice is the canary's: a device
// no node has and no claim but the canary claims may use, so it is no
// device pool of anyone's (no DevicePool is made of it).
func IsCanarySlice(s *resourceapi.ResourceSlice) bool {
	return s.Spec.Driver == CanaryDriver && IsCanary(s)
}

// RoundOf is the round a canary object belongs to ("" for the slice and
// class, and for anything that is not a canary object).
func RoundOf(obj metav1.Object) string {
	if !IsCanary(obj) {
		return ""
	}
	return obj.GetLabels()[LabelRound]
}

// CanarySlice is the canary's ResourceSlice: one device, reachable from
// every node, published once and never changed (a change would reach
// kube-scheduler's view of the canary out of order with the rules).
func CanarySlice() *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: CanaryName, Labels: CanaryLabels("")},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   CanaryDriver,
			Pool:     resourceapi.ResourcePool{Name: CanaryPool, Generation: 1, ResourceSliceCount: 1},
			AllNodes: ptr.To(true),
			Devices:  []resourceapi.Device{{Name: CanaryDevice}},
		},
	}
}

// CanaryClass is the DeviceClass of the canary claims: the canary driver's
// devices only.
func CanaryClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: CanaryName, Labels: CanaryLabels("")},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + CanaryDriver + `"`},
		}}},
	}
}

// CanaryRuleName is the name of the canary rule of a round.
func CanaryRuleName(round string) string { return "drastack-canary-" + round }

// canaryTaint is the taint of a round's canary rule: its value names the
// round, so that the round's clearance claim tolerates it and nothing else.
func canaryTaint(round string) resourceapi.DeviceTaint {
	return resourceapi.DeviceTaint{Key: CanaryTaintKey, Value: round, Effect: resourceapi.DeviceTaintEffectNoSchedule}
}

// CanaryRule is the rule of a barrier round: it taints the canary device
// NoSchedule. It must be created after the rules the round covers.
func CanaryRule(round string) *resourceapi.DeviceTaintRule {
	return &resourceapi.DeviceTaintRule{
		ObjectMeta: metav1.ObjectMeta{Name: CanaryRuleName(round), Labels: CanaryLabels(round)},
		Spec: resourceapi.DeviceTaintRuleSpec{
			DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: ptr.To(CanaryDriver), Pool: ptr.To(CanaryPool), Device: ptr.To(CanaryDevice)},
			Taint:          canaryTaint(round),
		},
	}
}

// Clearance is the attempt number of a round's clearance pod.
const Clearance = -1

// CanaryPodName names the canary claim and pod of one attempt of a round
// (Clearance: its clearance pod).
func CanaryPodName(round string, attempt int) string {
	if attempt == Clearance {
		return "drastack-canary-" + round + "-clear"
	}
	return "drastack-canary-" + round + "-" + strconv.Itoa(attempt)
}

// MaxTolerated bounds the earlier rounds a canary claim tolerates (an
// API limit of 16 tolerations per request, one left for the clearance).
const MaxTolerated = 15

// CanaryClaim is the claim of one attempt: the canary device with admin
// access. Admin access lets it be allocated while another claim holds the
// device (an earlier attempt's, whose deletion kube-scheduler may not have
// seen, or anyone's), so only a taint, or a slice or class kube-scheduler
// has not seen, keeps it from the device. It tolerates the taints of the
// earlier rounds in tolerated (rules deleted since kube-scheduler last
// proved it had seen every rule before them), and the claim of the
// clearance pod (attempt Clearance) also the round's own taint; no other.
func CanaryClaim(namespace, round string, attempt int, tolerated []string) *resourceapi.ResourceClaim {
	req := &resourceapi.ExactDeviceRequest{
		DeviceClassName: CanaryName, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
		AdminAccess: ptr.To(true),
	}
	values := tolerated[max(0, len(tolerated)-MaxTolerated):]
	if attempt == Clearance {
		values = append(slices.Clone(values), round)
	}
	for _, v := range values {
		t := canaryTaint(v)
		req.Tolerations = append(req.Tolerations, resourceapi.DeviceToleration{Key: t.Key, Operator: resourceapi.DeviceTolerationOpEqual, Value: t.Value, Effect: t.Effect})
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: CanaryPodName(round, attempt), Labels: CanaryLabels(round)},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: canaryRequest, Exactly: req}}}},
	}
}

// CanaryPod is the pod of one attempt: it uses the attempt's claim, fits
// every node (no requests, every taint tolerated), and meets the
// restricted Pod Security Standard of the operator's namespace. Its
// priority is the default (0), so it can preempt no ordinary pod; a
// preemption policy of Never would need a PriorityClass.
func CanaryPod(namespace, round string, attempt int, image string) *corev1.Pod {
	name := CanaryPodName(round, attempt)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: CanaryLabels(round)},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			ResourceClaims:                []corev1.PodResourceClaim{{Name: canaryRequest, ResourceClaimName: ptr.To(name)}},
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](65535),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:  "canary",
				Image: image,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem:   ptr.To(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}

// OthersTaintingCanary lists, sorted, the rules other than the canary rule
// of round that put a NoSchedule or NoExecute taint on the canary device
// (an administrator's rule for every device, say). While one exists, a
// refusal of the canary may be its doing, not the round's rule's, and
// proves nothing.
func OthersTaintingCanary(rules []resourceapi.DeviceTaintRule, round string) []string {
	var out []string
	for i := range rules {
		r := &rules[i]
		if r.Name == CanaryRuleName(round) && IsCanary(r) {
			continue
		}
		if e := r.Spec.Taint.Effect; e != resourceapi.DeviceTaintEffectNoSchedule && e != resourceapi.DeviceTaintEffectNoExecute {
			continue
		}
		if sel := r.Spec.DeviceSelector; sel != nil && (sel.Driver == nil || *sel.Driver == CanaryDriver) &&
			(sel.Pool == nil || *sel.Pool == CanaryPool) && (sel.Device == nil || *sel.Device == CanaryDevice) {
			out = append(out, r.Name)
		}
	}
	slices.Sort(out)
	return out
}
