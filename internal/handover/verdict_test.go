package handover

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/ledger"
)

var t0 = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

// judged is a pod kube-scheduler wrote PodScheduled False with reason and
// message at at (its managedFields entry), at resourceVersion rv.
func judged(uid, rv, reason, message string, at time.Time) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p-" + uid, UID: types.UID("uid-" + uid), ResourceVersion: rv}}
	if reason != "" {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: reason, Message: message}}
	}
	if !at.IsZero() {
		mt := metav1.NewTime(at)
		p.ManagedFields = []metav1.ManagedFieldsEntry{
			{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate, Time: ptrTime(at.Add(time.Hour))},
			{Manager: claimpolicy.SchedulerName, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", Time: &mt},
		}
	}
	return p
}

func ptrTime(t time.Time) *metav1.Time { m := metav1.NewTime(t); return &m }

const allocFail = "0/3 nodes are available: 3 cannot allocate all claims. preemption: not eligible due to preemptionPolicy=Never."

func TestCanary(t *testing.T) {
	bound := judged("b", "7", "", "", time.Time{})
	bound.Spec.NodeName = "n1"
	tests := []struct {
		name    string
		pod     *corev1.Pod
		state   CanaryState
		refusal Refusal
	}{
		{"no verdict yet", judged("a", "5", "", "", time.Time{}), CanaryWaiting, Refusal{}},
		{"bound", bound, CanaryBound, Refusal{}},
		{"the device could not be allocated on any node", judged("a", "42", corev1.PodReasonUnschedulable, allocFail, t0), CanaryRefused, Refusal{Version: 42, At: t0}},
		{"on some nodes, others failed earlier filters",
			judged("a", "43", corev1.PodReasonUnschedulable, "0/3 nodes are available: 1 cannot allocate all claims, 2 node(s) had untolerated taint {a: b}.", t0),
			CanaryRefused, Refusal{Version: 43, At: t0}},
		{"every node failed an earlier filter",
			judged("a", "44", corev1.PodReasonUnschedulable, "0/3 nodes are available: 3 Too many pods.", t0), CanaryWaiting, Refusal{}},
		{"the class is not in kube-scheduler's view yet",
			judged("a", "45", corev1.PodReasonUnschedulable, "0/3 nodes are available: request canary: device class drastack-canary does not exist.", t0), CanaryWaiting, Refusal{}},
		{"the claim is not in kube-scheduler's view yet",
			judged("a", "46", corev1.PodReasonUnschedulable, `0/3 nodes are available: resourceclaim "drastack-canary-x-0" not found.`, t0), CanaryWaiting, Refusal{}},
		{"no nodes", judged("a", "47", corev1.PodReasonUnschedulable, "no nodes available to schedule pods", t0), CanaryWaiting, Refusal{}},
		{"a scheduler error", judged("a", "48", corev1.PodReasonSchedulerError, allocFail, t0), CanaryWaiting, Refusal{}},
		{"zero nodes failing allocation", judged("a", "49", corev1.PodReasonUnschedulable, "0/3 nodes are available: 0 cannot allocate all claims.", t0), CanaryWaiting, Refusal{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state, refusal := Canary(tt.pod)
			if state != tt.state || refusal != tt.refusal {
				t.Errorf("Canary = %v %+v, want %v %+v", state, refusal, tt.state, tt.refusal)
			}
		})
	}
}

func TestVerdicts(t *testing.T) {
	unsched := judged("a", "10", corev1.PodReasonUnschedulable, allocFail, t0)
	nominated := unsched.DeepCopy()
	nominated.ResourceVersion = "11"
	nominated.Status.NominatedNodeName = "n1"
	failedBinding := unsched.DeepCopy()
	failedBinding.ResourceVersion = "12"
	failedBinding.Status.Conditions[0].Reason = corev1.PodReasonSchedulerError
	failedBinding.Status.Conditions[0].Message = "running PreBind plugin DynamicResources: conflict"
	sameAgain := unsched.DeepCopy()
	sameAgain.ResourceVersion = "13"
	sameAgain.Labels = map[string]string{"x": "y"}
	other := unsched.DeepCopy()
	other.UID = "someone-else"
	other.ResourceVersion = "14"
	other.Status.Conditions[0].Message = "0/3 nodes are available: 3 Too many pods."
	gated := judged("g", "15", "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates", t0)
	fresh := judged("a", "9", "", "", time.Time{})
	bound := unsched.DeepCopy()
	bound.ResourceVersion = "16"
	bound.Spec.NodeName = "n1"
	tests := []struct {
		name     string
		old, cur *corev1.Pod
		changed  bool
		at       ledger.Version
	}{
		{"first verdict of a new pod", fresh, unsched, true, 10},
		{"a binding cycle announced", unsched, nominated, false, 0},
		{"the binding cycle failed", nominated, failedBinding, true, 12},
		{"a write that is no verdict", unsched, sameAgain, false, 0},
		{"another pod of the same name", unsched, other, false, 0},
		{"a gated pod", fresh, gated, false, 0},
		{"bound", unsched, bound, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at, changed := VerdictChanged(tt.old, tt.cur)
			if changed != tt.changed || at != tt.at {
				t.Errorf("VerdictChanged = %d %v, want %d %v", at, changed, tt.at, tt.changed)
			}
		})
	}
	if !Refused(unsched) || !Refused(failedBinding) || Refused(nominated) || Refused(gated) || Refused(bound) || Refused(fresh) {
		t.Error("Refused: want true exactly for failures without a nominated node on unbound pods")
	}
}
