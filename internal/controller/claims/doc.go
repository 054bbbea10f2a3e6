// Package claims is the allocator-backed claim controller. It allocates
// the claims kube-scheduler cannot allocate by itself: claims with KEP-5254
// CEL constraints, claims that must be allocated before any pod uses them
// (immediate allocation, for example a multi-host slice whose nodes a
// workload must know in advance), and claims for the classes of
// spec.claims.central, with the configured engine (spec.claims.engine)
// over the informer caches.
//
// Two allocators never share a device: the operator allocates only central
// devices (spec.claims.central), and keeps them tainted NoSchedule for
// kube-scheduler, which never allocates a device so tainted to a claim that
// does not tolerate it. No timing window, hold object or take-back is part
// of correctness. Three loops and a webhook work together:
//
//   - the taint loop (taintrules.go) keeps the DeviceTaintRules of the
//     central devices in place (internal/central); the publisher writes the
//     same taint into the slices it publishes itself;
//   - the claim loop (allocate.go) allocates immediate claims as soon as
//     they exist, on any node;
//   - the placement loop (placement.go) allocates all of a pod's other
//     operator claims together, in one engine call, on a node where the pod
//     fits (internal/placement) and where its kube-scheduler claims fit too,
//     then lifts the pod's scheduling gate; a pod kube-scheduler could not
//     bind where its claims are gets them back after spec.claims.
//     placementTimeout (claims.Replace), and the nodes kube-scheduler turned
//     down are tried last (book.go, nodeMemory);
//   - the admission webhooks of internal/claimwebhook gate every new pod
//     with an operator claim when spec.claims.gatePods is true, and put
//     the delete-protection finalizer on new operator claims.
//
// The engine sees one view of the cluster (central.EngineView): taints of
// DeviceTaintRules applied, and the devices the operator must not use
// tainted in the view only, so a claim passed through central.ForOperator
// gets only central devices and one passed through central.ForScheduler
// only kube-scheduler's. Decisions are made one at a time on one engine
// session, which therefore sees every allocation the operator chose
// (snapshot.go), and written in parallel the way kube-scheduler writes
// them: the delete-protection finalizer, then status.allocation with its
// allocationTimestamp, both merge patches with a resourceVersion
// precondition (write.go).
//
// A status writer reports ClaimsReady and status.claims in the DRAStack
// (stackstatus.go). Every decision comes from internal/claims,
// internal/central and internal/placement; this package only watches,
// calls and writes.
package claims
