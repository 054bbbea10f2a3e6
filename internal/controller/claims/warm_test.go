package claims

import (
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// The warmer builds the session the first claim then uses as is, and
// builds nothing while no DRAStack serves claims.
func TestWarm(t *testing.T) {
	ctx := context.Background()
	idle := newEnv(t, interceptor.Funcs{}, gpuClass(), poolSlice("mh", "a"))
	if err := idle.r.warm(ctx); err != nil {
		t.Fatalf("warm without a DRAStack: %v", err)
	}
	if idle.r.snap.session != nil || idle.r.snap.seeded {
		t.Errorf("warm without a DRAStack built a session (seeded %v)", idle.r.snap.seeded)
	}

	e := newEnv(t, interceptor.Funcs{}, stack("mh"), gpuClass(), poolSlice("mh", "a"), immediateClaim("i1"))
	e.tainted()
	if err := e.r.warm(ctx); err != nil {
		t.Fatalf("warm: %v", err)
	}
	warmed := e.r.snap.session
	if warmed == nil || !e.r.snap.seeded {
		t.Fatalf("warm built no session (seeded %v)", e.r.snap.seeded)
	}
	if _, err := e.r.Reconcile(ctx, reqOf(tns, "i1")); err != nil {
		t.Fatalf("Reconcile i1: %v", err)
	}
	if e.claim("i1").Status.Allocation == nil {
		t.Fatal("claim i1 not allocated after the warm-up")
	}
	if e.r.snap.session != warmed {
		t.Error("the first claim built a new session instead of using the warmed one")
	}
}
