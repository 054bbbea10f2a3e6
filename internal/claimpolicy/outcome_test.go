package claimpolicy

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/drastack/drastack/internal/allocator"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		want      Outcome
		retry     Retry
		stuck     bool
		onChange  bool
		onClasses bool
	}{
		{"success", nil, OutcomeAllocated, RetryNone, false, false, false},
		{"unsatisfiable: backoff, and again when the cluster changes",
			fmt.Errorf("claim ns/c: %w: no 4 contiguous devices", allocator.ErrUnsatisfiable), OutcomeUnsatisfiable, RetryBackoff, true, true, true},
		{"search bound: backoff only, never retriggered by changes",
			fmt.Errorf("claim ns/c: %w after 1000000 steps", allocator.ErrSearchBound), OutcomeSearchBound, RetryBackoff, true, false, false},
		{"invalid CEL: no retry until the claim changes, or a class appears",
			&allocator.InvalidClaimError{Claim: "ns/c", Field: "metadata.annotations", Err: errors.New("syntax error")}, OutcomeInvalid, RetryNone, true, false, true},
		{"not supported by the engine: no retry",
			fmt.Errorf("claim ns/c: CEL constraints: %w", allocator.ErrNotSupported), OutcomeNotSupported, RetryNone, true, false, false},
		{"cancelled: plain error", fmt.Errorf("allocate: %w", context.Canceled), OutcomeError, RetryBackoff, false, false, false},
		{"anything else: error with backoff", errors.New("boom"), OutcomeError, RetryBackoff, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Classify(tc.err)
			if got != tc.want {
				t.Fatalf("Classify = %s, want %s", got, tc.want)
			}
			if r := RetryOf(got); r != tc.retry {
				t.Errorf("RetryOf = %s, want %s", r, tc.retry)
			}
			if s := got.Stuck(); s != tc.stuck {
				t.Errorf("Stuck = %v, want %v", s, tc.stuck)
			}
			if r := RetriggeredBy(got, false); r != tc.onChange {
				t.Errorf("RetriggeredBy(slices) = %v, want %v", r, tc.onChange)
			}
			if r := RetriggeredBy(got, true); r != tc.onClasses {
				t.Errorf("RetriggeredBy(classes) = %v, want %v", r, tc.onClasses)
			}
		})
	}
	if RetryOf(OutcomeConflict) != RetryNow {
		t.Error("a conflict is retried at once")
	}
	if OutcomeAllocated.EventType() != "Normal" || OutcomeUnsatisfiable.EventType() != "Warning" {
		t.Error("only success is a Normal event")
	}
}
