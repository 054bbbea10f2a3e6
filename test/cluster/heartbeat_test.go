package cluster

import (
	"strings"
	"testing"
	"time"
)

func TestSlowHeartbeat(t *testing.T) {
	got, err := slowHeartbeat(string(kwokStages), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "durationMilliseconds: 60000\n    jitterDurationMilliseconds: 90000\n") {
		t.Errorf("heartbeat stage not slowed:\n%s", got)
	}
	if strings.Contains(got, heartbeatDelay) {
		t.Error("the default delay is still there")
	}
	if _, err := slowHeartbeat("kind: Stage\n", time.Minute); err == nil {
		t.Error("stages without the heartbeat delay: no error")
	}
}

func TestNodeHeartbeatOption(t *testing.T) {
	for _, tc := range []struct {
		in, want time.Duration
	}{
		{0, 0},
		{-time.Second, 0},
		{time.Second, minNodeHeartbeat},
		{61400 * time.Millisecond, 61 * time.Second},
	} {
		if got := (Options{NodeHeartbeat: tc.in}).nodeHeartbeat(); got != tc.want {
			t.Errorf("NodeHeartbeat %s: got %s, want %s", tc.in, got, tc.want)
		}
	}
}
