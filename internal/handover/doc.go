// Package handover decides the partition hand-over's joins
// (docs/allocation-protocol.md, section 4, "Joining"): when a central
// pool's devices may be allocated by the operator's engine. A pool tainted
// by a DeviceTaintRule is not the operator's the moment the rule exists:
// kube-scheduler may have decided allocations of the pool before its
// informer showed the rule, and writes them in binding cycles that run
// later. The operator waits on an observable barrier instead:
//
//   - a canary: a DeviceTaintRule created after the pool's rule taints the
//     one device of the operator's canary slice, and a pod whose claim only
//     that device can serve. kube-scheduler reads DeviceTaintRules from one
//     informer, in resourceVersion order, so when it reports the canary pod
//     unschedulable for want of devices its view held the pool's rule too,
//     and every later scheduling cycle leaves the pool alone. A clearance
//     pod comes first, bound by kube-scheduler with a claim that tolerates
//     the round's own taint and nothing else: it shows kube-scheduler sees
//     the canary slice and class, and that no other taint (an earlier
//     round's rule whose deletion it had not seen, say) is on the device,
//     so the refusal can only be the round's rule's doing;
//   - the wait set: the pods that, at the canary's refusal, were unbound,
//     not gated and had an unallocated claim the pool could serve; their
//     binding cycles may have started before. The pool joins when each of
//     them is resolved: its claims allocated (as the operator's ledger
//     shows) or deleted, or the pod refused again by kube-scheduler after
//     the canary. A deleted pod alone resolves nothing: kube-scheduler lets
//     the binding cycle of a deleted pod run on.
//
// A join is recorded on the rule (JoinedAnnotation, naming the rule's
// generation), so a restarted operator does not repeat it and a rule whose
// spec changed joins again. Pools whose slices the operator publishes with
// the taint in them need no barrier.
//
// Everything here is pure: the claim controller (internal/controller/claims,
// join.go and canary.go) reads the objects, calls these functions and writes
// what they decide.
package handover
