package eventlimit

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

type recorded struct{ eventtype, reason, note string }

type fakeRecorder struct{ got []recorded }

func (f *fakeRecorder) Eventf(_, _ runtime.Object, eventtype, reason, _, note string, args ...any) {
	f.got = append(f.got, recorded{eventtype, reason, fmt.Sprintf(note, args...)})
}

func claim(ns, name string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

func TestLimitsNormalEventsOnly(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	inner := &fakeRecorder{}
	r := New(inner, Options{QPS: 2, Burst: 3, Clock: clk})
	for i := range 10 {
		r.Eventf(claim("a", fmt.Sprint(i)), nil, corev1.EventTypeNormal, "Allocated", "Allocate", "claim %d", i)
	}
	for i := range 4 {
		r.Eventf(claim("a", fmt.Sprint(i)), nil, corev1.EventTypeWarning, "Unsatisfiable", "Allocate", "no")
	}
	normal, warning := 0, 0
	for _, e := range inner.got {
		switch e.eventtype {
		case corev1.EventTypeNormal:
			normal++
		case corev1.EventTypeWarning:
			warning++
		}
	}
	if normal != 3 || warning != 4 {
		t.Fatalf("%d Normal and %d Warning Events passed, want the burst of 3 and all 4", normal, warning)
	}
	if inner.got[0].note != "claim 0" {
		t.Errorf("first note %q", inner.got[0].note)
	}
	// A second later the bucket holds two more tokens.
	clk.SetTime(clk.Now().Add(time.Second))
	for i := range 3 {
		r.Eventf(claim("b", fmt.Sprint(i)), nil, corev1.EventTypeNormal, "Allocated", "Allocate", "later")
	}
	if n := len(inner.got); n != 3+4+2 {
		t.Errorf("%d Events passed after a second, want 9", n)
	}
	s := r.Summary()
	for _, want := range []string{"8 Normal Events held back", "7 Allocated on ResourceClaims in namespace a", "1 Allocated on ResourceClaims in namespace b"} {
		if !strings.Contains(s, want) {
			t.Errorf("summary %q lacks %q", s, want)
		}
	}
	if s := r.Summary(); s != "" {
		t.Errorf("second summary %q, want none: the first forgets", s)
	}
}

func TestFlushEmitsOneSummaryOnTheTarget(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	inner := &fakeRecorder{}
	stack := &v1alpha1.DRAStack{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DRAStackName}}
	r := New(inner, Options{QPS: 1, Burst: 1, Clock: clk, Target: func(context.Context) runtime.Object { return stack }})
	r.flush(context.Background())
	if len(inner.got) != 0 {
		t.Fatalf("a summary of nothing: %v", inner.got)
	}
	for i := range 20 {
		r.Eventf(claim(fmt.Sprintf("ns%02d", i), "c"), nil, corev1.EventTypeNormal, "Allocated", "Allocate", "x")
	}
	inner.got = nil
	r.flush(context.Background())
	if len(inner.got) != 1 || inner.got[0].reason != ReasonHeldBack || inner.got[0].eventtype != corev1.EventTypeNormal {
		t.Fatalf("flush emitted %v, want one %s Event", inner.got, ReasonHeldBack)
	}
	note := inner.got[0].note
	if !strings.Contains(note, "19 Normal Events held back") || !strings.Contains(note, "and 11 more kinds") || len(note) > 1024 {
		t.Errorf("summary note %q (%d bytes)", note, len(note))
	}

	// Without a target the summary is only logged.
	r = New(inner, Options{QPS: 1, Burst: 1, Clock: clk, Target: func(context.Context) runtime.Object { return nil }})
	r.Eventf(claim("a", "1"), nil, corev1.EventTypeNormal, "Allocated", "Allocate", "x")
	r.Eventf(claim("a", "2"), nil, corev1.EventTypeNormal, "Allocated", "Allocate", "x")
	inner.got = nil
	r.flush(context.Background())
	if len(inner.got) != 0 {
		t.Errorf("emitted %v without a target", inner.got)
	}
}

func TestKindOf(t *testing.T) {
	typed := &corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod"}}
	for _, tc := range []struct {
		obj  runtime.Object
		want string
	}{
		{claim("a", "b"), "ResourceClaim"},
		{typed, "Pod"},
		{&v1alpha1.DevicePool{}, "DevicePool"},
		{nil, "object"},
	} {
		if got := kindOf(tc.obj); got != tc.want {
			t.Errorf("kindOf(%T) = %q, want %q", tc.obj, got, tc.want)
		}
	}
}
