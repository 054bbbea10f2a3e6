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
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	claimspkg "github.com/drastack/drastack/internal/claims"
	claimsctrl "github.com/drastack/drastack/internal/controller/claims"
	"github.com/drastack/drastack/internal/operator"
	"github.com/drastack/drastack/test/cluster"
)

// The stress suite: the operator (immediate claims, and claims of gated
// pods with CEL constraints) and kube-scheduler (ordinary pods) allocate
// at the same time from the same node-local pools until every device is
// taken; then the same again with the operator restarted in the middle of
// the burst. The invariant is checked at the end: no device given twice,
// every claim allocated, every pod running.
const (
	stNamespace      = "claims-stress"
	stDriver         = "stress.claims.e2e.drastack.io"
	stClass          = "claims-stress"
	stNodes          = 4
	stDevicesPerNode = 64
	stWorkers        = 8
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
	mu          sync.Mutex
	allocatedAt map[string]time.Time
	runningAt   map[string]time.Time
	allocations map[string]string
	// deallocations counts each claim's allocation being cleared.
	deallocations map[string]int
	stop          chan struct{}
}

func startWatch(t *testing.T, c *cluster.Cluster) *stWatch {
	t.Helper()
	w := &stWatch{allocatedAt: map[string]time.Time{}, runningAt: map[string]time.Time{}, allocations: map[string]string{},
		deallocations: map[string]int{}, stop: make(chan struct{})}
	f := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace(stNamespace))
	onClaim := func(obj any) {
		cl, ok := obj.(*resourceapi.ResourceClaim)
		if !ok || cl.Status.Allocation == nil {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, seen := w.allocatedAt[cl.Name]; !seen {
			w.allocatedAt[cl.Name] = time.Now()
		}
		w.allocations[cl.Name] = resultsKey(cl.Status.Allocation.Devices.Results)
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
	if _, err := f.Resource().V1().ResourceClaims().Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: onClaim, UpdateFunc: onClaimUpdate,
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

func (w *stWatch) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	clear(w.allocatedAt)
	clear(w.runningAt)
	clear(w.allocations)
	clear(w.deallocations)
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
	immediate := map[string]string{claimspkg.AllocationLabel: claimspkg.AllocationImmediate}
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
					if err == nil && o.kind == "cel" && !claimspkg.HasGate(pod) {
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
	n, holds := 0, 0
	for _, cl := range list.Items {
		if claimspkg.IsHold(&cl) {
			holds++
			continue
		}
		if cl.Status.Allocation == nil {
			t.Errorf("claim %s is not allocated", cl.Name)
			continue
		}
		n++
	}
	if n != want {
		t.Errorf("%d claims allocated in %s, want %d", n, stNamespace, want)
	}
	if holds > 0 {
		t.Logf("%d hold claims keep kube-scheduler counting devices whose second holder gave them back", holds)
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
			if _, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, deviceClass(stClass, stDriver, ""), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
			for i := range stNodes {
				var devs []resourceapi.Device
				for j := range stDevicesPerNode {
					devs = append(devs, resourceapi.Device{Name: fmt.Sprintf("dev-%d", j), Attributes: clIntAttrs(map[string]int64{"index": int64(j)})})
				}
				clCreateSlices(ctx, t, c, clNodeSlice(stDriver, stNode(i), 1, devs))
			}
			s := &stState{}
			var err error
			if s.crc, err = client.New(c.Config, client.Options{Scheme: operator.Scheme()}); err != nil {
				t.Fatal(err)
			}
			s.restore = clApplyClaimsSpec(ctx, t, s.crc, v1alpha1.ClaimsSpec{Engine: v1alpha1.EngineNative, GatePods: ptr.To(true)})
			clCreateTemplate(ctx, t, c, stNamespace, "op-cel", nil, clCEL("size(devices) == 1"), clClaimSpec(stClass, 1, ""))
			clCreateTemplate(ctx, t, c, stNamespace, "sched", nil, nil, clClaimSpec(stClass, 1, ""))
			s.op = clStartOperator(ctx, t, c, stNamespace)
			clWaitWebhook(ctx, t, c, stNamespace, "op-cel")
			s.watch = startWatch(t, c)
			return context.WithValue(ctx, stKey{}, s)
		}).
		Assess("a burst that takes every device: nothing given twice, everything allocated", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), ctx.Value(stKey{}).(*stState)
			total := stNodes * stDevicesPerNode
			objs := stObjects(96, 64, total-96-64, "")
			races0 := clMetric(t, "drastack_claim_lost_races_total", nil)
			conflicts0 := clMetric(t, "drastack_claim_write_conflicts_total", nil)
			holds0 := clMetric(t, "drastack_claim_holds_total", nil)
			hist0 := clHistogram(t, "drastack_claim_allocation_latency_seconds")
			begin := time.Now()
			createdAt, ungated := burst(ctx, t, c, objs, nil)
			created := time.Since(begin)
			waitSettled(ctx, t, s.watch, objs)
			t.Logf("timing: %d objects created in %s, all allocated and running after %s", len(objs), created.Round(time.Millisecond), since(begin))
			if len(ungated) > 0 {
				t.Errorf("CEL pods admitted without the gate while the operator ran: %v", ungated)
			}
			checkEverythingAllocated(ctx, t, c, total)
			for _, kind := range []string{"immediate", "cel", "scheduler"} {
				d := latencies(s.watch, createdAt, objs, kind)
				what := map[string]string{
					"immediate": "immediate claim created -> allocation seen",
					"cel":       "gated CEL pod created -> Running",
					"scheduler": "ordinary pod created -> Running",
				}[kind]
				t.Logf("latency %s (n=%d): p50 %s, p99 %s, max %s", what, len(d), percentile(d, 50), percentile(d, 99), percentile(d, 100))
			}
			hist := clHistogram(t, "drastack_claim_allocation_latency_seconds")
			t.Logf("latency as the operator measures it (drastack_claim_allocation_latency_seconds, claim seen -> allocation written, all its claims): p50 %s, p99 %s",
				clQuantile(hist0, hist, 0.5), clQuantile(hist0, hist, 0.99))
			t.Logf("operator: %v lost races taken back, %v holds written, %v write conflicts, %v unresolved races; %v scheduler bindings seen in flight, %v allocations kept away from them",
				clMetric(t, "drastack_claim_lost_races_total", nil)-races0, clMetric(t, "drastack_claim_holds_total", nil)-holds0,
				clMetric(t, "drastack_claim_write_conflicts_total", nil)-conflicts0, clMetric(t, "drastack_claim_unresolved_races", nil),
				clMetric(t, "drastack_claim_scheduler_bindings_seen_total", nil), clMetric(t, "drastack_claim_busy_nodes_avoided_total", nil))
			// The gauge is set by the race watch after each allocation; a
			// race it saw while the losing write was still in flight is
			// resolved by the next check.
			if err := wait.PollUntilContextTimeout(ctx, pollInterval, 10*time.Second, true, func(context.Context) (bool, error) {
				return clMetric(t, "drastack_claim_unresolved_races", nil) == 0, nil
			}); err != nil {
				t.Errorf("%v races nobody could take back", clMetric(t, "drastack_claim_unresolved_races", nil))
			}
			return ctx
		}).
		Assess("restarting the operator in the middle of a burst loses nothing and duplicates nothing", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), ctx.Value(stKey{}).(*stState)
			// Free everything: pods take their template claims with them.
			if err := c.Client.CoreV1().Pods(stNamespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := c.Client.ResourceV1().ResourceClaims(stNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: claimspkg.AllocationLabel}); err != nil {
				t.Fatal(err)
			}
			err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, stTimeout, true, func(ctx context.Context) (bool, error) {
				cl, err1 := c.Client.ResourceV1().ResourceClaims(stNamespace).List(ctx, metav1.ListOptions{})
				pods, err2 := c.Client.CoreV1().Pods(stNamespace).List(ctx, metav1.ListOptions{})
				return err1 == nil && err2 == nil && len(cl.Items) == 0 && len(pods.Items) == 0, nil
			})
			if err != nil {
				t.Fatalf("the first burst is not gone: %v", err)
			}
			s.watch.reset()
			races0 := clMetric(t, "drastack_claim_lost_races_total", nil)
			bypassed0 := clMetric(t, "drastack_claim_bypassed_total", nil)

			objs := stObjects(64, 32, 32, "r-")
			var before map[string]string
			var restartedIn time.Duration
			begin := time.Now()
			createdAt, ungated := burst(ctx, t, c, objs, func() {
				s.watch.mu.Lock()
				before = maps.Clone(s.watch.allocations)
				s.watch.mu.Unlock()
				r := time.Now()
				s.op.stop()
				s.op = clStartOperator(ctx, t, c, stNamespace)
				restartedIn = time.Since(r)
			})
			waitSettled(ctx, t, s.watch, objs)
			t.Logf("timing: %d objects with a restart (%s) in the middle: all allocated and running after %s; %d allocations seen before the restart",
				len(objs), restartedIn.Round(time.Millisecond), since(begin), len(before))
			t.Logf("CEL pods created while the webhook was down and admitted without the gate (failurePolicy Ignore): %d", len(ungated))
			// Their claims went to whichever allocator came first; those
			// kube-scheduler allocated are reported once each.
			if err := wait.PollUntilContextTimeout(ctx, pollInterval, 30*time.Second, true, func(context.Context) (bool, error) {
				return int(clMetric(t, "drastack_claim_bypassed_total", nil)-bypassed0) == countAllocatedBy(ctx, t, c, "kube-scheduler", "r-cel-"), nil
			}); err != nil {
				t.Errorf("claims with CEL constraints allocated by kube-scheduler: %d, reported: %v", countAllocatedBy(ctx, t, c, "kube-scheduler", "r-cel-"),
					clMetric(t, "drastack_claim_bypassed_total", nil)-bypassed0)
			}
			if broken := clMetric(t, "drastack_claim_bypassed_total", map[string]string{"constraints": "broken"}); broken != 0 {
				t.Errorf("%v claims allocated by kube-scheduler break their (trivial) CEL constraint", broken)
			}
			t.Logf("of those, claims allocated by kube-scheduler instead of the operator (Event %s): %d", claimsctrl.EventBypassed, countAllocatedBy(ctx, t, c, "kube-scheduler", "r-cel-"))
			checkEverythingAllocated(ctx, t, c, len(objs))
			// Duplicates nothing: an allocation made before the restart is
			// the same after it, and every allocation taken back in this
			// burst was a lost race (none is redone because of the
			// restart).
			s.watch.mu.Lock()
			after := maps.Clone(s.watch.allocations)
			deallocs := 0
			for _, n := range s.watch.deallocations {
				deallocs += n
			}
			s.watch.mu.Unlock()
			for name, alloc := range before {
				if after[name] != alloc && s.watch.deallocations[name] == 0 {
					t.Errorf("claim %s was allocated %s before the restart and %s after, without being deallocated", name, alloc, after[name])
				}
			}
			if lost := int(clMetric(t, "drastack_claim_lost_races_total", nil) - races0); deallocs > lost {
				t.Errorf("%d allocations were taken back in the burst, but only %d lost a race", deallocs, lost)
			} else {
				t.Logf("allocations taken back in the burst: %d, all lost races", deallocs)
			}
			d := latencies(s.watch, createdAt, objs, "immediate")
			t.Logf("latency immediate claim created -> allocation seen, across the restart (n=%d): p50 %s, p99 %s", len(d), percentile(d, 50), percentile(d, 99))
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			if s, _ := ctx.Value(stKey{}).(*stState); s != nil {
				if s.watch != nil {
					close(s.watch.stop)
				}
				s.op.stop()
				s.restore()
			}
			clRemoveWebhook(ctx, t, c)
			clDeleteNamespace(ctx, t, c, stNamespace)
			if err := c.Client.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "spec.driver=" + stDriver}); err != nil {
				t.Errorf("delete slices: %v", err)
			}
			_ = c.Client.ResourceV1().DeviceClasses().Delete(ctx, stClass, metav1.DeleteOptions{})
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

// countAllocatedBy counts the allocated claims of the namespace whose name
// starts with prefix and whose allocation the field manager wrote.
func countAllocatedBy(ctx context.Context, t *testing.T, c *cluster.Cluster, manager, prefix string) int {
	t.Helper()
	list, err := c.Client.ResourceV1().ResourceClaims(stNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := range list.Items {
		cl := &list.Items[i]
		if strings.HasPrefix(cl.Name, prefix) && claimspkg.AllocatedBy(cl) == manager {
			n++
		}
	}
	return n
}
