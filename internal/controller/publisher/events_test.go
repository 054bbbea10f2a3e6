package publisher

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

func TestChangedEntries(t *testing.T) {
	st := func(problems ...string) []v1alpha1.MultiHostStatus {
		return []v1alpha1.MultiHostStatus{{Name: "tpu", Pools: 1, Devices: 15, Problems: problems}}
	}
	rejected := "InvalidTopology: partitions 3x4: 3 does not divide 4; nothing is published for this entry"
	missing := "MissingHost: pool tpu-a: no usable host at coordinates 0.0"
	noNodes := "NoNodes: no selected node has a example.com/tpu-domain label"
	tests := []struct {
		name       string
		prev, next []v1alpha1.MultiHostStatus
		// want is "<type> <reason>" of the one Event, or "" for none.
		want string
		// note must contain this.
		note string
	}{
		{name: "a new entry without problems is no news", prev: nil, next: st()},
		{name: "unchanged problems are not repeated", prev: st(missing), next: st(missing)},
		{name: "a rejected entry is a warning naming the reason", prev: st(), next: st(rejected, missing), want: "Warning TopologyRejected", note: "3 does not divide 4"},
		{name: "host problems are a warning with the first one", prev: nil, next: st(missing), want: "Warning TopologyProblems", note: "1 problems, 1 pools published; first: " + missing},
		{name: "problems gone is a normal event", prev: st(missing), next: st(), want: "Normal TopologyResolved", note: "15 devices"},
		{name: "NoNodes alone is informational", prev: nil, next: st(noNodes)},
		{name: "NoNodes after problems counts as resolved", prev: st(missing), next: st(noNodes), want: "Normal TopologyResolved"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			events := changedEntries(tt.prev, tt.next)
			if tt.want == "" {
				if len(events) != 0 {
					t.Errorf("events = %+v, want none", events)
				}
				return
			}
			if len(events) != 1 {
				t.Fatalf("events = %+v, want one %s", events, tt.want)
			}
			e := events[0]
			if got := e.eventType + " " + e.reason; got != tt.want {
				t.Errorf("event %q, want %q", got, tt.want)
			}
			if !strings.Contains(e.note, tt.note) || !strings.Contains(e.note, "multiHost tpu") {
				t.Errorf("note %q should name the entry and contain %q", e.note, tt.note)
			}
			if (e.eventType == corev1.EventTypeWarning) == (e.reason == EventTopologyResolved) {
				t.Errorf("%s must be Normal exactly when problems are resolved", e.reason)
			}
		})
	}
}

func TestTruncateNote(t *testing.T) {
	long := "publish pool tpu-a: " + strings.Repeat("x", 2000) + ": the cause"
	if got := truncateNote(long); len(got) > maxNote || !strings.HasPrefix(got, "publish pool tpu-a: ") || !strings.HasSuffix(got, ": the cause") {
		t.Errorf("truncateNote kept %d characters (limit %d) and should keep the start and the cause: %q", len(got), maxNote, got)
	}
	if got := truncateNote("short"); got != "short" {
		t.Errorf("truncateNote changed a short note: %q", got)
	}
}

// TestPublishedCondition: the condition says which generation the
// publisher acted on and how.
func TestPublishedCondition(t *testing.T) {
	tests := []struct {
		name     string
		valid    bool
		retiring []string
		err      error
		status   metav1.ConditionStatus
		reason   string
	}{
		{"held", false, nil, nil, metav1.ConditionFalse, ReasonSpecInvalid},
		{"published", true, nil, nil, metav1.ConditionTrue, ReasonPublished},
		{"a driver still has slices", true, []string{"tpu.example.com"}, nil, metav1.ConditionTrue, ReasonRetiring},
		{"a start failed", true, nil, errors.New("informer not synced"), metav1.ConditionFalse, ReasonStartFailed},
	}
	for _, tc := range tests {
		c := publishedCondition(7, tc.valid, tc.retiring, tc.err)
		if c.Type != ConditionPublished || c.ObservedGeneration != 7 || c.Status != tc.status || c.Reason != tc.reason || c.Message == "" {
			t.Errorf("%s: %+v", tc.name, c)
		}
	}
}
