package claims

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/drastack/drastack/internal/claimpolicy"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func TestNodeMemory(t *testing.T) {
	m := newNodeMemory()
	pod := types.NamespacedName{Namespace: "ns", Name: "p"}
	if got := m.turnedDown(pod); len(got) != 0 {
		t.Fatalf("a pod never placed has nodes turned down: %v", got)
	}
	m.placed(pod, "n1")
	if got := m.avoided(pod); len(got) != 0 {
		t.Errorf("a placement alone is not a refusal: %v", got)
	}
	if got := m.turnedDown(pod); !got["n1"] || len(got) != 1 {
		t.Errorf("turnedDown = %v, want n1", got)
	}
	m.placed(pod, "n2")
	if got := m.turnedDown(pod); !got["n1"] || !got["n2"] {
		t.Errorf("turnedDown = %v, want n1 and n2", got)
	}
	m.forget(pod)
	if m.size() != 0 {
		t.Errorf("forget left %d entries", m.size())
	}
}

func TestLastTried(t *testing.T) {
	node := func(n string) *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}} }
	names := func(ns []*corev1.Node) []string {
		var out []string
		for _, n := range ns {
			out = append(out, n.Name)
		}
		return out
	}
	in := []*corev1.Node{node("a"), node("b"), node("c"), node("d")}
	if got := names(lastTried(in, map[string]bool{"a": true, "c": true})); !slices.Equal(got, []string{"b", "d", "a", "c"}) {
		t.Errorf("lastTried = %v, want b d a c", got)
	}
	if got := names(lastTried(in, nil)); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Errorf("lastTried without avoid = %v", got)
	}
}

// A change of the cluster brings forward the oldest waiters only: the
// others keep their backoff.
func TestRetriggerIsBounded(t *testing.T) {
	b := newBook()
	for i := range retriggerBurst + 5 {
		key := types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("c%02d", i)}
		b.markWaiting(key, testStart.Add(time.Duration(i)*time.Second), testStart)
		b.record(key, failure{outcome: claimpolicy.OutcomeUnsatisfiable, message: "no device"})
	}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	retrigger(b, q, changeDevices)
	if q.Len() != retriggerBurst {
		t.Fatalf("%d brought forward, want %d", q.Len(), retriggerBurst)
	}
	first, _ := q.Get()
	if first.Name != "c00" {
		t.Errorf("first brought forward %s, want the oldest waiter c00", first.Name)
	}
}
