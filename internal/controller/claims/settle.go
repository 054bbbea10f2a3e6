package claims

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	claimspkg "github.com/drastack/drastack/internal/claims"
)

// Two allocators share the devices: kube-scheduler picks a device in a
// pod's scheduling cycle, keeps it in memory ("assumed") and writes it in
// the pod's binding cycle, which may run seconds later on a busy cluster.
// An allocation the operator writes meanwhile cannot see that choice, so
// the same device can end up in both. While the operator's claim is not
// reserved the race watch takes it back; once the pod that uses it is
// scheduled, nobody may. So the gate of a pod stays until every binding
// kube-scheduler had in flight when the operator allocated the pod's
// claims has finished (and written what it chose, which the race watch
// then sees).
//
// kube-scheduler 1.35+ (NominatedNodeNameForExpectation, beta) marks a pod
// in its binding cycle with status.nominatedNodeName before the DRA
// plugin writes; a pod leaves the cache of unscheduled pods once bound.
// Without that feature no binding is seen and only settleMin applies.
const (
	// bindingLead is how long before its nominatedNodeName reaches the
	// operator a binding may have chosen its devices: the scheduling cycle
	// ends, the binding cycle starts and writes the pod.
	bindingLead = time.Second
	// settleMin is the least age of an allocation before its pod is let
	// go: the race watch must have seen any write that arrived with it.
	settleMin = 100 * time.Millisecond
	// settleMax bounds the wait: a binding stuck longer than this (a
	// Permit plugin waiting, say) no longer holds pods back.
	settleMax = 30 * time.Second
	// settlePoll is how often a held pod is looked at again.
	settlePoll = 100 * time.Millisecond
)

// bindings tracks kube-scheduler's binding cycles in flight: unscheduled,
// ungated pods with claims and a nominated node.
type bindings struct {
	mu    sync.Mutex
	since map[types.UID]time.Time
	node  map[types.UID]string
}

func newBindings() *bindings {
	return &bindings{since: map[types.UID]time.Time{}, node: map[types.UID]string{}}
}

// observe follows a pod of the unscheduled-pod cache.
func (b *bindings) observe(p *corev1.Pod, now time.Time) {
	inFlight := p.Spec.NodeName == "" && p.Status.NominatedNodeName != "" && len(p.Spec.ResourceClaims) > 0 &&
		len(p.Spec.SchedulingGates) == 0 && p.DeletionTimestamp == nil
	b.mu.Lock()
	defer b.mu.Unlock()
	if !inFlight {
		delete(b.since, p.UID)
		delete(b.node, p.UID)
		return
	}
	if _, ok := b.since[p.UID]; !ok {
		b.since[p.UID] = now
		bindingsSeen.Inc()
	}
	b.node[p.UID] = p.Status.NominatedNodeName
}

func (b *bindings) forget(uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.since, uid)
	delete(b.node, uid)
}

// busyNodes is the set of nodes with a binding in flight.
func (b *bindings) busyNodes() map[string]bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]bool, len(b.node))
	for _, n := range b.node {
		out[n] = true
	}
	return out
}

// startedBefore counts the bindings first seen before t.
func (b *bindings) startedBefore(t time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, s := range b.since {
		if s.Before(t) {
			n++
		}
	}
	return n
}

// settling tells how long the pod of an operator-allocated claim must
// still wait, and for how many bindings (0 when it may go).
func (g *gateReconciler) settling(c *resourceapi.ResourceClaim) (time.Duration, int) {
	at, ok := g.r.allocatedAt(c)
	if !ok {
		return 0, 0
	}
	age := g.r.now().Sub(at)
	if age >= settleMax {
		return 0, 0
	}
	if age < settleMin {
		return settleMin - age, 0
	}
	if n := g.r.bindings.startedBefore(at.Add(bindingLead)); n > 0 {
		return settlePoll, n
	}
	return 0, 0
}

// allocatedAt is when the operator wrote a claim's allocation: the exact
// time when this process wrote it, else the stored timestamp (whole
// seconds, so rounded up).
func (r *Reconciler) allocatedAt(c *resourceapi.ResourceClaim) (time.Time, bool) {
	if c.Status.Allocation == nil || claimspkg.AllocatedBy(c) != FieldManager {
		return time.Time{}, false
	}
	r.mu.Lock()
	t, ok := r.writtenAt[c.UID]
	r.mu.Unlock()
	if ok {
		return t, true
	}
	if ts := c.Status.Allocation.AllocationTimestamp; ts != nil {
		return ts.Add(time.Second), true
	}
	return time.Time{}, false
}
