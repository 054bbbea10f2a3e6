// Package claims is the allocator-backed claim controller. It allocates
// the claims kube-scheduler cannot allocate well by itself: claims with
// KEP-5254 CEL constraints, claims that must be allocated before any pod
// uses them (immediate allocation, for example a multi-host slice whose
// nodes a workload must know in advance), using the configured engine
// (DRAStack spec.claims.engine) over the informer caches.
//
// Three loops and a webhook work together:
//
//   - the claim loop (a few workers whose allocation decisions are
//     serialized on one engine session, which therefore sees every
//     allocation the operator chose) allocates the operator's unallocated claims and
//     writes them the way kube-scheduler does: the delete-protection
//     finalizer first, in a normal update, then status.allocation with its
//     allocationTimestamp through the status subresource, both with
//     resourceVersion and UID preconditions. It also takes back an
//     allocation that lost a race with kube-scheduler while no pod uses it
//     yet;
//   - the race watch checks, whenever an allocation appears, that no
//     device or counter is given twice, and queues the losers;
//   - the gate loop removes the scheduling gate resource.drastack.io/allocation
//     from pods once the operator has allocated their claims;
//   - the admission webhook (webhook.go) adds that gate to new pods whose
//     claims the operator allocates, when spec.claims.gatePods is true.
//
// Every decision comes from internal/claims; this package only watches,
// calls and writes.
package claims
