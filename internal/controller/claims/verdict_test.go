package claims

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/allocator/upstream"
	"github.com/drastack/drastack/internal/claimpolicy"
)

func TestWithVerdict(t *testing.T) {
	for _, tc := range []struct{ msg, verdict, want string }{
		{"cannot allocate all claims", "", "cannot allocate all claims"},
		{"same", "same", "same"},
		{"cannot allocate all claims", "request gpu: no devices (1 needed)", "request gpu: no devices (1 needed) (cannot allocate all claims)"},
	} {
		if got := withVerdict(tc.msg, tc.verdict); got != tc.want {
			t.Errorf("withVerdict(%q, %q) = %q, want %q", tc.msg, tc.verdict, got, tc.want)
		}
	}
}

// TestUnsatisfiableEventsCarryVerdict: the Unsatisfiable Events of an
// immediate claim and of a pod name the obstacle as kubectl dra explain
// does: the devices are held, and by which claims.
func TestUnsatisfiableEventsCarryVerdict(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, interceptor.Funcs{}, stack("mh"), gpuClass(), node("n1", "4"),
		poolSlice("mh", "a"), immediateClaim("i1"), immediateClaim("i2"), immediateClaim("i3"),
		gpuClaim("c1"), gatedPod("p1", "1", "c1"))
	e.tainted()
	for _, name := range []string{"i1", "i2", "i3"} {
		if _, err := e.r.Reconcile(ctx, reqOf(tns, name)); err != nil {
			t.Fatalf("Reconcile %s: %v", name, err)
		}
	}
	evs := e.events()
	if !hasEvent(evs, corev1.EventTypeWarning, string(claimpolicy.OutcomeUnsatisfiable), "request gpu:", "allocated to ns/i1, ns/i2; 1 needed", "cannot allocate") {
		t.Errorf("claim events %q: want an Unsatisfiable Event with the verdict and the engine's message", evs)
	}
	if _, err := (&placementReconciler{r: e.r}).Reconcile(ctx, reqOf(tns, "p1")); err != nil {
		t.Fatalf("place p1: %v", err)
	}
	evs = e.events()
	if !hasEvent(evs, corev1.EventTypeWarning, string(claimpolicy.OutcomeUnsatisfiable), "request gpu:", "allocated to ns/i1, ns/i2; 1 needed", "n1") {
		t.Errorf("pod events %q: want an Unsatisfiable Event with the verdict", evs)
	}
}

// TestVerdictWithUpstreamEngine: with spec.claims.engine upstream the
// Event carries the same verdict, from the native engine's explanation.
func TestVerdictWithUpstreamEngine(t *testing.T) {
	ctx := context.Background()
	st := stack("mh")
	st.Spec.Claims.Engine = v1alpha1.EngineUpstream
	e := newEnv(t, interceptor.Funcs{}, st, gpuClass(), node("n1", "4"),
		poolSlice("mh", "a"), immediateClaim("i1"), immediateClaim("i2"), immediateClaim("i3"))
	e.r.Engines[string(v1alpha1.EngineUpstream)] = upstream.New()
	e.tainted()
	for _, name := range []string{"i1", "i2", "i3"} {
		if _, err := e.r.Reconcile(ctx, reqOf(tns, name)); err != nil {
			t.Fatalf("Reconcile %s: %v", name, err)
		}
	}
	if evs := e.events(); !hasEvent(evs, corev1.EventTypeWarning, string(claimpolicy.OutcomeUnsatisfiable), "upstream", "request gpu:", "allocated to ns/i1, ns/i2; 1 needed") {
		t.Errorf("claim events %q: want the upstream engine's Unsatisfiable Event with the verdict", evs)
	}
}
