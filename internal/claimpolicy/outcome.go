package claimpolicy

import (
	"context"
	"errors"

	"github.com/drastack/drastack/internal/allocator"
)

// Outcome is the result of one allocation attempt, as reported in Events,
// the allocations metric (label result) and the DRAStack claim counts.
type Outcome string

// Outcomes of an attempt.
const (
	// OutcomeAllocated: the allocation was written.
	OutcomeAllocated Outcome = "Allocated"
	// OutcomeUnsatisfiable: not now; retried with backoff and whenever
	// something that could help happens (a slice, node or class appears or
	// changes, a claim is deallocated or deleted).
	OutcomeUnsatisfiable Outcome = "Unsatisfiable"
	// OutcomeSearchBound: the engine gave up before the end of the search;
	// retried like Unsatisfiable, since a changed cluster may be easier.
	OutcomeSearchBound Outcome = "SearchBoundExceeded"
	// OutcomeInvalid: the claim can never be allocated as written (bad CEL,
	// a broken annotation); one Event, no retry until the claim changes.
	OutcomeInvalid Outcome = "Invalid"
	// OutcomeNotSupported: the configured engine cannot honour the claim
	// (CEL constraints with engine upstream); one Event, no retry until the
	// claim or the DRAStack's engine changes.
	OutcomeNotSupported Outcome = "NotSupported"
	// OutcomeConflict: the claim changed while it was written; re-read and
	// tried again at once.
	OutcomeConflict Outcome = "Conflict"
	// OutcomeError: anything else (API errors, a cancelled context);
	// retried with backoff.
	OutcomeError Outcome = "Error"
)

// Retry says how an outcome is retried.
type Retry string

// Retry policies.
const (
	// RetryNone: done (allocated), or nothing to retry until the claim or
	// the configuration changes.
	RetryNone Retry = "None"
	// RetryBackoff: again after the queue's per-claim exponential backoff,
	// and at once when something relevant changes.
	RetryBackoff Retry = "Backoff"
	// RetryNow: again at once (conflicts).
	RetryNow Retry = "Now"
)

// Classify turns an engine error into an outcome. nil is OutcomeAllocated.
func Classify(err error) Outcome {
	var invalid *allocator.InvalidClaimError
	switch {
	case err == nil:
		return OutcomeAllocated
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return OutcomeError
	case errors.Is(err, allocator.ErrNotSupported):
		return OutcomeNotSupported
	case errors.As(err, &invalid):
		return OutcomeInvalid
	case errors.Is(err, allocator.ErrSearchBound):
		return OutcomeSearchBound
	case errors.Is(err, allocator.ErrUnsatisfiable):
		return OutcomeUnsatisfiable
	}
	return OutcomeError
}

// RetryOf tells how an outcome is retried.
func RetryOf(o Outcome) Retry {
	switch o {
	case OutcomeAllocated, OutcomeInvalid, OutcomeNotSupported:
		return RetryNone
	case OutcomeConflict:
		return RetryNow
	}
	return RetryBackoff
}

// Stuck reports outcomes that wait for a change rather than for time:
// they are counted in the DRAStack's status (unsatisfiable or invalid)
// instead of pending.
func (o Outcome) Stuck() bool {
	return PendingOf(o).State != PendingWaiting
}

// EventType is the Event type for an outcome: Normal for success,
// Warning otherwise.
func (o Outcome) EventType() string {
	if o == OutcomeAllocated {
		return "Normal"
	}
	return "Warning"
}

// RetriggeredBy tells whether a change of the cluster (slices, nodes,
// classes, released devices) may help a claim that failed with o. Invalid
// claims are retried only when they change themselves, except that a
// DeviceClass change may fix a request that named a missing class.
func RetriggeredBy(o Outcome, classChanged bool) bool {
	switch o {
	case OutcomeUnsatisfiable:
		return true
	case OutcomeSearchBound:
		// A search that ran out of steps or time is retried with its
		// backoff only: retrying it on every change of the cluster let a
		// few such claims keep every worker busy.
		return false
	case OutcomeInvalid:
		return classChanged
	}
	return false
}
