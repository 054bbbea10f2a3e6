//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
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
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/central"
	"github.com/drastack/drastack/internal/claimpolicy"
	claimsctrl "github.com/drastack/drastack/internal/controller/claims"
	"github.com/drastack/drastack/internal/handover"
	"github.com/drastack/drastack/test/cluster"
)

// The join suite (docs/allocation-protocol.md, section 4, "Joining"): a
// pool moved into the partition by a DRAStack edit while kube-scheduler
// pods that could use it are pending joins only after kube-scheduler
// refused the canary and those pods are resolved; the operator allocates
// its devices only after the join; a central rule an administrator deletes
// is restored, reported, and joins again; an independent watcher sees no
// device in two allocations at any moment.
const (
	jnNamespace = "claims-join"
	jnDriver    = "join.claims.e2e.drastack.io"
	jnClass     = "claims-join"    // the operator's (central) class
	jnKSClass   = "claims-join-ks" // kube-scheduler's
	jnNodes     = 3
	jnDevices   = 4
	// jnReady is the node label the kube-scheduler pods wait for: they
	// are pending, with claims the moving pool could serve, until the
	// test sets it.
	jnReady = "join.e2e.drastack.io/ready"
	jnPods  = 3
)

func jnNode(i int) string { return fmt.Sprintf("claims-join-%d", i) }

// jnWatch follows, from its own informers, who holds which device of the
// driver, the revision at which each claim was first seen allocated, and
// the revisions at which each rule was seen joined.
type jnWatch struct {
	mu          sync.Mutex
	holders     map[string]string
	held        map[string][]string
	allocatedAt map[string]int64 // claim -> revision of its first allocated state
	devicesOf   map[string][]string
	joinedAt    map[string]int64 // "rule uid/generation" -> revision first seen joined
	violations  []string
	stop        chan struct{}
}

func jnStartWatch(t *testing.T, c *cluster.Cluster) *jnWatch {
	t.Helper()
	w := &jnWatch{holders: map[string]string{}, held: map[string][]string{}, allocatedAt: map[string]int64{},
		devicesOf: map[string][]string{}, joinedAt: map[string]int64{}, stop: make(chan struct{})}
	onClaim := func(obj any) {
		if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		cl, ok := obj.(*resourceapi.ResourceClaim)
		if !ok {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, d := range w.held[cl.Name] {
			if w.holders[d] == cl.Name {
				delete(w.holders, d)
			}
		}
		delete(w.held, cl.Name)
		if cl.Status.Allocation == nil || cl.DeletionTimestamp != nil && len(cl.Finalizers) == 0 {
			return
		}
		if _, seen := w.allocatedAt[cl.Name]; !seen {
			w.allocatedAt[cl.Name] = revision(cl)
		}
		var devs []string
		for _, r := range cl.Status.Allocation.Devices.Results {
			if r.Driver != jnDriver || ptr.Deref(r.AdminAccess, false) {
				continue
			}
			d := r.Pool + "/" + r.Device
			devs = append(devs, d)
			if other, taken := w.holders[d]; taken && other != cl.Name {
				w.violations = append(w.violations, fmt.Sprintf("%s given to %s while %s holds it", d, cl.Name, other))
				continue
			}
			w.holders[d] = cl.Name
			w.held[cl.Name] = append(w.held[cl.Name], d)
		}
		w.devicesOf[cl.Name] = devs
	}
	onClaimDelete := func(obj any) {
		if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if cl, ok := obj.(*resourceapi.ResourceClaim); ok {
			w.mu.Lock()
			for _, d := range w.held[cl.Name] {
				if w.holders[d] == cl.Name {
					delete(w.holders, d)
				}
			}
			delete(w.held, cl.Name)
			w.mu.Unlock()
		}
	}
	onRule := func(obj any) {
		r, ok := obj.(*resourceapi.DeviceTaintRule)
		if !ok || !handover.Joined(r) {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		key := fmt.Sprintf("%s/%d", r.UID, r.Generation)
		if _, seen := w.joinedAt[key]; !seen {
			w.joinedAt[key] = revision(r)
		}
	}
	f := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace(jnNamespace))
	if _, err := f.Resource().V1().ResourceClaims().Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: onClaim, UpdateFunc: func(_, o any) { onClaim(o) }, DeleteFunc: onClaimDelete,
	}); err != nil {
		t.Fatal(err)
	}
	g := informers.NewSharedInformerFactory(c.Client, 0)
	if _, err := g.Resource().V1().DeviceTaintRules().Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: onRule, UpdateFunc: func(_, o any) { onRule(o) },
	}); err != nil {
		t.Fatal(err)
	}
	f.Start(w.stop)
	g.Start(w.stop)
	f.WaitForCacheSync(w.stop)
	g.WaitForCacheSync(w.stop)
	return w
}

func (w *jnWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range w.violations {
		t.Errorf("seen by the watcher: %s", v)
	}
	w.violations = nil
}

// joinRevision waits until the watcher saw rule (uid, generation) joined
// and returns the revision.
func (w *jnWatch) joinRevision(ctx context.Context, t *testing.T, rule *resourceapi.DeviceTaintRule) int64 {
	t.Helper()
	key := fmt.Sprintf("%s/%d", rule.UID, rule.Generation)
	var rev int64
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, clTimeout, true, func(context.Context) (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		rev = w.joinedAt[key]
		return rev > 0, nil
	}); err != nil {
		t.Fatalf("the watcher never saw rule %s joined", rule.Name)
	}
	return rev
}

// allocation returns the revision of a claim's first allocation and its
// devices, as the watcher saw them.
func (w *jnWatch) allocation(name string) (int64, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.allocatedAt[name], w.devicesOf[name]
}

// jnWaitJoined waits until the operator's rule for the pool is joined at
// its current generation, and returns it.
func jnWaitJoined(ctx context.Context, t *testing.T, c *cluster.Cluster, pool string) *resourceapi.DeviceTaintRule {
	t.Helper()
	name := central.RuleName(jnDriver, pool)
	var rule *resourceapi.DeviceTaintRule
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, clTimeout, true, func(ctx context.Context) (bool, error) {
		r, err := c.Client.ResourceV1().DeviceTaintRules().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // retried
		}
		rule = r
		return handover.Joined(r), nil
	}); err != nil {
		jnDump(ctx, t, c)
		t.Fatalf("rule %s of pool %s not joined: %+v", name, pool, rule)
	}
	return rule
}

// jnDump logs the canary's objects and the DRAStack's Events.
func jnDump(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	pods, _ := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: "drastack.io/component=canary"})
	for _, p := range pods.Items {
		t.Logf("canary pod %s/%s node=%q nominated=%q conditions=%+v", p.Namespace, p.Name, p.Spec.NodeName, p.Status.NominatedNodeName, p.Status.Conditions)
	}
	claims, _ := c.Client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{LabelSelector: "drastack.io/component=canary"})
	for _, cl := range claims.Items {
		t.Logf("canary claim %s/%s tolerations=%+v allocation=%v", cl.Namespace, cl.Name, cl.Spec.Devices.Requests[0].Exactly.Tolerations, cl.Status.Allocation != nil)
	}
	for _, e := range clEventsOn(ctx, c, "", "DRAStack", v1alpha1.DRAStackName) {
		t.Logf("DRAStack event %s: %s", e.Reason, e.Note)
	}
	rules, _ := c.Client.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{})
	for _, r := range rules.Items {
		t.Logf("rule %s gen=%d annotations=%v labels=%v", r.Name, r.Generation, r.Annotations, r.Labels)
	}
}

// jnWaitEvent waits for an Event on the DRAStack with reason whose note
// mentions mention; on a timeout it logs the canary and the rules.
func jnWaitEvent(ctx context.Context, t *testing.T, c *cluster.Cluster, reason, mention string) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, pollInterval, clTimeout, true, func(ctx context.Context) (bool, error) {
		for _, e := range clEventsOn(ctx, c, "", "DRAStack", v1alpha1.DRAStackName) {
			if e.Reason == reason && strings.Contains(e.Note, mention) {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		jnDump(ctx, t, c)
		t.Fatalf("no %s Event on the DRAStack mentioning %q: %v", reason, mention, err)
	}
}

func jnSpec(pools ...string) v1alpha1.ClaimsSpec {
	return v1alpha1.ClaimsSpec{Engine: v1alpha1.EngineNative, GatePods: ptr.To(true),
		Central: []v1alpha1.CentralDevices{{Driver: jnDriver, Pools: pools, Classes: []string{jnClass}, AllowImmediate: true}}}
}

// jnOperatorClaim creates an immediate claim of the operator for one
// device of node i's pool.
func jnOperatorClaim(ctx context.Context, t *testing.T, c *cluster.Cluster, name string, node int) {
	t.Helper()
	clCreateClaim(ctx, t, c, jnNamespace, name, map[string]string{claimpolicy.AllocationLabel: claimpolicy.AllocationImmediate}, nil,
		clClaimSpec(jnClass, 1, fmt.Sprintf("device.attributes[%q].node == %d", jnDriver, node)))
}

// jnSchedulerPod is a pod with a kube-scheduler claim for any device of the
// driver that waits for nodes labelled jnReady.
func jnSchedulerPod(name string) *corev1.Pod {
	p := claimPod(jnNamespace, name, "ks")
	p.Spec.NodeSelector = map[string]string{jnReady: "true"}
	return p
}

func TestClaimsJoin(t *testing.T) {
	feature := features.New("a pool joins the partition only after the barrier, and a deleted central rule is restored and joins again").
		Assess("move a pool in while kube-scheduler pods that could use it wait, then delete its rule", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			var specs []cluster.NodeSpec
			for i := range jnNodes {
				specs = append(specs, cluster.NodeSpec{Name: jnNode(i)})
			}
			crc := prepareFeature(ctx, t, c, jnNamespace, specs...)
			defer clDeleteNamespace(ctx, t, c, jnNamespace)
			for _, cl := range []*resourceapi.DeviceClass{deviceClass(jnClass, jnDriver, ""), deviceClass(jnKSClass, jnDriver, "")} {
				if _, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, cl, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					t.Fatal(err)
				}
			}
			for i := range jnNodes {
				var devs []resourceapi.Device
				for d := range jnDevices {
					devs = append(devs, resourceapi.Device{Name: fmt.Sprintf("dev-%d", d), Attributes: clIntAttrs(map[string]int64{"node": int64(i), "index": int64(d)})})
				}
				clCreateSlices(ctx, t, c, clNodeSlice(jnDriver, jnNode(i), 1, devs))
			}
			defer func() {
				if err := c.Client.ResourceV1().ResourceSlices().DeleteCollection(context.WithoutCancel(ctx), metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "spec.driver=" + jnDriver}); err != nil {
					t.Errorf("delete slices: %v", err)
				}
			}()
			w := jnStartWatch(t, c)
			defer close(w.stop)

			// Pool 0 is central from the start.
			begin := time.Now()
			restore := clApplyClaimsSpec(ctx, t, crc, jnSpec(jnNode(0)))
			op := clStartOperator(ctx, t, c, jnNamespace)
			defer op.stop()
			defer restore()
			defer clRemoveWebhook(ctx, t, c)
			jnWaitJoined(ctx, t, c, jnNode(0))
			t.Logf("timing: operator started -> pool %s joined in %s", jnNode(0), since(begin))

			// Kube-scheduler pods that could use pool 1 wait (no node is
			// ready for them) while the DRAStack moves pool 1 in.
			clCreateTemplate(ctx, t, c, jnNamespace, "ks", nil, nil, clClaimSpec(jnKSClass, 1, ""))
			for i := range jnPods {
				clCreatePod(ctx, t, c, jnSchedulerPod(fmt.Sprintf("ks-%d", i)))
			}
			for i := range jnPods {
				name := fmt.Sprintf("ks-%d", i)
				if err := wait.PollUntilContextTimeout(ctx, pollInterval, clTimeout, true, func(ctx context.Context) (bool, error) {
					p, err := c.Client.CoreV1().Pods(jnNamespace).Get(ctx, name, metav1.GetOptions{})
					if err != nil {
						return false, nil //nolint:nilerr // retried
					}
					_, refused := claimpolicy.Unschedulable(p)
					return refused && len(p.Status.ResourceClaimStatuses) == 1, nil
				}); err != nil {
					t.Fatalf("pod %s: not reported unschedulable with its claim: %v", name, err)
				}
			}
			moved := time.Now()
			writeStackSpec(ctx, t, crc, clTimeout, func(s *v1alpha1.DRAStackSpec) { s.Claims = jnSpec(jnNode(0), jnNode(1)) })
			jnOperatorClaim(ctx, t, c, "op-1", 1)
			// The barrier runs, but the waiting pods hold the join: their
			// claims could get pool 1's devices in a binding cycle that
			// began before kube-scheduler saw the rule.
			jnWaitEvent(ctx, t, c, claimsctrl.EventPoolsJoining, fmt.Sprintf("%d of %d pods", jnPods, jnPods))
			t.Logf("timing: DRAStack edit -> canary refused, %d pods in the wait set, in %s", jnPods, since(moved))
			rule1, err := c.Client.ResourceV1().DeviceTaintRules().Get(ctx, central.RuleName(jnDriver, jnNode(1)), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if handover.Joined(rule1) {
				t.Fatalf("rule %s joined while pods kube-scheduler may be binding wait", rule1.Name)
			}
			if rev, devs := w.allocation("op-1"); rev != 0 {
				t.Fatalf("claim op-1 allocated %v before pool %s joined", devs, jnNode(1))
			}
			// Nodes 1 and 2 become ready: kube-scheduler binds the pods,
			// which resolves them (pool 1 is tainted for it by now).
			released := time.Now()
			for _, i := range []int{1, 2} {
				clUpdateNode(ctx, t, c, jnNode(i), func(n *corev1.Node) { n.Labels[jnReady] = "true" })
			}
			rule1 = jnWaitJoined(ctx, t, c, jnNode(1))
			joinRev := w.joinRevision(ctx, t, rule1)
			t.Logf("timing: pods released -> pool %s joined in %s (edit -> join %s)", jnNode(1), since(released), since(moved))
			jnWaitEvent(ctx, t, c, claimsctrl.EventPoolsJoined, rule1.Name)
			clWaitClaim(ctx, t, c, jnNamespace, "op-1", "allocated", clAllocated)
			// The watch may lag the API; wait until it saw the allocation.
			var opRev int64
			var opDevs []string
			if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, clTimeout, true, func(context.Context) (bool, error) {
				opRev, opDevs = w.allocation("op-1")
				return opRev > 0, nil
			}); err != nil {
				t.Fatal("the watcher never saw op-1 allocated")
			}
			if opRev <= joinRev {
				t.Errorf("op-1 allocated %v at revision %d, not after pool %s joined at revision %d", opDevs, opRev, jnNode(1), joinRev)
			}
			for i := range jnPods {
				name := fmt.Sprintf("ks-%d", i)
				p, err := c.Client.CoreV1().Pods(jnNamespace).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if p.Spec.NodeName == "" {
					// Bound or not, its claim must not share a device.
					t.Logf("pod %s still pending: %v", name, p.Status.Conditions)
				}
			}
			w.check(t)

			// Pool 1's rule is deleted (as the garbage collector: the
			// operator's admission policy refuses an administrator): the
			// operator puts it back, says so, and the pool joins again
			// before the operator allocates from it.
			before := clMetric(t, "drastack_central_rules_restored_total", nil)
			deleted := time.Now()
			if err := garbageCollectorClient(t, c).ResourceV1().DeviceTaintRules().Delete(ctx, rule1.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			jnOperatorClaim(ctx, t, c, "op-2", 1)
			jnWaitEvent(ctx, t, c, claimsctrl.EventTaintRestored, rule1.Name+" (deleted)")
			t.Logf("timing: rule deleted -> restored and reported in %s", since(deleted))
			if got := clMetric(t, "drastack_central_rules_restored_total", nil) - before; got < 1 {
				t.Errorf("drastack_central_rules_restored_total grew by %v, want at least 1", got)
			}
			again := jnWaitJoined(ctx, t, c, jnNode(1))
			if again.UID == rule1.UID {
				t.Fatalf("rule %s not recreated", again.Name)
			}
			rejoinRev := w.joinRevision(ctx, t, again)
			t.Logf("timing: rule deleted -> restored rule joined in %s", since(deleted))
			clWaitClaim(ctx, t, c, jnNamespace, "op-2", "allocated", clAllocated)
			var op2Rev int64
			var op2Devs []string
			if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, clTimeout, true, func(context.Context) (bool, error) {
				op2Rev, op2Devs = w.allocation("op-2")
				return op2Rev > 0, nil
			}); err != nil {
				t.Fatal("the watcher never saw op-2 allocated")
			}
			if op2Rev <= rejoinRev {
				t.Errorf("op-2 allocated %v at revision %d, not after the restored rule joined at revision %d", op2Devs, op2Rev, rejoinRev)
			}
			if n := clCheckNoRaces(ctx, t, c); n < 2+jnPods {
				t.Errorf("%d claims allocated, want at least %d", n, 2+jnPods)
			}
			w.check(t)
			t.Logf("canaries: refused %v, bound %v; joins %v",
				clMetric(t, "drastack_central_join_canaries_total", map[string]string{"outcome": "refused"}),
				clMetric(t, "drastack_central_join_canaries_total", map[string]string{"outcome": "bound"}),
				clMetric(t, "drastack_central_joins_total", nil))

			// Remove what holds devices before the DRAStack goes.
			for i := range jnPods {
				_ = c.Client.CoreV1().Pods(jnNamespace).Delete(ctx, fmt.Sprintf("ks-%d", i), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			}
			for _, n := range []string{"op-1", "op-2"} {
				_ = c.Client.ResourceV1().ResourceClaims(jnNamespace).Delete(ctx, n, metav1.DeleteOptions{})
			}
			clWaitDriverFree(ctx, t, c, jnNamespace, jnDriver)
			return ctx
		}).Feature()
	testenv.Test(t, feature)
}
