package pool

import (
	"fmt"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	poolpkg "github.com/drastack/drastack/internal/pool"
)

// alarming reports a health users should act on: Invalid, Degraded, or
// Incomplete past the grace period (then IncompletePool is among the
// problems). Incomplete within the grace period is a normal moment of a
// driver update and raises nothing.
func alarming(st *v1alpha1.DevicePoolStatus) bool {
	switch st.Health {
	case v1alpha1.PoolInvalid, v1alpha1.PoolDegraded:
		return true
	case v1alpha1.PoolIncomplete:
		return st.Reason == string(poolpkg.ReasonIncompletePool)
	}
	return false
}

// healthEvent is an Event to emit on a DevicePool.
type healthEvent struct {
	warning bool
	reason  string
	message string
}

// maxEventMessage is the longest note events.k8s.io accepts (1 kB).
const maxEventMessage = 1024

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// EventReasonHealthy is the reason of the Event that says a pool is
// healthy again.
const EventReasonHealthy = "Healthy"

// decideEvent says which Event, if any, a status change deserves. warned
// tells whether the last Event about this pool was a Warning (known from
// the previous status after a restart of the operator).
//
//   - A Warning with the reason code when the pool becomes alarming or
//     stays alarming for a different reason (health or reason changed).
//   - A Normal "Healthy" when the pool is Healthy again after a Warning.
//   - Nothing otherwise: a new healthy pool, an incomplete pool within its
//     grace period, or an unchanged state. At 10,000 pools an Event per
//     healthy pool at startup would only flood the API server.
func decideEvent(prev, next *v1alpha1.DevicePoolStatus, warned bool) (healthEvent, bool) {
	if alarming(next) {
		if prev != nil && alarming(prev) && prev.Health == next.Health && prev.Reason == next.Reason {
			return healthEvent{}, false
		}
		msg := fmt.Sprintf("pool %s of driver %s is %s", next.Pool, next.Driver, next.Health)
		if len(next.Problems) > 0 {
			for _, p := range next.Problems {
				if p.Reason == next.Reason {
					msg += ": " + p.Message
					break
				}
			}
		}
		if n := len(next.Problems) + int(next.MoreProblems); n > 1 {
			msg += fmt.Sprintf(" (%d problems)", n)
		}
		return healthEvent{warning: true, reason: next.Reason, message: truncate(msg, maxEventMessage)}, true
	}
	if next.Health == v1alpha1.PoolHealthy && warned {
		return healthEvent{reason: EventReasonHealthy,
			message: fmt.Sprintf("pool %s of driver %s is Healthy again", next.Pool, next.Driver)}, true
	}
	return healthEvent{}, false
}
