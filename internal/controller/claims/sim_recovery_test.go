package claims

// Recovery in the simulation: kube-scheduler refuses placed pods for a
// reason the operator's placement does not check (a host port), and I4
// checks when the operator takes such a placement back.

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/handover"
)

// simHostPort is the host port some pods ask for.
const simHostPort = 8080

func hostPort(p *corev1.Pod) bool {
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			if port.HostPort == simHostPort {
				return true
			}
		}
	}
	return false
}

// portTaken is kube-scheduler's NodePorts filter: the node runs, or is
// binding, another pod with the port.
func (s *simScheduler) portTaken(pod *corev1.Pod, node string) bool {
	if !hostPort(pod) {
		return false
	}
	for _, k := range sortedKeys(s.cache.objs[kPod]) {
		p := s.cache.objs[kPod][k].(*corev1.Pod)
		if p.UID != pod.UID && p.Spec.NodeName == node && hostPort(p) {
			return true
		}
	}
	for _, b := range s.binding {
		if b.pod != keyNN(pod) && b.node == node {
			if o, ok := s.cache.objs[kPod][b.pod.String()]; ok && hostPort(o.(*corev1.Pod)) {
				return true
			}
		}
	}
	return false
}

// portsMessage is kube-scheduler's verdict on a pod whose allocated claims
// pin it to a node where its host port is taken.
func portsMessage() string {
	return fmt.Sprintf("0/%d nodes are available: 1 node(s) didn't have free ports for the requested pod ports, %d node(s) didn't match the node the pod's claims are allocated on.", simNodes, simNodes-1)
}

// gatedCondition is the PodScheduled condition the API server gives a pod
// created with scheduling gates: its lastTransitionTime stays its creation
// for as long as the condition stays False, however often kube-scheduler
// refuses the pod after the gate is lifted.
func (w *simWorld) gatedCondition() corev1.PodCondition {
	return corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonSchedulingGated,
		Message: "Scheduling is blocked due to non-empty scheduling gates", LastTransitionTime: metaNow(w.clock)}
}

// checkTakeBack wraps the commit of an operator's write that clears a
// claim's allocation, to check I4 when it lands: a placement kube-scheduler
// has (its pod ungated and unbound, every claim of the pod allocated, so it
// is no half placement being undone) is taken back only for a verdict
// kube-scheduler wrote at or after the allocation's allocationTimestamp,
// and only once spec.claims.placementTimeout has passed since then.
func (w *simWorld) checkTakeBack(c *resourceapi.ResourceClaim, apply func(client.Object) error) func(client.Object) error {
	return func(obj client.Object) error {
		before, ok := w.store.get(kClaim, keyOf(c))
		var alloc *resourceapi.AllocationResult
		if ok {
			alloc = before.(*resourceapi.ResourceClaim).Status.Allocation
		}
		err := apply(obj)
		if err != nil || alloc == nil || alloc.AllocationTimestamp == nil || w.takenBack != nil {
			return err
		}
		if after, ok := w.store.get(kClaim, keyOf(c)); ok && after.(*resourceapi.ResourceClaim).Status.Allocation != nil {
			return err
		}
		pod := w.placedPod(c)
		if pod == nil {
			return err
		}
		ts := alloc.AllocationTimestamp.Time
		judged := handover.SchedulerStatusTime(pod)
		timeout := w.opts.placementTimeout
		if timeout == 0 {
			timeout = claimpolicy.DefaultPlacementTimeout
		}
		switch {
		case judged.Before(ts):
			w.takenBack = &violation{step: w.step, what: fmt.Sprintf("the placement of claim %s (pod %s), allocated at %s, was taken back at %s although kube-scheduler's last verdict on the pod is from %s, before it",
				c.Name, pod.Name, simTime(ts), simTime(w.clock), simTime(judged))}
		case w.clock.Sub(ts) < timeout:
			w.takenBack = &violation{step: w.step, what: fmt.Sprintf("the placement of claim %s (pod %s), allocated at %s, was taken back at %s, before placementTimeout (%s) had passed",
				c.Name, pod.Name, simTime(ts), simTime(w.clock), timeout)}
		}
		return err
	}
}

// placedPod is the pod kube-scheduler has with c among its claims, all
// allocated: unbound, not deleted, ungated (nil if there is none).
func (w *simWorld) placedPod(c *resourceapi.ResourceClaim) *corev1.Pod {
	for _, o := range w.store.list(kPod) {
		p := o.(*corev1.Pod)
		if p.Namespace != c.Namespace || p.Spec.NodeName != "" || p.DeletionTimestamp != nil || claimpolicy.HasGate(p) {
			continue
		}
		uses, whole := false, true
		for _, ref := range p.Spec.ResourceClaims {
			if ref.ResourceClaimName == nil {
				continue
			}
			if *ref.ResourceClaimName == c.Name {
				uses = true
				continue
			}
			other, ok := w.store.get(kClaim, p.Namespace+"/"+*ref.ResourceClaimName)
			whole = whole && ok && other.(*resourceapi.ResourceClaim).Status.Allocation != nil
		}
		if uses && whole {
			return p
		}
	}
	return nil
}

// simTime shows a time of the run as the offset from its start.
func simTime(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Sub(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)).String()
}
