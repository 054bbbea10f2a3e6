package pool

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	poolpkg "github.com/drastack/drastack/internal/pool"
	stackpkg "github.com/drastack/drastack/internal/stack"
)

func summary(pool string, h v1alpha1.PoolHealth, reason string, alarm bool) poolSummary {
	return poolSummary{id: pid(pool), health: h, reason: reason, alarm: alarm}
}

func TestAggregate(t *testing.T) {
	healthy := func(p string) poolSummary { return summary(p, v1alpha1.PoolHealthy, "", false) }
	tests := []struct {
		name    string
		pools   []poolSummary
		counts  v1alpha1.PoolCounts
		status  metav1.ConditionStatus
		reason  string
		message string
	}{
		{name: "no pools", counts: v1alpha1.PoolCounts{},
			status: metav1.ConditionTrue, reason: ReasonNoPools, message: "no driver publishes device pools"},
		{name: "all healthy", pools: []poolSummary{healthy("a"), healthy("b")},
			counts: v1alpha1.PoolCounts{Total: 2, Healthy: 2},
			status: metav1.ConditionTrue, reason: ReasonPoolsHealthy, message: "2/2 pools healthy"},
		{name: "incomplete within the grace period keeps the condition True",
			pools:  []poolSummary{healthy("a"), summary("b", v1alpha1.PoolIncomplete, "", false)},
			counts: v1alpha1.PoolCounts{Total: 2, Healthy: 1, Incomplete: 1},
			status: metav1.ConditionTrue, reason: ReasonPoolsHealthy,
			message: "1/2 pools healthy; 1 incomplete within the grace period"},
		{name: "incomplete past the grace period",
			pools:  []poolSummary{healthy("a"), summary("b", v1alpha1.PoolIncomplete, "IncompletePool", true)},
			counts: v1alpha1.PoolCounts{Total: 2, Healthy: 1, Incomplete: 1},
			status: metav1.ConditionFalse, reason: ReasonPoolsIncomplete,
			message: "1/2 pools healthy; 1 incomplete past the grace period: gpu.example.com/b (IncompletePool)"},
		{name: "invalid is reported before degraded",
			pools: []poolSummary{
				summary("a", v1alpha1.PoolDegraded, "CounterOverconsumed", true),
				summary("b", v1alpha1.PoolInvalid, "MissingCounter", true),
				healthy("c"),
			},
			counts: v1alpha1.PoolCounts{Total: 3, Healthy: 1, Invalid: 1, Degraded: 1},
			status: metav1.ConditionFalse, reason: ReasonPoolsInvalid,
			message: "1/3 pools healthy; 1 invalid: gpu.example.com/b (MissingCounter); 1 degraded: gpu.example.com/a (CounterOverconsumed)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			counts, cond := aggregate(tt.pools, 7)
			if counts != tt.counts {
				t.Errorf("counts = %+v, want %+v", counts, tt.counts)
			}
			if cond.Type != v1alpha1.ConditionPoolsHealthy || cond.Status != tt.status || cond.Reason != tt.reason || cond.ObservedGeneration != 7 {
				t.Errorf("condition = %+v, want %s/%s", cond, tt.status, tt.reason)
			}
			if cond.Message != tt.message {
				t.Errorf("message = %q\nwant      %q", cond.Message, tt.message)
			}
		})
	}
}

// With many broken pools the message names a few and counts the rest.
func TestAggregateNamesAFewPools(t *testing.T) {
	var pools []poolSummary
	for i := range 50 {
		pools = append(pools, summary(fmt.Sprintf("node-%02d", i), v1alpha1.PoolInvalid, "MissingCounter", true))
	}
	counts, cond := aggregate(pools, 1)
	if !strings.Contains(cond.Message, "50 invalid: gpu.example.com/node-00 (MissingCounter), gpu.example.com/node-01 (MissingCounter), gpu.example.com/node-02 (MissingCounter) and 47 more") {
		t.Errorf("message = %q", cond.Message)
	}
	if got := stackpkg.PoolSummary(&counts); got != "0/50 healthy" {
		t.Errorf("summary = %q", got)
	}
}

// The board sorts what it hands to aggregate, whatever the insertion order.
func TestBoardSummariesSorted(t *testing.T) {
	b := newBoard()
	for _, p := range []string{"c", "a", "b"} {
		b.set(&entry{id: poolpkg.ID{Driver: testDriver, Pool: p}, health: v1alpha1.PoolHealthy})
	}
	b.set(&entry{id: poolpkg.ID{Driver: "aaa.example.com", Pool: "z"}, health: v1alpha1.PoolHealthy})
	var got []string
	for _, s := range b.summaries() {
		got = append(got, s.id.String())
	}
	want := "aaa.example.com/z gpu.example.com/a gpu.example.com/b gpu.example.com/c"
	if strings.Join(got, " ") != want {
		t.Errorf("order = %v, want %s", got, want)
	}
}

// The DRAStack writer compares what it owns, not transition times.
func TestUpToDate(t *testing.T) {
	counts := v1alpha1.PoolCounts{Total: 1, Healthy: 1}
	cond := metav1.Condition{Type: v1alpha1.ConditionPoolsHealthy, Status: metav1.ConditionTrue, Reason: ReasonPoolsHealthy, Message: "1/1 pools healthy", ObservedGeneration: 2}
	stored := v1alpha1.DRAStackStatus{
		Pools:      &counts,
		Summary:    &v1alpha1.StackSummary{Drivers: "1/1 ready", Pools: "1/1 healthy"},
		Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}, withTime(cond)},
	}
	if !upToDate(&stored, counts, "1/1 healthy", cond) {
		t.Errorf("identical status reported as changed")
	}
	other := cond
	other.ObservedGeneration = 3
	if upToDate(&stored, counts, "1/1 healthy", other) {
		t.Errorf("a new generation must be written")
	}
	if upToDate(&stored, v1alpha1.PoolCounts{Total: 2, Healthy: 1, Incomplete: 1}, "1/2 healthy", cond) {
		t.Errorf("new counts must be written")
	}
	if upToDate(&v1alpha1.DRAStackStatus{}, counts, "1/1 healthy", cond) {
		t.Errorf("an empty status must be written")
	}
}

func withTime(c metav1.Condition) metav1.Condition {
	c.LastTransitionTime = metav1.NewTime(t0)
	return c
}
