package claims

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/allocator"
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

// The warmed session survives the Create events every watch replays when
// its loop starts; a real change, or a new configuration stored by anyone,
// is never served from it.
func TestWarmedSessionSurvivesTheInitialList(t *testing.T) {
	ctx := context.Background()
	st, n1, mh := stack("mh"), node("n1", "4"), poolSlice("mh", "a")
	e := newEnv(t, interceptor.Funcs{}, st, gpuClass(), n1, mh)
	e.tainted()
	r := e.r
	if err := r.warm(ctx); err != nil {
		t.Fatalf("warm: %v", err)
	}
	warmed := r.snap.session
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	nodes := r.nodeChanges(r.claims)
	slicesH := versionChanges[*resourceapi.ResourceSlice](func(q queue, invalidate bool) {
		if invalidate {
			r.snap.invalidate()
		}
	}, specChanged[*resourceapi.ResourceSlice])
	config := r.configHandler(r.claims, r.allClaims)
	nodes.Create(ctx, event.TypedCreateEvent[*corev1.Node]{Object: n1, IsInInitialList: true}, q)
	slicesH.Create(ctx, event.TypedCreateEvent[*resourceapi.ResourceSlice]{Object: mh, IsInInitialList: true}, q)
	config.Create(ctx, event.TypedCreateEvent[*v1alpha1.DRAStack]{Object: st, IsInInitialList: true}, q)
	session := func() allocator.Session {
		t.Helper()
		var got allocator.Session
		if err := r.snap.withSession(ctx, r.Engines["native"], func(s allocator.Session) error { got = s; return nil }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if session() != warmed {
		t.Fatal("the initial list's Create events threw the warmed session away")
	}

	// A slice created later is news.
	slicesH.Create(ctx, event.TypedCreateEvent[*resourceapi.ResourceSlice]{Object: poolSlice("more", "a")}, q)
	if r.snap.session != nil {
		t.Error("a slice created after the start kept the session")
	}
	rebuilt := session()

	// A reconcile that reads a new configuration first (loadStack) leaves
	// the event handler nothing to invalidate: the session is not served
	// for it all the same.
	var changed v1alpha1.DRAStack
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(st), &changed); err != nil {
		t.Fatal(err)
	}
	changed.Spec.Claims.Central[0].Pools = []string{"mh", "more"}
	if err := e.c.Update(ctx, &changed); err != nil {
		t.Fatal(err)
	}
	if _, err := r.loadConfig(ctx); err != nil {
		t.Fatal(err)
	}
	r.snap.mu.Lock()
	current := r.snap.current()
	r.snap.mu.Unlock()
	if current {
		t.Error("a session built for the old configuration counts as current (allocations would queue for it)")
	}
	config.Update(ctx, event.TypedUpdateEvent[*v1alpha1.DRAStack]{ObjectOld: st, ObjectNew: &changed}, q)
	if session() == rebuilt {
		t.Error("a session built for the old central entries was served under the new ones")
	}
}

// failingEngine cannot start a session.
type failingEngine struct{}

func (failingEngine) Name() string { return string(v1alpha1.EngineUpstream) }

func (failingEngine) NewSession(context.Context, allocator.Inputs) (allocator.Session, error) {
	return nil, errors.New("cannot start")
}

// A build that replaces a session (another engine) and fails leaves no
// session behind, so a label change it only recorded cannot be lost.
func TestFailedBuildDropsTheSessionItReplaces(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, interceptor.Funcs{}, stack("mh"), gpuClass(), poolSlice("mh", "a"))
	s := e.r.snap
	if err := s.withSession(ctx, e.r.Engines["native"], func(allocator.Session) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if s.session == nil {
		t.Fatal("no session")
	}
	if err := s.withSession(ctx, failingEngine{}, func(allocator.Session) error { return nil }); err == nil {
		t.Fatal("a session of an engine that cannot start one")
	}
	if s.session != nil || s.building || s.changedKeys != nil {
		t.Errorf("after a failed build: session %v, building %v, changed keys %v; want none", s.session, s.building, s.changedKeys)
	}
	if !s.labelsMatter(nil, map[string]string{"any": "label"}) {
		t.Error("without a session every label change must count")
	}
}
