package claimpolicy

import (
	"testing"
	"time"
)

func TestPendingOf(t *testing.T) {
	for _, tc := range []struct {
		outcome Outcome
		reason  string
		state   PendingState
	}{
		{"", ReasonNotAttempted, PendingWaiting},
		// Not a failure of the claim: it waits for another try.
		{OutcomeAllocated, ReasonNotAttempted, PendingWaiting},
		{"GangIncomplete", ReasonNotAttempted, PendingWaiting},
		{OutcomeConflict, "Conflict", PendingWaiting},
		{OutcomeError, "Error", PendingWaiting},
		{OutcomeUnsatisfiable, "Unsatisfiable", PendingUnsatisfiable},
		{OutcomeSearchBound, "SearchBoundExceeded", PendingUnsatisfiable},
		{OutcomeInvalid, "Invalid", PendingInvalid},
		{OutcomeNotSupported, "NotSupported", PendingInvalid},
	} {
		got := PendingOf(tc.outcome)
		if got.Reason != tc.reason || got.State != tc.state {
			t.Errorf("PendingOf(%q) = %+v, want %s, %s", tc.outcome, got, tc.reason, tc.state)
		}
		if stuck := tc.state != PendingWaiting; tc.outcome.Stuck() != stuck {
			t.Errorf("%q.Stuck() = %v, want %v", tc.outcome, tc.outcome.Stuck(), stuck)
		}
	}
}

// TestPendingReasonsAreDistinct: each reason once, each state present, and
// every reason is what PendingOf gives for it.
func TestPendingReasonsAreDistinct(t *testing.T) {
	seen := map[string]bool{}
	states := map[PendingState]bool{}
	for _, p := range PendingReasons {
		if seen[p.Reason] {
			t.Errorf("reason %s twice", p.Reason)
		}
		seen[p.Reason] = true
		states[p.State] = true
		if got := PendingOf(Outcome(p.Reason)); got != p {
			t.Errorf("PendingOf(%s) = %+v, want %+v", p.Reason, got, p)
		}
	}
	if len(states) != 3 {
		t.Errorf("states %v, want waiting, unsatisfiable and invalid", states)
	}
}

// TestSummarizeCountsAsPending: status.claims counts each claim under the
// state PendingOf gives it, as drastack_claims_pending does.
func TestSummarizeCountsAsPending(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var entries []Entry
	want := map[PendingState]int32{}
	for _, p := range PendingReasons {
		entries = append(entries, Entry{Key: "ns/" + p.Reason, Outcome: Outcome(p.Reason), Since: now})
		want[p.State]++
	}
	entries = append(entries, Entry{Key: "ns/done", Allocated: true})
	counts, _ := Summarize(entries, now, 1)
	if counts.Pending != want[PendingWaiting] || counts.Unsatisfiable != want[PendingUnsatisfiable] || counts.Invalid != want[PendingInvalid] || counts.Allocated != 1 {
		t.Errorf("Summarize = %+v, want pending %d, unsatisfiable %d, invalid %d, allocated 1", counts,
			want[PendingWaiting], want[PendingUnsatisfiable], want[PendingInvalid])
	}
}
