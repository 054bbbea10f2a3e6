package claims

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/drastack/drastack/internal/allocator"
)

// Avoiding kube-scheduler's bindings in flight. A race (see settle.go) can
// only happen on devices kube-scheduler chose and has not written yet, and
// those are on the nodes of its bindings in flight. So the operator first
// prefers devices away from those nodes: when the engine's choice needs a
// busy node, the other nodes are tried one by one; when every choice is
// busy, the claim waits a moment, at most maxAvoid, and then takes what
// the engine chose. Races become rare instead of common; the race watch
// and the holds handle the rest.
const maxAvoid = 3 * time.Second

// avoidBusy returns a result of the engine for the claim that needs no
// node with a binding in flight (the given result when it needs none),
// or nil when there is none and the claim should wait a little.
func (r *Reconciler) avoidBusy(ctx context.Context, sess allocator.Session, claim *resourceapi.ResourceClaim, res allocator.Result) *allocator.Result {
	busy := r.bindings.busyNodes()
	if len(busy) == 0 {
		return &res
	}
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return &res
	}
	busyNodes := make([]*corev1.Node, 0, len(busy))
	for i := range nodes.Items {
		if busy[nodes.Items[i].Name] {
			busyNodes = append(busyNodes, &nodes.Items[i])
		}
	}
	if !usesBusy(res, busy, busyNodes) {
		return &res
	}
	avoided.Inc()
	key := types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}
	r.mu.Lock()
	first, ok := r.deferred[key]
	if !ok {
		first = r.now()
		r.deferred[key] = first
	}
	r.mu.Unlock()
	if r.now().Sub(first) >= maxAvoid {
		return &res
	}
	for i := range nodes.Items {
		n := nodes.Items[i].Name
		if busy[n] {
			continue
		}
		alt, err := sess.Allocate(ctx, []*resourceapi.ResourceClaim{claim}, allocator.Options{Node: n})
		if err == nil && len(alt) == 1 && alt[0].Allocation != nil && !usesBusy(alt[0], busy, busyNodes) {
			return &alt[0]
		}
	}
	return nil
}

// usesBusy reports whether an allocation can be used from a busy node:
// its node, or any busy node its node selector admits (every one when it
// has none).
func usesBusy(res allocator.Result, busy map[string]bool, busyNodes []*corev1.Node) bool {
	if res.Node != "" {
		return busy[res.Node]
	}
	if res.Allocation == nil || res.Allocation.NodeSelector == nil {
		return len(busy) > 0
	}
	sel, err := nodeaffinity.NewNodeSelector(res.Allocation.NodeSelector)
	if err != nil {
		return true
	}
	for _, n := range busyNodes {
		if sel.Match(n) {
			return true
		}
	}
	return false
}
