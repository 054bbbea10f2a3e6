package gang

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Member is what the claim controller knows of one pod of a gang when it
// decides the gang's next step: where the pod is, and its operator claims
// (the ones the operator allocates) sorted by state.
type Member struct {
	// Name is the pod's name.
	Name string
	// Bound: kube-scheduler bound the pod to a node.
	Bound bool
	// Gated: the pod carries the operator's scheduling gate.
	Gated bool
	// ToPlace counts the pod's operator claims that are not allocated,
	// Placed those that are, and Pending those the gang's placement unit
	// reserved and is still writing.
	ToPlace, Placed, Pending int
	// Movable counts the Placed claims the gang's unit may take back:
	// not immediate claims (the claim loop's, allocated before any pod),
	// not allocations another manager wrote.
	Movable int
	// Waiting says what the pod's claims wait for before any decision
	// (a claim not created yet, being deleted, written by another unit);
	// empty when nothing.
	Waiting string
}

// InUnit reports whether the pod's placement belongs to the gang's
// placement unit: it is not bound, and it is gated or has operator claims
// to place or being written. A pod whose gate is lifted and whose claims
// are all allocated is kube-scheduler's; the controller's single-pod path
// looks after it (placing it again when kube-scheduler cannot run it).
func (m Member) InUnit() bool {
	if m.Bound {
		return false
	}
	operator := m.ToPlace+m.Placed+m.Pending > 0
	switch {
	case m.Gated && m.Waiting != "":
		// Its claims are not all known yet: it may still need the
		// operator.
		return true
	case !operator:
		return false
	}
	return m.Gated || m.ToPlace > 0 || m.Pending > 0
}

// Action is the next thing the controller does for a gang.
type Action string

// Actions, in the order Next considers them.
const (
	// ActionNone: the pod is not part of the gang's unit; it is handled
	// as a single pod.
	ActionNone Action = "None"
	// ActionWaitCount: the gang has fewer pods than its minimum count.
	ActionWaitCount Action = "WaitCount"
	// ActionWaitClaims: a member's claims are not ready for a decision.
	ActionWaitClaims Action = "WaitClaims"
	// ActionFinish: the unit's reservations are being written: write them
	// (again) and act on the answers.
	ActionFinish Action = "Finish"
	// ActionUndo: some members are placed and others are not, with no
	// write under way (a write that never committed, a crash, another
	// term, a member that joined late), or members hold devices while the
	// gang waits for pods or claims: take the placed ones back.
	ActionUndo Action = "Undo"
	// ActionLift: every member's operator claims are allocated: lift the
	// gates of all of them.
	ActionLift Action = "Lift"
	// ActionPlace: no member is placed: place all of them in one search.
	ActionPlace Action = "Place"
)

// Step is the decision of Next.
type Step struct {
	Action Action
	// Why says what the gang waits for, or why it is placed again.
	Why string
	// Report: the gang has waited for its pods longer than the timeout;
	// the controller reports it (and keeps waiting).
	Report bool
	// After is when to look again for the timeout (WaitCount before it).
	After time.Duration
	// Then, for ActionUndo, is what follows when nothing can be taken
	// back (claims other pods share, allocations not the operator's):
	// ActionWaitCount or ActionWaitClaims (the gang waits), or
	// ActionPlace (the rest is placed around what stays).
	Then Action
}

// Next decides the gang's next step. spec is the gang's declaration,
// members every pod of the gang that is not terminated or being deleted,
// self the pod being reconciled, firstSeen when the gang's first present
// pod was created, and timeout how long the gang may lack pods before it
// is reported.
func Next(spec Spec, members []Member, self string, firstSeen, now time.Time, timeout time.Duration) Step {
	i := slices.IndexFunc(members, func(m Member) bool { return m.Name == self })
	if i < 0 || !members[i].InUnit() {
		return Step{Action: ActionNone}
	}
	if !spec.Ready(len(members)) {
		// A gang short of pods holds no devices: a member may have left
		// after the gang was placed, or between the writes of its unit.
		var holding []string
		for _, m := range members {
			switch {
			case !m.InUnit():
			case m.Pending > 0:
				return Step{Action: ActionFinish}
			case m.Movable > 0:
				holding = append(holding, m.Name)
			}
		}
		if len(holding) > 0 {
			return Step{Action: ActionUndo, Then: ActionWaitCount, Why: fmt.Sprintf("gang %s has %d of its %d pods and %s hold devices: they are placed again with the gang",
				spec.Key(), len(members), spec.MinCount, names(holding))}
		}
		s := Step{Action: ActionWaitCount, Why: fmt.Sprintf("gang %s has %d of its %d pods", spec.Key(), len(members), spec.MinCount)}
		waited := now.Sub(firstSeen)
		if waited >= timeout {
			s.Report = true
			s.Why += fmt.Sprintf(" after %s", waited.Round(time.Second))
		} else {
			s.After = timeout - waited
		}
		return s
	}
	var unit, toPlace, placed []string
	wait := ""
	for _, m := range members {
		if !m.InUnit() {
			continue
		}
		if m.Pending > 0 {
			// Reservations of the unit are written (or released) before
			// anything else: a reservation never written holds its
			// devices.
			return Step{Action: ActionFinish}
		}
		unit = append(unit, m.Name)
		if m.Waiting != "" && wait == "" {
			wait = "pod " + m.Name + ": " + m.Waiting
		}
		if m.ToPlace > 0 {
			toPlace = append(toPlace, m.Name)
		}
		if m.Movable > 0 {
			placed = append(placed, m.Name)
		}
	}
	switch {
	case wait != "" && len(placed) > 0:
		// A member cannot start before its claims are ready (a claim not
		// created yet, deleted, written by another unit): the gang cannot
		// start either, so it holds no devices meanwhile; they may be the
		// ones the waiting claim needs.
		return Step{Action: ActionUndo, Then: ActionWaitClaims, Why: fmt.Sprintf("gang %s waits for %s; %s hold devices: they are placed again with the gang",
			spec.Key(), wait, names(placed))}
	case wait != "":
		return Step{Action: ActionWaitClaims, Why: wait}
	case len(toPlace) > 0 && len(placed) > 0:
		return Step{Action: ActionUndo, Then: ActionPlace, Why: fmt.Sprintf("gang %s is placed in part (claims of %s allocated, of %s not): it is placed again as a whole",
			spec.Key(), names(placed), names(toPlace))}
	case len(toPlace) == 0:
		return Step{Action: ActionLift, Why: fmt.Sprintf("gang %s placed: %s", spec.Key(), names(unit))}
	}
	return Step{Action: ActionPlace}
}

// names lists pod names for messages, the first few.
func names(ns []string) string {
	const show = 4
	if len(ns) > show {
		return strings.Join(ns[:show], ", ") + fmt.Sprintf(" and %d more", len(ns)-show)
	}
	return strings.Join(ns, ", ")
}
