// Package claims is the allocator-backed claim controller. It allocates
// the claims kube-scheduler cannot allocate by itself: claims with KEP-5254
// CEL constraints, claims that must be allocated before any pod uses them
// (immediate allocation, for example a multi-host slice whose nodes a
// workload must know in advance), and claims for the classes of
// spec.claims.central, with the configured engine (spec.claims.engine)
// over the informer caches.
//
// docs/allocation-protocol.md is the specification of what follows. Two
// allocators never share a device: the operator allocates only central
// devices (spec.claims.central) and keeps them tainted NoSchedule for
// kube-scheduler. Four loops work together, each thin:
//
//   - the term runner (term.go) starts an allocation term when this
//     process leads: it acquires the allocation fence (internal/fence) and
//     sweeps what an earlier term could still write, then lets decisions
//     begin;
//   - the claim loop (allocate.go) allocates immediate claims as soon as
//     they exist, on any node;
//   - the placement loop (placement.go) allocates all of a pod's other
//     operator claims as one unit, on a node where the pod fits
//     (internal/placement) and where its kube-scheduler claims fit too,
//     then lifts the pod's scheduling gate; a unit whose writes did not all
//     commit is taken back and placed again, and so is a placement
//     kube-scheduler reports unschedulable (claimpolicy.Replace);
//   - the taint loop (taintrules.go) keeps the DeviceTaintRules of the
//     central devices in place (internal/central); a device leaves the
//     partition only when nothing holds it.
//
// Every decision is taken in a turn of the ledger (internal/ledger), which
// owns what decisions read: the newest state of each claim, this
// process's reservations, and the engine session. Writes (writer.go) are
// conditioned on the version the decision read, fenced to the term, and
// their answers go back to the ledger, which ends a reservation only on
// evidence. The engine sees one view of the cluster (central.EngineView,
// read by source.go).
//
// The admission webhooks of internal/claimwebhook gate new pods with an
// operator claim and put the delete-protection finalizer on new operator
// claims. A status writer reports ClaimsReady and status.claims in the
// DRAStack (stackstatus.go). Decisions come from internal/claimpolicy,
// internal/central, internal/placement and the engines; this package only
// watches, calls and writes.
package claims
