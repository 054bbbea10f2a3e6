package claimpolicy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

func TestSummarize(t *testing.T) {
	now := time.Unix(10_000, 0)
	fresh, old := now.Add(-time.Second), now.Add(-5*time.Minute)
	for _, tc := range []struct {
		name    string
		entries []Entry
		counts  v1alpha1.ClaimCounts
		status  metav1.ConditionStatus
		reason  string
		mention string
	}{
		{"no claims", nil, v1alpha1.ClaimCounts{}, metav1.ConditionTrue, ReasonKeepingUp, "0 allocated"},
		{"allocated and freshly pending", []Entry{
			{Key: "ns/a", Allocated: true}, {Key: "ns/b", Since: fresh},
		}, v1alpha1.ClaimCounts{Allocated: 1, Pending: 1}, metav1.ConditionTrue, ReasonKeepingUp, "1 allocated, 1 pending"},
		{"unsatisfiable and invalid claims are the users' problem", []Entry{
			{Key: "ns/a", Outcome: OutcomeUnsatisfiable, Since: old},
			{Key: "ns/b", Outcome: OutcomeSearchBound, Since: old},
			{Key: "ns/c", Outcome: OutcomeInvalid, Since: old},
		}, v1alpha1.ClaimCounts{Unsatisfiable: 2, Invalid: 1}, metav1.ConditionTrue, ReasonKeepingUp, "2 unsatisfiable, 1 invalid"},
		{"a claim pending for long without a verdict: backlog", []Entry{
			{Key: "ns/a", Since: old, Outcome: OutcomeError}, {Key: "ns/b", Since: fresh},
		}, v1alpha1.ClaimCounts{Pending: 2}, metav1.ConditionFalse, ReasonBacklog, "the oldest since 1970-01-01T02:41:40Z"},
		{"engine does not support a claim: configuration problem", []Entry{
			{Key: "ns/a", Outcome: OutcomeNotSupported}, {Key: "ns/b", Since: old},
		}, v1alpha1.ClaimCounts{Pending: 1, Invalid: 1}, metav1.ConditionFalse, ReasonEngineNotSupported, "(each has a NotSupported Event): set spec.claims.engine to native"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			counts, cond := Summarize(tc.entries, now, 7)
			if counts != tc.counts {
				t.Errorf("counts = %+v, want %+v", counts, tc.counts)
			}
			if cond.Type != v1alpha1.ConditionClaimsReady || cond.Status != tc.status || cond.Reason != tc.reason || cond.ObservedGeneration != 7 {
				t.Errorf("condition = %+v, want %s %s", cond, tc.status, tc.reason)
			}
			if !strings.Contains(cond.Message, tc.mention) {
				t.Errorf("message %q does not mention %q", cond.Message, tc.mention)
			}
		})
	}
}

// The DRAStack is cluster-wide and the claims are the tenants': its
// conditions count claims and never name them.
func TestSummarizeNamesNoClaim(t *testing.T) {
	now := time.Unix(10_000, 0)
	var entries []Entry
	for i := range 5 {
		entries = append(entries, Entry{Key: fmt.Sprintf("tenant-%d/secret-%d", i, i), Outcome: OutcomeNotSupported},
			Entry{Key: fmt.Sprintf("tenant-%d/waiting-%d", i, i), Since: now.Add(-time.Hour)})
	}
	for _, es := range [][]Entry{entries, entries[5:]} {
		_, cond := Summarize(es, now, 1)
		if strings.Contains(cond.Message, "tenant-") || strings.Contains(cond.Message, "secret-") {
			t.Errorf("condition %s names a claim: %q", cond.Reason, cond.Message)
		}
	}
}
