package stack

import "testing"

// TestTransitionsChanged: an Event is emitted once per transition, even
// when the cached status lags behind the reconciler's own writes.
func TestTransitionsChanged(t *testing.T) {
	var tr transitions
	steps := []struct {
		name      string
		state     string
		unchanged bool
		want      bool
	}{
		{name: "first report, status empty", state: "Unknown/Waiting", want: true},
		{name: "stale cache shows the old state again", state: "Unknown/Waiting", want: false},
		{name: "the cache caught up", state: "Unknown/Waiting", unchanged: true, want: false},
		{name: "Ready turns True", state: "True/StackReady", want: true},
		{name: "a second reconcile in the same second, cache still stale", state: "True/StackReady", want: false},
		{name: "turns False", state: "False/RolloutStalled", want: true},
		{name: "stored status already shows it (another replica emitted)", state: "True/StackReady", unchanged: true, want: false},
		{name: "and back", state: "False/RolloutStalled", want: true},
	}
	for _, s := range steps {
		if got := tr.changed("uid-1", "Ready", s.state, s.unchanged); got != s.want {
			t.Errorf("%s: changed = %v, want %v", s.name, got, s.want)
		}
	}
	if !tr.changed("uid-2", "Ready", "True/StackReady", false) {
		t.Error("another object's first transition was not reported")
	}
}
