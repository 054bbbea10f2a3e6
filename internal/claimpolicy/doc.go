// Package claimpolicy holds every decision of the allocator-backed claim
// controller, as pure functions without a client, so that they can be read
// and tested as a specification:
//
//   - which claims the operator allocates itself (Select, SelectTemplate):
//     claims with KEP-5254 CEL constraints, claims labelled for immediate
//     allocation, and claims of the immediate DeviceClasses; all others are
//     left to kube-scheduler;
//   - what to do with one claim now (Decide);
//   - which pods must wait behind the scheduling gate, and when they may go
//     (NeedsGate, Release);
//   - how an engine failure is reported and retried (Classify);
//   - which allocations lost a race with kube-scheduler: a device (without
//     adminAccess) or counter given twice (FindRaces, Losers);
//   - the ClaimsReady condition and the claim counts of the DRAStack.
//
// internal/controller/claims moves data between the API server and these
// functions.
package claimpolicy
