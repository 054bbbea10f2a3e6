package claimpolicy

// PendingState is what an unallocated claim of the operator waits for,
// as the outcome of its last attempt says: the state label of
// drastack_claims_pending, and the count of the DRAStack's status.claims
// it falls under (Summarize).
type PendingState string

// States of an unallocated claim.
const (
	// PendingWaiting: it waits for an attempt (none yet, or one that met
	// a conflict or an error and is retried): time helps.
	PendingWaiting PendingState = "waiting"
	// PendingUnsatisfiable: it waits for devices (or for an easier
	// cluster, after a search that hit its bound).
	PendingUnsatisfiable PendingState = "unsatisfiable"
	// PendingInvalid: it waits for the claim or the configuration to
	// change.
	PendingInvalid PendingState = "invalid"
)

// ReasonNotAttempted is the pending reason of a claim without a failed
// attempt since it last changed: it waits for its first try, or for the
// rest of its pod or gang.
const ReasonNotAttempted = "NotAttempted"

// Pending is the reason an unallocated claim waits (the outcome of its
// last attempt, or ReasonNotAttempted) with the state it puts it in.
type Pending struct {
	Reason string
	State  PendingState
}

// PendingReasons are every reason an unallocated claim can wait for, in
// a fixed order: drastack_claims_pending has a series for each, zeros
// included, so that a query by reason never misses one.
var PendingReasons = []Pending{
	{ReasonNotAttempted, PendingWaiting},
	{string(OutcomeConflict), PendingWaiting},
	{string(OutcomeError), PendingWaiting},
	{string(OutcomeUnsatisfiable), PendingUnsatisfiable},
	{string(OutcomeSearchBound), PendingUnsatisfiable},
	{string(OutcomeInvalid), PendingInvalid},
	{string(OutcomeNotSupported), PendingInvalid},
}

// PendingOf says why an unallocated claim whose last failed attempt ended
// in o waits ("" for none). Outcomes that are no failure of the claim's
// own (Allocated, a gang that waits for its pods) count as not attempted.
func PendingOf(o Outcome) Pending {
	for _, p := range PendingReasons[1:] {
		if p.Reason == string(o) {
			return p
		}
	}
	return PendingReasons[0]
}
