package claims

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/claimpolicy"
)

// emptyReader is a cache with nothing in it: the churn test measures what
// the controller keeps, not what the informer caches hold.
type emptyReader struct{}

func (emptyReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return nil
}

func (emptyReader) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

// stubEngine counts sessions; its sessions record anything.
type stubEngine struct{ sessions int }

func (e *stubEngine) Name() string { return string(v1alpha1.EngineNative) }

func (e *stubEngine) NewSession(context.Context, allocator.Inputs) (allocator.Session, error) {
	e.sessions++
	return stubSession{}, nil
}

type stubSession struct{}

func (stubSession) Allocate(context.Context, []*resourceapi.ResourceClaim, allocator.Options) ([]allocator.Result, error) {
	return nil, nil
}

func (stubSession) Record(*resourceapi.ResourceClaim) error { return nil }

// retained is what the controller keeps about claims.
type retained struct {
	written, recorded, toRecord, claims, pods int
}

func (r *Reconciler) retained() retained {
	s := r.snap
	s.mu.Lock()
	defer s.mu.Unlock()
	return retained{written: len(s.written), recorded: len(s.recorded), toRecord: len(s.toRecord), claims: r.claims.size(), pods: r.pods.size()}
}

func (a retained) max(b retained) retained {
	return retained{max(a.written, b.written), max(a.recorded, b.recorded), max(a.toRecord, b.toRecord), max(a.claims, b.claims), max(a.pods, b.pods)}
}

// TestStateStaysFlatUnderChurn churns 100,000 allocations through the
// paths the controller takes when the cluster's claims change: both claim
// handlers (the claim loop's and the placement loop's, so every event is
// noted twice), the operator's own decisions (reserve, then confirm or
// release, with the cache showing the write before or after the confirm),
// kube-scheduler's allocations that only the cache shows, and the
// deletion of each claim a while later. What the controller retains must
// follow the claims that exist, never the history.
func TestStateStaysFlatUnderChurn(t *testing.T) {
	const live = 64 // claims that exist at any moment
	total := 100_000
	if testing.Short() {
		total = 10_000
	}
	type mode int
	const (
		operatorConfirmFirst mode = iota // written, confirmed, then seen in the cache
		operatorCacheFirst               // seen in the cache before the confirm
		operatorWriteFailed              // reserved, the write failed: released
		scheduler                        // kube-scheduler's, seen in the cache only
	)
	scenarios := []struct {
		name  string
		modes []mode
		// idleAfter: the operator stops allocating after this many claims
		// (a session then stays built while kube-scheduler churns).
		idleAfter int
	}{
		{name: "the operator and kube-scheduler allocate", modes: []mode{operatorConfirmFirst, scheduler, operatorCacheFirst, scheduler, operatorWriteFailed}},
		{name: "the operator allocates nothing", modes: []mode{scheduler}},
		{name: "the operator goes idle with a session built", modes: []mode{operatorConfirmFirst, scheduler}, idleAfter: 10},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			now := testStart
			r := &Reconciler{Client: nil, Now: func() time.Time { return now }}
			r.init()
			r.snap.reader = emptyReader{}
			r.podCache = emptyReader{}
			st := stack("mh")
			r.cfg.set(st)
			engine := &stubEngine{}
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			defer q.ShutDown()
			pods := r.podHandler()
			claimLoop := r.claimHandler(r.claims, true, r.claimRequests)
			placementLoop := r.claimHandler(r.pods, false, r.podsOfClaim)
			ctx := context.Background()
			created := func(c *resourceapi.ResourceClaim) {
				claimLoop.Create(ctx, event.TypedCreateEvent[*resourceapi.ResourceClaim]{Object: c}, q)
				placementLoop.Create(ctx, event.TypedCreateEvent[*resourceapi.ResourceClaim]{Object: c}, q)
			}
			updated := func(old, cur *resourceapi.ResourceClaim) {
				claimLoop.Update(ctx, event.TypedUpdateEvent[*resourceapi.ResourceClaim]{ObjectOld: old, ObjectNew: cur}, q)
				placementLoop.Update(ctx, event.TypedUpdateEvent[*resourceapi.ResourceClaim]{ObjectOld: old, ObjectNew: cur}, q)
			}
			deleted := func(c *resourceapi.ResourceClaim) {
				claimLoop.Delete(ctx, event.TypedDeleteEvent[*resourceapi.ResourceClaim]{Object: c}, q)
				placementLoop.Delete(ctx, event.TypedDeleteEvent[*resourceapi.ResourceClaim]{Object: c}, q)
			}
			drain := func() {
				for q.Len() > 0 {
					item, _ := q.Get()
					q.Done(item)
					q.Forget(item)
				}
			}

			var peak retained
			window := make([]*resourceapi.ResourceClaim, 0, live)
			for i := range total {
				now = now.Add(time.Millisecond)
				c := immediateClaim(fmt.Sprintf("c-%d", i))
				c.UID = types.UID(fmt.Sprintf("uid-%d", i))
				c.ResourceVersion = "1"
				created(c)
				key := types.NamespacedName{Namespace: c.Namespace, Name: c.Name}
				alloc := c.DeepCopy()
				alloc.ResourceVersion = "2"
				alloc.Status.Allocation = &resourceapi.AllocationResult{
					Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
						Request: "gpu", Driver: tdrv, Pool: "mh", Device: fmt.Sprintf("dev-%d", i%live),
					}}},
					AllocationTimestamp: ptr.To(metav1.NewTime(now)),
				}
				m := sc.modes[i%len(sc.modes)]
				if sc.idleAfter > 0 && i >= sc.idleAfter {
					m = scheduler
				}
				// The claim loop waits for the claim, and a pod of the same
				// name waits for a placement; every fourth of each fails
				// once. The books forget them only when they go.
				r.claims.markWaiting(key, now, now)
				r.pods.markWaiting(key, now, now)
				if i%4 == 0 {
					r.claims.record(key, failure{outcome: claimpolicy.OutcomeUnsatisfiable, message: "busy"})
					r.pods.record(key, failure{outcome: claimpolicy.OutcomeUnsatisfiable, message: "no node"})
				}
				allocated := alloc
				switch m {
				case scheduler:
					updated(c, alloc)
				default:
					err := r.snap.withSession(ctx, engine, func(sess allocator.Session) error {
						return r.snap.reserve(sess, withAllocation(c, alloc.Status.Allocation), now)
					})
					if err != nil {
						t.Fatal(err)
					}
					switch m {
					case operatorConfirmFirst:
						r.snap.confirm(alloc)
						updated(c, alloc)
					case operatorCacheFirst:
						updated(c, alloc)
						r.snap.confirm(alloc)
					case operatorWriteFailed:
						r.snap.release(c.UID)
						allocated = c
					}
				}
				if m != scheduler && m != operatorWriteFailed {
					r.forgetClaim(key) // allocated by the claim loop
				}
				drain()
				window = append(window, allocated)
				if len(window) == live {
					gone := window[0]
					window = window[1:]
					deleted(gone)
					pod := gatedPod(gone.Name, "1")
					pods.Delete(ctx, event.TypedDeleteEvent[*corev1.Pod]{Object: pod}, q)
					drain()
				}
				peak = peak.max(r.retained())
			}
			end := r.retained()
			t.Logf("sessions built %d; peak %+v; at the end %+v", engine.sessions, peak, end)
			// Each live claim may be noted once per handler.
			bound := retained{written: live, recorded: live, toRecord: 2 * live, claims: live, pods: live}
			if peak.max(bound) != bound {
				t.Errorf("retained state grew with the history: peak %+v, bound %+v (%d claims exist)", peak, bound, live)
			}
		})
	}
}
