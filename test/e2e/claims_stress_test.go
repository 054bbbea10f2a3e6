//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/claimpolicy"
	claimsctrl "github.com/drastack/drastack/internal/controller/claims"
	"github.com/drastack/drastack/internal/operator"
	"github.com/drastack/drastack/test/cluster"
)

// The stress suite: the operator (immediate claims, and claims of gated
// pods with CEL constraints, on central devices) and kube-scheduler
// (ordinary pods, on the other devices of the same nodes) allocate at the
// same time until every device is taken, in five consecutive bursts, the
// third with the operator restarted in its middle. A watcher checks the
// invariant at every change it sees, not only at the end: no device is
// ever held by two claims at once; at the end every claim is allocated and
// every pod runs.
const (
	stNamespace      = "claims-stress"
	stDriver         = "stress.claims.e2e.drastack.io"
	stClass          = "claims-stress"
	stOpenDriver     = "open.stress.claims.e2e.drastack.io"
	stOpenClass      = "claims-stress-open"
	stNodes          = 4
	stDevicesPerNode = 24
	stWorkers        = 8
	stBursts         = 5
	stRestartBurst   = 2
	stTimeout        = 4 * time.Minute
)

func stNode(i int) string { return fmt.Sprintf("claims-stress-%d", i) }

type stKey struct{}

type stState struct {
	crc     client.Client
	op      *clOperator
	restore func()
	watch   *stWatch
}

// stWatch records when each claim is first seen allocated and each pod
// first seen Running, from informers (the test's own view, independent of
// the operator's metrics).
type stWatch struct {
	mu     sync.Mutex
	seenAt map[string]time.Time // claim first seen (the watch's ADDED event)
	// protected tells, by class, how many claims of the current burst
	// (names starting with prefix) had the delete-protection finalizer in
	// their ADDED event (added at creation by the claim webhook) and how
	// many did not.
	protected   map[string][2]int
	prefix      string
	allocatedAt map[string]time.Time
	runningAt   map[string]time.Time
	allocations map[string]string
	// deallocations counts each claim's allocation being cleared.
	deallocations map[string]int
	// holders maps each device to the claim whose allocation holds it, as
	// the watcher sees claims change; violations lists every moment a
	// second claim held a device already held.
	holders    map[string]string
	held       map[string][]string
	violations []string
	reported   map[string]bool
	stop       chan struct{}
}

// track updates who holds which device after a claim changed (nil
// allocation: released) and records a violation when a device is taken
// while another claim holds it.
func (w *stWatch) track(name string, results []resourceapi.DeviceRequestAllocationResult) {
	for _, d := range w.held[name] {
		if w.holders[d] == name {
			delete(w.holders, d)
		}
	}
	delete(w.held, name)
	for _, r := range results {
		if r.AdminAccess != nil && *r.AdminAccess {
			continue
		}
		d := r.Driver + "/" + r.Pool + "/" + r.Device
		if other, ok := w.holders[d]; ok && other != name {
			v := fmt.Sprintf("%s given to %s while %s holds it", d, name, other)
			if !w.reported[v] {
				w.reported[v] = true
				w.violations = append(w.violations, v)
			}
			continue
		}
		w.holders[d] = name
		w.held[name] = append(w.held[name], d)
	}
}

func startWatch(t *testing.T, c *cluster.Cluster) *stWatch {
	t.Helper()
	w := &stWatch{seenAt: map[string]time.Time{}, protected: map[string][2]int{}, allocatedAt: map[string]time.Time{}, runningAt: map[string]time.Time{}, allocations: map[string]string{},
		deallocations: map[string]int{}, holders: map[string]string{}, held: map[string][]string{}, reported: map[string]bool{}, stop: make(chan struct{})}
	f := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace(stNamespace))
	onClaim := func(obj any) {
		cl, ok := obj.(*resourceapi.ResourceClaim)
		if !ok {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, seen := w.seenAt[cl.Name]; !seen {
			w.seenAt[cl.Name] = time.Now()
		}
		if cl.Status.Allocation == nil {
			w.track(cl.Name, nil)
			return
		}
		w.track(cl.Name, cl.Status.Allocation.Devices.Results)
		if _, seen := w.allocatedAt[cl.Name]; !seen {
			w.allocatedAt[cl.Name] = time.Now()
		}
		w.allocations[cl.Name] = resultsKey(cl.Status.Allocation.Devices.Results)
	}
	onClaimAdd := func(obj any) {
		if cl, ok := obj.(*resourceapi.ResourceClaim); ok {
			w.mu.Lock()
			if rs := cl.Spec.Devices.Requests; w.prefix != "" && strings.HasPrefix(cl.Name, w.prefix) && len(rs) > 0 && rs[0].Exactly != nil {
				n := w.protected[rs[0].Exactly.DeviceClassName]
				if claimpolicy.HasFinalizer(cl) {
					n[0]++
				} else {
					n[1]++
				}
				w.protected[rs[0].Exactly.DeviceClassName] = n
			}
			w.mu.Unlock()
		}
		onClaim(obj)
	}
	onPod := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Status.Phase != corev1.PodRunning {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, seen := w.runningAt[p.Name]; !seen {
			w.runningAt[p.Name] = time.Now()
		}
	}
	onClaimUpdate := func(old, cur any) {
		o, ok1 := old.(*resourceapi.ResourceClaim)
		n, ok2 := cur.(*resourceapi.ResourceClaim)
		if ok1 && ok2 && o.Status.Allocation != nil && n.Status.Allocation == nil {
			w.mu.Lock()
			w.deallocations[n.Name]++
			w.mu.Unlock()
		}
		onClaim(cur)
	}
	onClaimDelete := func(obj any) {
		if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if cl, ok := obj.(*resourceapi.ResourceClaim); ok {
			w.mu.Lock()
			w.track(cl.Name, nil)
			w.mu.Unlock()
		}
	}
	if _, err := f.Resource().V1().ResourceClaims().Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: onClaimAdd, UpdateFunc: onClaimUpdate, DeleteFunc: onClaimDelete,
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Core().V1().Pods().Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: onPod, UpdateFunc: func(_, o any) { onPod(o) },
	}); err != nil {
		t.Fatal(err)
	}
	f.Start(w.stop)
	f.WaitForCacheSync(w.stop)
	return w
}

// reset forgets the timings of the last burst and follows the burst whose
// objects' names start with prefix; who holds what is kept, since the
// watcher follows the cluster, not the bursts.
func (w *stWatch) reset(prefix string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.prefix = prefix
	clear(w.seenAt)
	clear(w.protected)
	clear(w.allocatedAt)
	clear(w.runningAt)
	clear(w.allocations)
	clear(w.deallocations)
}

// checkViolations fails the test for every double allocation seen so far.
func (w *stWatch) checkViolations(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range w.violations {
		t.Errorf("seen by the watcher: %s", v)
	}
	w.violations = nil
}

func resultsKey(rs []resourceapi.DeviceRequestAllocationResult) string {
	var parts []string
	for _, r := range rs {
		parts = append(parts, r.Driver+"/"+r.Pool+"/"+r.Device)
	}
	slices.Sort(parts)
	return fmt.Sprint(parts)
}

// stObject is one thing the burst creates.
type stObject struct {
	kind string // "immediate", "cel", "scheduler"
	name string
}

// burst creates the objects in a shuffled order with stWorkers in
// parallel, calling midway once half of them exist. It returns when each
// was created, and the CEL pods the API server admitted without the gate.
func burst(ctx context.Context, t *testing.T, c *cluster.Cluster, objs []stObject, midway func()) (map[string]time.Time, []string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(len(objs)), 7))
	rng.Shuffle(len(objs), func(i, j int) { objs[i], objs[j] = objs[j], objs[i] })
	var (
		mu        sync.Mutex
		createdAt = map[string]time.Time{}
		ungated   []string
		next      atomic.Int64
		done      atomic.Int64
		once      sync.Once
		wg        sync.WaitGroup
		errs      = make(chan error, len(objs))
	)
	immediate := map[string]string{claimpolicy.AllocationLabel: claimpolicy.AllocationImmediate}
	for range stWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(objs) {
					return
				}
				o := objs[i]
				begin := time.Now()
				var err error
				switch o.kind {
				case "immediate":
					_, err = c.Client.ResourceV1().ResourceClaims(stNamespace).Create(ctx, &resourceapi.ResourceClaim{
						ObjectMeta: metav1.ObjectMeta{Namespace: stNamespace, Name: o.name, Labels: immediate},
						Spec:       clClaimSpec(stClass, 1, ""),
					}, metav1.CreateOptions{})
				case "cel", "scheduler":
					template := map[string]string{"cel": "op-cel", "scheduler": "sched"}[o.kind]
					var pod *corev1.Pod
					pod, err = c.Client.CoreV1().Pods(stNamespace).Create(ctx, claimPod(stNamespace, o.name, template), metav1.CreateOptions{})
					if err == nil && o.kind == "cel" && !claimpolicy.HasGate(pod) {
						mu.Lock()
						ungated = append(ungated, o.name)
						mu.Unlock()
					}
				}
				if err != nil {
					errs <- fmt.Errorf("create %s %s: %w", o.kind, o.name, err)
					continue
				}
				mu.Lock()
				createdAt[o.name] = begin
				mu.Unlock()
				if done.Add(1) == int64(len(objs)/2) && midway != nil {
					once.Do(midway)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	return createdAt, ungated
}

func stObjects(immediate, cel, scheduler int, prefix string) []stObject {
	var objs []stObject
	for i := range immediate {
		objs = append(objs, stObject{"immediate", fmt.Sprintf("%simm-%d", prefix, i)})
	}
	for i := range cel {
		objs = append(objs, stObject{"cel", fmt.Sprintf("%scel-%d", prefix, i)})
	}
	for i := range scheduler {
		objs = append(objs, stObject{"scheduler", fmt.Sprintf("%ssch-%d", prefix, i)})
	}
	return objs
}

// waitSettled waits until every immediate claim is allocated and every pod
// runs.
func waitSettled(ctx context.Context, t *testing.T, w *stWatch, objs []stObject) {
	t.Helper()
	var missing []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, stTimeout, true, func(context.Context) (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		missing = missing[:0]
		for _, o := range objs {
			seen := false
			if o.kind == "immediate" {
				_, seen = w.allocatedAt[o.name]
			} else {
				_, seen = w.runningAt[o.name]
			}
			if !seen {
				missing = append(missing, o.name)
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		t.Fatalf("%d of %d objects not allocated or running: %v (first: %v)", len(missing), len(objs), err, missing[:min(5, len(missing))])
	}
}

// seenLatencies returns, for every immediate claim, the time from the
// watcher first seeing it to the watcher seeing it allocated: both ends
// cross the same watch, so its delay cancels out, and neither includes
// the test's own create request. It also returns the window in which the
// claims were created and allocated.
func seenLatencies(w *stWatch, createdAt map[string]time.Time, objs []stObject) ([]time.Duration, time.Time, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var (
		out         []time.Duration
		first, last time.Time
	)
	for _, o := range objs {
		if o.kind != "immediate" {
			continue
		}
		seen, ok1 := w.seenAt[o.name]
		end, ok2 := w.allocatedAt[o.name]
		if !ok1 || !ok2 {
			continue
		}
		out = append(out, end.Sub(seen))
		if start := createdAt[o.name]; first.IsZero() || start.Before(first) {
			first = start
		}
		if end.After(last) {
			last = end
		}
	}
	slices.Sort(out)
	return out, first, last
}

// latencies returns end - start of every object of a kind.
func latencies(w *stWatch, createdAt map[string]time.Time, objs []stObject, kind string) []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []time.Duration
	for _, o := range objs {
		if o.kind != kind {
			continue
		}
		end, ok := w.runningAt[o.name]
		if kind == "immediate" {
			end, ok = w.allocatedAt[o.name]
		}
		if start, created := createdAt[o.name]; ok && created {
			out = append(out, end.Sub(start))
		}
	}
	slices.Sort(out)
	return out
}

func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := (len(d)*p + 99) / 100
	return d[max(0, min(len(d)-1, i-1))].Round(time.Millisecond)
}

// checkEverythingAllocated: every claim of the namespace is allocated and
// the cluster gives nothing twice; returns the allocated claims.
func checkEverythingAllocated(ctx context.Context, t *testing.T, c *cluster.Cluster, want int) {
	t.Helper()
	list, err := c.Client.ResourceV1().ResourceClaims(stNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, cl := range list.Items {
		if cl.Status.Allocation == nil {
			t.Errorf("claim %s is not allocated", cl.Name)
			continue
		}
		n++
	}
	if n != want {
		t.Errorf("%d claims allocated in %s, want %d", n, stNamespace, want)
	}
	clCheckNoRaces(ctx, t, c)
}

func TestClaimsStress(t *testing.T) {
	feature := features.New("operator and kube-scheduler allocating from the same pools at once").
		Setup(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			createNamespace(ctx, t, c.Client, stNamespace)
			if err := c.InstallCRDs(CRDDir); err != nil {
				t.Fatal(err)
			}
			var specs []cluster.NodeSpec
			for i := range stNodes {
				specs = append(specs, cluster.NodeSpec{Name: stNode(i)})
			}
			if err := c.AddNodes(ctx, specs...); err != nil {
				t.Fatal(err)
			}
			for _, dc := range []*resourceapi.DeviceClass{deviceClass(stClass, stDriver, ""), deviceClass(stOpenClass, stOpenDriver, "")} {
				if _, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					t.Fatal(err)
				}
			}
			for i := range stNodes {
				var devs []resourceapi.Device
				for j := range stDevicesPerNode {
					devs = append(devs, resourceapi.Device{Name: fmt.Sprintf("dev-%d", j), Attributes: clIntAttrs(map[string]int64{"index": int64(j)})})
				}
				clCreateSlices(ctx, t, c, clNodeSlice(stDriver, stNode(i), 1, devs), clNodeSlice(stOpenDriver, stNode(i), 1, devs))
			}
			s := &stState{}
			var err error
			if s.crc, err = client.New(c.Config, client.Options{Scheme: operator.Scheme()}); err != nil {
				t.Fatal(err)
			}
			s.restore = clApplyClaimsSpec(ctx, t, s.crc, v1alpha1.ClaimsSpec{Engine: v1alpha1.EngineNative, GatePods: ptr.To(true),
				Central: []v1alpha1.CentralDevices{{Driver: stDriver, Classes: []string{stClass}, AllowImmediate: true}}})
			clCreateTemplate(ctx, t, c, stNamespace, "op-cel", nil, clCEL("size(devices) == 1"), clClaimSpec(stClass, 1, ""))
			clCreateTemplate(ctx, t, c, stNamespace, "sched", nil, nil, clClaimSpec(stOpenClass, 1, ""))
			s.op = clStartOperator(ctx, t, c, stNamespace)
			clWaitWebhook(ctx, t, c, stNamespace, "op-cel")
			clWaitCentral(ctx, t, c, stDriver)
			// The bursts measure allocation once the pools are the
			// operator's: the join barrier at start is timed apart.
			clWaitJoined(ctx, t, c, stDriver)
			s.watch = startWatch(t, c)
			return context.WithValue(ctx, stKey{}, s)
		}).
		Assess("five bursts that take every device, the operator restarted in the middle of one: nothing ever given twice, everything allocated", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), ctx.Value(stKey{}).(*stState)
			perKind := stNodes * stDevicesPerNode
			floor := newPatchFloor(ctx, t, c)
			var immediate, seen, windowFloor []time.Duration
			for b := range stBursts {
				prefix := fmt.Sprintf("b%d-", b)
				s.watch.reset(prefix)
				objs := stObjects(perKind/2, perKind/2, perKind, prefix)
				hist0 := clHistogram(t, "drastack_claim_allocation_latency_seconds", "Allocated")
				var midway func()
				var restartedIn time.Duration
				var before map[string]string
				if b == stRestartBurst {
					midway = func() {
						s.watch.mu.Lock()
						before = maps.Clone(s.watch.allocations)
						s.watch.mu.Unlock()
						r := time.Now()
						s.op.stop()
						s.op = clStartOperator(ctx, t, c, stNamespace)
						restartedIn = time.Since(r)
					}
				}
				stopFloor := floor.measure(ctx)
				begin := time.Now()
				createdAt, ungated := burst(ctx, t, c, objs, midway)
				created := time.Since(begin)
				waitSettled(ctx, t, s.watch, objs)
				stopFloor()
				t.Logf("burst %d: %d objects created in %s, all allocated and running after %s", b, len(objs), created.Round(time.Millisecond), since(begin))
				if b == stRestartBurst {
					t.Logf("burst %d: operator restarted in %s with %d allocations seen before; CEL pods admitted ungated while the webhook was down: %d",
						b, restartedIn.Round(time.Millisecond), len(before), len(ungated))
					s.watch.mu.Lock()
					for name, alloc := range before {
						if got := s.watch.allocations[name]; got != alloc && s.watch.deallocations[name] == 0 {
							t.Errorf("claim %s was allocated %s before the restart and %s after, without being deallocated", name, alloc, got)
						}
					}
					s.watch.mu.Unlock()
				} else {
					if len(ungated) > 0 {
						t.Errorf("CEL pods admitted without the gate while the operator ran: %v", ungated)
					}
					// The claim webhook protects the operator's claims at
					// creation, and only them.
					s.watch.mu.Lock()
					op, sched := s.watch.protected[stClass], s.watch.protected[stOpenClass]
					s.watch.mu.Unlock()
					if op[1] > 0 || op[0] != perKind {
						t.Errorf("operator claims created with the delete-protection finalizer: %d, without: %d; want all %d with", op[0], op[1], perKind)
					}
					if sched[0] > 0 {
						t.Errorf("%d of kube-scheduler's claims were created with the delete-protection finalizer", sched[0])
					}
				}
				s.watch.checkViolations(t)
				checkEverythingAllocated(ctx, t, c, 2*perKind)
				countBy := map[string]int{}
				list, err := c.Client.ResourceV1().ResourceClaims(stNamespace).List(ctx, metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				for i := range list.Items {
					cl := &list.Items[i]
					by := claimpolicy.AllocatedBy(cl)
					countBy[by]++
					central := cl.Status.Allocation != nil && cl.Status.Allocation.Devices.Results[0].Driver == stDriver
					if central != (by == claimsctrl.FieldManager) {
						t.Errorf("claim %s allocated by %q with a device of %s: central devices are the operator's alone", cl.Name, by, cl.Status.Allocation.Devices.Results[0].Driver)
					}
				}
				t.Logf("burst %d: allocations by writer: %v", b, countBy)
				for _, kind := range []string{"immediate", "cel", "scheduler"} {
					d := latencies(s.watch, createdAt, objs, kind)
					what := map[string]string{
						"immediate": "immediate claim created -> allocation seen",
						"cel":       "gated CEL pod created -> Running",
						"scheduler": "ordinary pod created -> Running",
					}[kind]
					t.Logf("burst %d: latency %s (n=%d): p50 %s, p99 %s, max %s", b, what, len(d), percentile(d, 50), percentile(d, 99), percentile(d, 100))
					if kind == "immediate" && b != stRestartBurst {
						immediate = append(immediate, d...)
					}
				}
				if b != stRestartBurst {
					d, from, to := seenLatencies(s.watch, createdAt, objs)
					wf := floor.result(from, to)
					t.Logf("burst %d: immediate claim seen -> allocation seen (n=%d): p50 %s, p99 %s; trivial status patch while they were allocated (n=%d): p50 %s, p99 %s",
						b, len(d), percentile(d, 50), percentile(d, 99), len(wf), percentile(wf, 50), percentile(wf, 99))
					seen = append(seen, d...)
					windowFloor = append(windowFloor, wf...)
				}
				hist := clHistogram(t, "drastack_claim_allocation_latency_seconds", "Allocated")
				t.Logf("burst %d: claim seen -> allocation written, as the operator measures it: p50 %s, p99 %s", b, clQuantile(hist0, hist, 0.5), clQuantile(hist0, hist, 0.99))
				clearStress(ctx, t, c)
			}
			slices.Sort(immediate)
			f := floor.result(time.Time{}, time.Time{})
			slices.Sort(seen)
			slices.Sort(windowFloor)
			// The measure: claim created -> allocation written, both
			// as one independent watch delivers them, against the floor the
			// claims stood on (the patches sent while they were allocated);
			// the ratio to the whole-burst floor is printed beside it.
			t.Logf("latency claim created -> allocation written (immediate claims, the claim's creation and its allocation as an independent watch delivers them), bursts without restart (n=%d): p50 %s, p99 %s; the API server's own latency for a trivial status patch while those claims were allocated (n=%d): p50 %s, p99 %s; ratio of the p99s %.1fx (%.1fx to the whole-burst floor below)",
				len(seen), percentile(seen, 50), percentile(seen, 99), len(windowFloor), percentile(windowFloor, 50), percentile(windowFloor, 99),
				float64(percentile(seen, 99))/float64(max(percentile(windowFloor, 99), time.Millisecond)),
				float64(percentile(seen, 99))/float64(max(percentile(floor.result(time.Time{}, time.Time{}), 99), time.Millisecond)))
			t.Logf("latency immediate claim create request sent -> allocation seen, bursts without restart (n=%d): p50 %s, p99 %s; the API server's own latency for a trivial status patch in the same bursts (n=%d): p50 %s, p99 %s; ratio of the p99s %.1fx",
				len(immediate), percentile(immediate, 50), percentile(immediate, 99), len(f), percentile(f, 50), percentile(f, 99),
				float64(percentile(immediate, 99))/float64(max(percentile(f, 99), time.Millisecond)))
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			if s, _ := ctx.Value(stKey{}).(*stState); s != nil {
				if s.watch != nil {
					close(s.watch.stop)
				}
				// The claims go first, while the operator runs: a central
				// device leaves the partition (and the DRAStack goes) only
				// once no allocation holds it.
				clDeleteNamespace(ctx, t, c, stNamespace)
				s.restore()
				s.op.stop()
			}
			clRemoveWebhook(ctx, t, c)
			clDeleteNamespace(ctx, t, c, stNamespace)
			for _, d := range []string{stDriver, stOpenDriver} {
				if err := c.Client.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "spec.driver=" + d}); err != nil {
					t.Errorf("delete slices: %v", err)
				}
			}
			_ = c.Client.ResourceV1().DeviceClasses().Delete(ctx, stClass, metav1.DeleteOptions{})
			_ = c.Client.ResourceV1().DeviceClasses().Delete(ctx, stOpenClass, metav1.DeleteOptions{})
			for i := range stNodes {
				if err := c.DeleteNode(ctx, stNode(i)); err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("%v", err)
				}
			}
			return ctx
		}).
		Feature()
	testenv.Test(t, feature)
}

// clearStress deletes every pod and claim of the stress namespace and
// waits until they are gone.
func clearStress(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	if err := c.Client.CoreV1().Pods(stNamespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)},
		metav1.ListOptions{LabelSelector: "!e2e.drastack.io/floor"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Client.ResourceV1().ResourceClaims(stNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: claimpolicy.AllocationLabel}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, stTimeout, true, func(ctx context.Context) (bool, error) {
		cl, err1 := c.Client.ResourceV1().ResourceClaims(stNamespace).List(ctx, metav1.ListOptions{})
		pods, err2 := c.Client.CoreV1().Pods(stNamespace).List(ctx, metav1.ListOptions{})
		return err1 == nil && err2 == nil && len(cl.Items) == 0 && len(pods.Items) <= 1, nil
	})
	if err != nil {
		t.Fatalf("the burst is not gone: %v", err)
	}
}

// patchFloor measures the API server's own latency for a trivial status
// patch (a condition of a pod without claims), under the same load as the
// bursts: the floor any allocation latency stands on.
type patchFloor struct {
	c   *cluster.Cluster
	pod string
	mu  sync.Mutex
	d   []floorSample
}

type floorSample struct {
	at time.Time // when the patch was sent
	d  time.Duration
}

func newPatchFloor(ctx context.Context, t *testing.T, c *cluster.Cluster) *patchFloor {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: stNamespace, Name: "patch-floor", Labels: map[string]string{"e2e.drastack.io/floor": "true"}},
		Spec:       corev1.PodSpec{NodeName: stNode(0), Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}}},
	}
	if _, err := c.Client.CoreV1().Pods(stNamespace).Create(ctx, p, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return &patchFloor{c: c, pod: p.Name}
}

// measure patches the pod's status every 50 ms until the returned func is
// called.
func (f *patchFloor) measure(ctx context.Context) func() {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"e2e.drastack.io/Floor","status":"True","message":"%d"}]}}`, i)
			begin := time.Now()
			_, err := f.c.Client.CoreV1().Pods(stNamespace).Patch(ctx, f.pod, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
			if err == nil {
				f.mu.Lock()
				f.d = append(f.d, floorSample{at: begin, d: time.Since(begin)})
				f.mu.Unlock()
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// result returns the latencies of the patches sent in [from, to] (zero
// times: no bound), sorted.
func (f *patchFloor) result(from, to time.Time) []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []time.Duration
	for _, s := range f.d {
		if (from.IsZero() || !s.at.Before(from)) && (to.IsZero() || !s.at.After(to)) {
			out = append(out, s.d)
		}
	}
	slices.Sort(out)
	return out
}
