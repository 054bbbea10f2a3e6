package pool

import (
	"time"
)

// IncompleteProblem returns the IncompletePool problem for p once p has
// been incomplete for longer than grace. since is when the pool was first
// seen incomplete (zero means now).
//
// Within the grace period there is no problem at all: a driver replacing a
// pool writes its slices one by one, so being incomplete for a moment is
// normal and should not raise Events or alerts. Health is Incomplete either
// way; after the grace period the problem is an Error that says for how
// long.
func IncompleteProblem(p *Pool, since, now time.Time, grace time.Duration) (Problem, bool) {
	if p.Complete() {
		return Problem{}, false
	}
	if since.IsZero() {
		since = now
	}
	d := now.Sub(since)
	if d <= grace {
		return Problem{}, false
	}
	d = d.Truncate(time.Second)
	if int64(len(p.Slices)) > p.ExpectedSlices {
		return newProblem(ReasonIncompletePool, SeverityError, "", "",
			"pool has %d slices of generation %d but resourceSliceCount is %d, for %s (grace period %s)",
			len(p.Slices), p.Generation, p.ExpectedSlices, d, grace), true
	}
	return newProblem(ReasonIncompletePool, SeverityError, "", "",
		"pool has %d of %d slices of generation %d, for %s (grace period %s)",
		len(p.Slices), p.ExpectedSlices, p.Generation, d, grace), true
}

// IncompleteTracker remembers since when each pool has been incomplete, for
// controllers that assess pools repeatedly. The zero value is ready to use.
type IncompleteTracker struct {
	since map[ID]time.Time
}

// Observe returns since when p has been incomplete (the zero time if it is
// complete) and forgets pools that are complete again.
func (t *IncompleteTracker) Observe(p *Pool, now time.Time) time.Time {
	if p.Complete() {
		delete(t.since, p.ID)
		return time.Time{}
	}
	if t.since == nil {
		t.since = make(map[ID]time.Time)
	}
	s, ok := t.since[p.ID]
	if !ok {
		s = now
		t.since[p.ID] = s
	}
	return s
}

// Forget drops a pool that no longer exists.
func (t *IncompleteTracker) Forget(id ID) { delete(t.since, id) }
