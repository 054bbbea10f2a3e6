package pool

import (
	"cmp"
	"fmt"
	"slices"
)

// knownReasons is every reason code of SEMANTICS.md; tests and the fuzz
// target use it to prove that no code outside the contract is ever produced.
var knownReasons = map[Reason]bool{
	ReasonIncompletePool:          true,
	ReasonStaleSlices:             true,
	ReasonDuplicateDeviceName:     true,
	ReasonDuplicateCounterSet:     true,
	ReasonMissingCounterSet:       true,
	ReasonMissingCounter:          true,
	ReasonMixedCountersAndDevices: true,
	ReasonInvalidNodeSelection:    true,
	ReasonTooManyDevices:          true,
	ReasonTooManyCounterSets:      true,
	ReasonTooManyCounters:         true,
	ReasonTooManyConsumptions:     true,
	ReasonTooManyAttributes:       true,
	ReasonCounterOverconsumed:     true,
	ReasonDeviceDoubleAllocated:   true,
	ReasonAllocatedDeviceMissing:  true,
	ReasonFeatureGateDisabled:     true,
}

// Known reports whether r is one of the reason codes of SEMANTICS.md, so
// consumers (metrics labels, CLI output) can reject anything else.
func (r Reason) Known() bool { return knownReasons[r] }

// newProblem formats a problem. Formatting only happens when something is
// wrong, so the clean path of validation does not allocate for messages.
func newProblem(reason Reason, sev Severity, slice, device, format string, args ...any) Problem {
	return Problem{
		Reason:   reason,
		Severity: sev,
		Slice:    slice,
		Device:   device,
		Message:  fmt.Sprintf(format, args...),
	}
}

func severityRank(s Severity) int {
	if s == SeverityError {
		return 0
	}
	return 1
}

// CompareProblems orders problems errors first, then by reason, slice,
// device and message, so every list a user sees (status, CLI, Events) is
// deterministic and the most important problem comes first.
func CompareProblems(a, b Problem) int {
	if c := cmp.Compare(severityRank(a.Severity), severityRank(b.Severity)); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Reason, b.Reason); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Slice, b.Slice); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Device, b.Device); c != 0 {
		return c
	}
	return cmp.Compare(a.Message, b.Message)
}

// SortProblems sorts in place with CompareProblems.
func SortProblems(problems []Problem) {
	if len(problems) > 1 {
		slices.SortFunc(problems, CompareProblems)
	}
}

// CapProblems returns the first n problems (in their current order) and how
// many were left out. Object status and Events have size limits, and a pool
// with a thousand duplicate names should still produce a readable status:
// "first n, plus k more". n <= 0 keeps none.
func CapProblems(problems []Problem, n int) (kept []Problem, omitted int) {
	if n < 0 {
		n = 0
	}
	if len(problems) <= n {
		return problems, 0
	}
	return problems[:n:n], len(problems) - n
}
