package publisher

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/note"
)

// Event reasons on the DRAStack.
const (
	// EventTopologyRejected: internal/topology rejected an entry (or one of
	// its pools); nothing broken is published for it.
	EventTopologyRejected = "TopologyRejected"
	// EventTopologyProblems: an entry's hosts have problems (missing,
	// duplicate or out-of-grid coordinates, cordoned nodes); pools are
	// withheld or published partially, as missingHostPolicy says.
	EventTopologyProblems = "TopologyProblems"
	// EventTopologyResolved: an entry that had problems has none left.
	EventTopologyResolved = "TopologyResolved"
	// EventPublishFailed: the API server refused a slice write (or dropped
	// fields of it); the library retries with backoff.
	EventPublishFailed = "PublishFailed"
)

// maxNote is the API's limit on an Event's note.
const maxNote = 1024

// recordChanges emits one Event per entry whose problems changed since
// the status the DRAStack holds, so that `kubectl describe drastack` tells
// when a topology broke or healed without repeating it on every
// reconcile.
func (r *Reconciler) recordChanges(st *v1alpha1.DRAStack, next []v1alpha1.MultiHostStatus) {
	if r.Recorder == nil {
		return
	}
	for _, e := range changedEntries(st.Status.MultiHost, next) {
		r.Recorder.Eventf(st, nil, e.eventType, e.reason, "Publish", "%s", truncateNote(e.note))
	}
}

// entryEvent is one Event to emit.
type entryEvent struct {
	eventType, reason, note string
}

// changedEntries decides the Events for a status change: a Warning
// TopologyRejected when the entry has an InvalidTopology problem, a Warning
// TopologyProblems for other problems, a Normal TopologyResolved when the
// problems are gone. An entry whose problems did not change gets none;
// NoNodes alone is informational and gets none either.
func changedEntries(prev, next []v1alpha1.MultiHostStatus) []entryEvent {
	var out []entryEvent
	for _, n := range next {
		var before []string
		if i := slices.IndexFunc(prev, func(p v1alpha1.MultiHostStatus) bool { return p.Name == n.Name }); i >= 0 {
			before = prev[i].Problems
		}
		if slices.Equal(before, n.Problems) {
			continue
		}
		problems := serious(n.Problems)
		switch {
		case len(problems) == 0 && len(serious(before)) > 0:
			out = append(out, entryEvent{corev1.EventTypeNormal, EventTopologyResolved,
				fmt.Sprintf("multiHost %s: no problems left; %d pools with %d devices published", n.Name, n.Pools, n.Devices)})
		case len(problems) == 0:
		case hasReason(problems, ReasonInvalidTopology):
			first := problems[slices.IndexFunc(problems, func(p string) bool { return strings.HasPrefix(p, ReasonInvalidTopology+":") })]
			out = append(out, entryEvent{corev1.EventTypeWarning, EventTopologyRejected, fmt.Sprintf("multiHost %s: %s", n.Name, first)})
		default:
			out = append(out, entryEvent{corev1.EventTypeWarning, EventTopologyProblems,
				fmt.Sprintf("multiHost %s: %d problems, %d pools published; first: %s", n.Name, len(problems), n.Pools, problems[0])})
		}
	}
	return out
}

// serious drops informational lines.
func serious(problems []string) []string {
	return slices.DeleteFunc(slices.Clone(problems), func(p string) bool { return strings.HasPrefix(p, ReasonNoNodes+":") })
}

func hasReason(problems []string, reason string) bool {
	return slices.ContainsFunc(problems, func(p string) bool { return strings.HasPrefix(p, reason+":") })
}

// truncateNote keeps a note within the API's limit, the cause included
// (internal/note).
func truncateNote(s string) string {
	return note.Shorten(s, maxNote)
}
