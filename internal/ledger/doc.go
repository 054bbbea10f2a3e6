// Package ledger is the allocation ledger of one operator process: the one
// owner of what the operator's allocation decisions read. It keeps
//
//   - the newest known state of every claim, by resourceVersion, from the
//     informer or from the answers to the operator's own requests, so that
//     a lagging cache never undoes what a response showed;
//   - the reservations of this process: decisions whose writes are not
//     known to have committed. They count as allocated in every later
//     decision and end only on evidence (docs/allocation-protocol.md,
//     section 1): a newer state of the claim, its deletion, or a refusal
//     that proves the write can never commit;
//   - the engine session built from the caches and those states.
//
// Every decision runs under one lock, taken in turn per tenant (fair.go),
// so two decisions of one process never see the same free device. The
// ledger never talks to the API server: the claim controller reads and
// writes, and tells the ledger what it saw.
package ledger
