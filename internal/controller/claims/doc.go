// Package claims is the allocator-backed claim controller. It allocates
// the claims kube-scheduler cannot allocate well by itself: claims with
// KEP-5254 CEL constraints, and claims that must be allocated before any
// pod uses them (immediate allocation, for example a multi-host slice
// whose nodes a workload must know in advance), with the configured engine
// (DRAStack spec.claims.engine) over the informer caches.
//
// Three loops and a webhook work together:
//
//   - the claim loop allocates the operator's unallocated claims. Its
//     workers decide one at a time on one engine session, which therefore
//     sees every allocation the operator chose (snapshot.go), and write in
//     parallel, the way kube-scheduler does: the delete-protection
//     finalizer first, in a normal update, then status.allocation with its
//     allocationTimestamp through the status subresource, both with
//     resourceVersion and UID preconditions (write.go). It prefers devices
//     away from kube-scheduler's bindings in flight (avoid.go) and fills
//     pools from the end kube-scheduler fills last, so the two rarely meet;
//   - the race watch checks, whenever an allocation appears, that no
//     device or counter is given twice, and queues the claims that must
//     give way: the operator's, not yet reserved, allocated last. The claim
//     loop takes their allocation back and writes a hold claim where
//     kube-scheduler would otherwise forget a device that another claim
//     keeps (racewatch.go, internal/claims/holds.go);
//   - the gate loop removes the scheduling gate resource.drastack.io/allocation
//     from pods once the operator has allocated their claims and no binding
//     of kube-scheduler that could still collide with them is in flight
//     (gate.go, settle.go);
//   - the admission webhook (webhook.go) adds that gate to new pods whose
//     claims the operator allocates, when spec.claims.gatePods is true.
//
// A status writer reports ClaimsReady and status.claims in the DRAStack
// (stackstatus.go). Every decision comes from internal/claims; this
// package only watches, calls and writes.
package claims
