//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/central"
	"github.com/drastack/drastack/internal/claimpolicy"
	claimsctrl "github.com/drastack/drastack/internal/controller/claims"
	"github.com/drastack/drastack/internal/fence"
	"github.com/drastack/drastack/internal/handover"
	"github.com/drastack/drastack/internal/operator"
	"github.com/drastack/drastack/test/cluster"
)

// The chaos suite (issue 20, "Done when", second point): the operator
// binary runs as separate processes under its own ServiceAccount, with the
// Deployment's flags (leader election on), behind a stand-in Service; the
// test kills, pauses and restarts them, takes the webhook away and moves
// devices in and out of the partition while a steady stream of operator
// claims (immediate claims, gated pods with a CEL constraint) and
// kube-scheduler claims (ordinary pods) arrives. An independent watcher
// checks at every change it sees that no device is in two allocations and
// that only the operator allocates central devices and operator claims; at
// the end of every part each claim is allocated and each pod runs.
//
// Devices: node i has a slice of chDriver (96 devices, attributes index
// and node) and one of chOpenDriver. The pools of nodes 0-2 of chDriver
// are central; node 3's (the mover) is not, until part (c) moves it in.
const (
	chNamespaceA   = "chaos-a"
	chNamespaceB   = "chaos-b"
	chDriver       = "chaos.e2e.drastack.io"
	chOpenDriver   = "open.chaos.e2e.drastack.io"
	chCentralClass = "chaos-central" // created and owned by the operator
	chOpenClass    = "chaos-open"
	chAnyClass     = "chaos-any" // both drivers: kube-scheduler's, may take any untainted device
	chNodes        = 4
	chMoverNode    = 3
	chDevices      = 96
	// chInterval is the stream's pace: two objects a second.
	chInterval      = 500 * time.Millisecond
	chSettleTimeout = 3 * time.Minute
	// chJoinedAnnotation is what the join barrier writes on a central
	// DeviceTaintRule once its pools joined the partition.
	chJoinedAnnotation = handover.JoinedAnnotation
)

// chPair: the two devices of a CEL claim are adjacent, which
// kube-scheduler cannot check (it does not read the annotation).
var chPair = "size(devices) == 2 && devices.map(d, d.attributes['" + chDriver + "'].index).max() - devices.map(d, d.attributes['" + chDriver + "'].index).min() == 1"

// chGetClaim reads a claim, nil when it cannot.
func chGetClaim(ctx context.Context, c *cluster.Cluster, o chObject) *resourceapi.ResourceClaim {
	cl, err := c.Client.ResourceV1().ResourceClaims(o.ns).Get(ctx, o.name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return cl
}

// chNodeSelector selects the devices of chDriver's pool of node i.
func chNodeSelector(i int) string {
	return fmt.Sprintf("device.driver == %q && device.attributes[%q].node == %d", chDriver, chDriver, i)
}

// chMoverSelector selects the devices of the mover pool.
var chMoverSelector = chNodeSelector(chMoverNode)

// chMix is the stream of parts (a), (d) and (e): per six objects one
// immediate claim, two gated CEL pods (two devices each) and three
// ordinary pods.
var chMix = []string{kindImmediate, kindCEL, kindOpen, kindAny, kindCEL, kindOpen}

func chNode(i int) string { return fmt.Sprintf("chaos-%d", i) }

// chCentralNodes are the nodes whose pools of chDriver are central from
// the start.
func chCentralNodes() []int {
	var out []int
	for i := range chNodes {
		if i != chMoverNode {
			out = append(out, i)
		}
	}
	return out
}

// chCentralPools are the pools of chDriver that are central from the start.
func chCentralPools() []string {
	var out []string
	for _, i := range chCentralNodes() {
		out = append(out, chNode(i))
	}
	return out
}

type chKeyT struct{}

// chState is the suite's state across its parts.
type chState struct {
	crc      client.Client
	exe      string
	id       *cluster.OperatorIdentity
	svc      *cluster.Service
	stopSvc  context.CancelFunc
	replicas []*chReplica
	// started is every replica ever started, for the test's cleanup.
	started    []*chReplica
	replicaSeq int
	logs       []string
	logDir     string
	watch      *chWatch
	restore    func()
	all        []chObject
	begin      time.Time
}

func TestClaimsChaos(t *testing.T) {
	// The suite's state outside the context too: a Setup that fails
	// returns no context, and a replica left running would go on
	// reconciling the DRAStack of every later suite.
	var state *chState
	t.Cleanup(func() {
		if state == nil {
			return
		}
		for _, r := range state.started {
			if err := r.proc.Kill(); err != nil {
				t.Errorf("kill replica %s: %v", r.name, err)
			}
		}
	})
	feature := features.New("claims under chaos: the operator killed, paused and restarted, the webhook down, rules deleted, pools moved").
		Setup(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			s := &chState{begin: time.Now(), logDir: c.LogDir}
			state = s
			if err := c.InstallCRDs(CRDDir); err != nil {
				t.Fatal(err)
			}
			createNamespace(ctx, t, c.Client, chNamespaceA)
			createNamespace(ctx, t, c.Client, chNamespaceB)
			var specs []cluster.NodeSpec
			for i := range chNodes {
				specs = append(specs, cluster.NodeSpec{Name: chNode(i)})
			}
			if err := c.AddNodes(ctx, specs...); err != nil {
				t.Fatal(err)
			}
			for _, dc := range []*resourceapi.DeviceClass{deviceClass(chOpenClass, chOpenDriver, ""), chAnyDeviceClass()} {
				if _, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					t.Fatal(err)
				}
			}
			for i := range chNodes {
				var devs []resourceapi.Device
				for j := range chDevices {
					devs = append(devs, resourceapi.Device{Name: fmt.Sprintf("dev-%d", j), Attributes: clIntAttrs(map[string]int64{"index": int64(j), "node": int64(i)})})
				}
				clCreateSlices(ctx, t, c, clNodeSlice(chDriver, chNode(i), 1, devs), clNodeSlice(chOpenDriver, chNode(i), 1, devs))
			}
			var err error
			if s.crc, err = client.New(c.Config, client.Options{Scheme: operator.Scheme()}); err != nil {
				t.Fatal(err)
			}
			s.restore = clApplyClaimsSpec(ctx, t, s.crc, chSpec(chCentralPools()))
			for _, ns := range []string{chNamespaceA, chNamespaceB} {
				clCreateTemplate(ctx, t, c, ns, "cel", nil, clCEL(chPair), clClaimSpec(chCentralClass, 2, ""))
				clCreateTemplate(ctx, t, c, ns, "open", nil, nil, clClaimSpec(chOpenClass, 1, ""))
				clCreateTemplate(ctx, t, c, ns, "any", nil, nil, clClaimSpec(chAnyClass, 1, ""))
				clCreateTemplate(ctx, t, c, ns, "any-mover", nil, nil, clClaimSpec(chAnyClass, 1, chMoverSelector))
			}
			s.exe = chBuildManager(ctx, t, c.Dir)
			if s.id, err = c.DeployOperatorIdentity(ctx, operatorDeployDir); err != nil {
				t.Fatal(err)
			}
			svcCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
			s.stopSvc = cancel
			if s.svc, err = cluster.StartService(svcCtx, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := c.DeployWebhookByURL(ctx, operatorDeployDir, fmt.Sprintf("https://127.0.0.1:%d", s.svc.Port())); err != nil {
				t.Fatal(err)
			}
			s.watch = startChaosWatch(t, c, s.id.Namespace)
			s.watch.setStrict(chCentralPools()...)
			chCheckWatcher(ctx, t, c, s.watch)
			begin := time.Now()
			s.startReplica(t)
			ctx = context.WithValue(ctx, chKeyT{}, s)
			s.waitLeader(ctx, t)
			clWaitCentral(ctx, t, c, chDriver)
			clWaitWebhook(ctx, t, c, chNamespaceA, "cel")
			t.Logf("timing: operator process started -> leading, central devices tainted, webhook gating in %s", since(begin))
			return ctx
		}).
		Assess("(a) the operator killed (SIGKILL) mid-burst and restarted", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), ctx.Value(chKeyT{}).(*chState)
			leader := s.waitLeader(ctx, t)
			st := s.stream(ctx, c, "a-", chMix, 40, chInterval)
			st.at(4 * time.Second)
			killed := time.Now()
			if err := leader.proc.Kill(); err != nil {
				t.Fatal(err)
			}
			s.dropReplica(leader)
			// The kubelet restarts the container at once.
			s.startReplica(t)
			lease := s.watch.waitLeaseChange(ctx, t, leaderLeaseName, killed)
			fenced := s.watch.waitLeaseChange(ctx, t, fence.DefaultName, killed)
			alloc := s.watch.waitFirstOperatorAllocation(ctx, t, killed, "after the kill")
			objs := s.finishPart(ctx, t, c, st)
			t.Logf("timing (a), single replica: SIGKILL -> leader Lease taken by the restarted process %s, -> allocation fence taken %s, -> first allocation of a claim created after the kill %s",
				lease.Sub(killed).Round(time.Millisecond), fenced.Sub(killed).Round(time.Millisecond), alloc.Sub(killed).Round(time.Millisecond))
			t.Logf("(a): %d objects (%d immediate claims, %d CEL pods, %d ordinary pods); CEL pods admitted without the gate: %d",
				len(objs), chCount(objs, kindImmediate), chCount(objs, kindCEL), chCount(objs, kindOpen, kindAny), len(st.ungated))
			return ctx
		}).
		Assess("(d) the webhook down while pods are created: no operator running, then the webhook unreachable with the operator running", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), ctx.Value(chKeyT{}).(*chState)
			// d1: every replica stopped (a rollout gone wrong, a node
			// drained): the API server finds no webhook.
			for _, r := range slices.Clone(s.replicas) {
				if err := r.proc.Terminate(); err != nil {
					t.Error(err)
				}
				s.dropReplica(r)
			}
			down := time.Now()
			st := s.stream(ctx, c, "d1-", chMix, 16, chInterval)
			objs := st.wait(t)
			// kube-scheduler goes on with its own pods meanwhile.
			var schedObjs, celObjs []chObject
			for _, o := range objs {
				switch o.kind {
				case kindOpen, kindAny:
					schedObjs = append(schedObjs, o)
				case kindCEL:
					celObjs = append(celObjs, o)
				}
			}
			s.watch.waitSettled(ctx, t, c, schedObjs, st.start)
			if len(st.ungated) == 0 {
				t.Errorf("no CEL pod was admitted without the gate while no operator ran: the part did not take the webhook away")
			}
			// The ungated CEL pods: kube-scheduler tried and refused them
			// (their class selects no device it can see); nothing
			// allocated their claims.
			chWaitUnschedulable(ctx, t, c, st.ungated)
			for _, o := range objs {
				chCheckUnplaced(ctx, t, c, s.watch, o)
			}
			s.watch.check(t)
			waited := time.Since(down)
			back := time.Now()
			s.startReplica(t)
			s.waitLeader(ctx, t)
			s.all = append(s.all, objs...)
			settled := s.watch.waitSettled(ctx, t, c, objs, back)
			s.watch.check(t)
			chCheckOperatorClaims(ctx, t, c, objs)
			t.Logf("(d1): %d objects created with no operator running (%d CEL pods, %d admitted without the gate, every one refused by kube-scheduler); down %s; operator restarted -> every claim allocated and every pod Running in %s",
				len(objs), len(celObjs), len(st.ungated), waited.Round(time.Millisecond), settled.Round(time.Millisecond))

			// d2: the operator runs, but the webhook configuration points
			// nowhere (the Service refuses every connection).
			clWaitWebhook(ctx, t, c, chNamespaceA, "cel")
			s.svc.SetDown(true)
			st = s.stream(ctx, c, "d2-", chMix, 12, chInterval)
			objs = st.wait(t)
			s.svc.SetDown(false)
			if len(st.ungated) != chCount(objs, kindCEL) {
				t.Errorf("%d of %d CEL pods admitted without the gate while the webhook was unreachable: want all", len(st.ungated), chCount(objs, kindCEL))
			}
			s.all = append(s.all, objs...)
			settled = s.watch.waitSettled(ctx, t, c, objs, st.start)
			s.watch.check(t)
			chCheckOperatorClaims(ctx, t, c, objs)
			t.Logf("(d2): %d objects created while the webhook was unreachable and the operator ran (%d CEL pods, all ungated); all allocated and Running %s after the first create",
				len(objs), len(st.ungated), settled.Round(time.Millisecond))
			return ctx
		}).
		Assess("(e) two replicas under leader election: the leader paused (SIGSTOP) past its lease and resumed, then killed mid-burst", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), ctx.Value(chKeyT{}).(*chState)
			for len(s.replicas) < 2 {
				s.startReplica(t)
			}
			s.waitReady(ctx, t, 2)
			leader := s.waitLeader(ctx, t)

			// e1: SIGSTOP past the lease, SIGCONT while claims arrive.
			st := s.stream(ctx, c, "e1-", chMix, 64, chInterval)
			st.at(3 * time.Second)
			stopped := time.Now()
			if err := leader.proc.Pause(); err != nil {
				t.Fatal(err)
			}
			lease := s.watch.waitLeaseChange(ctx, t, leaderLeaseName, stopped)
			fenced := s.watch.waitLeaseChange(ctx, t, fence.DefaultName, stopped)
			alloc := s.watch.waitFirstOperatorAllocation(ctx, t, stopped, "after the leader was paused")
			// The old leader stays paused a while longer, then comes back
			// with its term's writes possibly in flight.
			time.Sleep(3 * time.Second)
			resumed := time.Now()
			if err := leader.proc.Resume(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-leader.proc.Done():
				t.Logf("(e1): the deposed leader exited %s after SIGCONT: %v", since(resumed), leader.proc.ExitError())
			case <-time.After(time.Minute):
				t.Errorf("the deposed leader %s still runs a minute after SIGCONT", leader.name)
				_ = leader.proc.Kill()
			}
			// Terms started after the standby's first one: each takes the
			// allocation fence from the other process and sweeps.
			churn := s.watch.leaseChanges(fence.DefaultName, fenced, time.Now())
			t.Logf("(e1): the allocation fence changed holder %d times between the standby's first term and the deposed leader's exit", churn)
			s.dropReplica(leader)
			s.startReplica(t)
			objs := s.finishPart(ctx, t, c, st)
			t.Logf("timing (e1), two replicas: SIGSTOP of the leader -> leader Lease taken by the standby %s, -> allocation fence taken %s, -> first allocation by the standby of a claim created after the stop %s; leader resumed %s after the stop",
				lease.Sub(stopped).Round(time.Millisecond), fenced.Sub(stopped).Round(time.Millisecond), alloc.Sub(stopped).Round(time.Millisecond), resumed.Sub(stopped).Round(time.Millisecond))
			t.Logf("(e1): %d objects; CEL pods admitted without the gate: %d", len(objs), len(st.ungated))

			// e2: SIGKILL of the leader mid-burst.
			s.waitReady(ctx, t, 2)
			leader = s.waitLeader(ctx, t)
			st = s.stream(ctx, c, "e2-", chMix, 48, chInterval)
			st.at(3 * time.Second)
			killed := time.Now()
			if err := leader.proc.Kill(); err != nil {
				t.Fatal(err)
			}
			s.dropReplica(leader)
			s.startReplica(t)
			lease = s.watch.waitLeaseChange(ctx, t, leaderLeaseName, killed)
			fenced = s.watch.waitLeaseChange(ctx, t, fence.DefaultName, killed)
			alloc = s.watch.waitFirstOperatorAllocation(ctx, t, killed, "after the leader was killed")
			objs = s.finishPart(ctx, t, c, st)
			t.Logf("timing (e2), two replicas: SIGKILL of the leader -> leader Lease taken by the standby %s, -> allocation fence taken %s, -> first allocation by the standby of a claim created after the kill %s",
				lease.Sub(killed).Round(time.Millisecond), fenced.Sub(killed).Round(time.Millisecond), alloc.Sub(killed).Round(time.Millisecond))
			t.Logf("(e2): %d objects; CEL pods admitted without the gate: %d", len(objs), len(st.ungated))
			return ctx
		}).
		Assess("(b) an admin deletes a central DeviceTaintRule mid-burst", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), ctx.Value(chKeyT{}).(*chState)
			// The central pool with the most free devices, so that the
			// operator has room in it once it is back.
			node := s.watch.emptiestNode(chCentralNodes())
			pool := chNode(node)
			name := central.RuleName(chDriver, pool)
			old, err := c.Client.ResourceV1().DeviceTaintRules().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("the central rule of pool %s: %v", pool, err)
			}
			leader := s.waitLeader(ctx, t)
			restored0, _ := leader.metric(ctx, "drastack_central_rules_restored_total")
			// kube-scheduler may take the pool's devices while its rule is
			// gone: no longer the operator's alone.
			s.watch.setStrict(slices.DeleteFunc(chCentralPools(), func(p string) bool { return p == pool })...)
			st := s.stream(ctx, c, "b-", []string{kindImmediate, kindAny, kindCEL, kindAny, kindOpen, kindAny}, 40, chInterval)
			st.at(4 * time.Second)
			deleted := time.Now()
			// As the garbage collector would: the operator's admission
			// policy refuses an administrator's delete (TestAdmissionPolicies).
			err = garbageCollectorClient(t, c).ResourceV1().DeviceTaintRules().Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &old.UID}})
			if err != nil {
				t.Fatalf("delete central rule %s as the garbage collector: %v", name, err)
			}
			// Claims only this pool can serve, created while its rule is
			// gone: the operator allocates them once the pool is back.
			var poolObjs []chObject
			for i := range 4 {
				o := chObject{kind: kindImmediate, ns: chNamespaceA, name: fmt.Sprintf("b-pool-%d", i)}
				clCreateClaim(ctx, t, c, o.ns, o.name, map[string]string{claimpolicy.AllocationLabel: claimpolicy.AllocationImmediate}, nil,
					clClaimSpec(chCentralClass, 1, chNodeSelector(node)))
				poolObjs = append(poolObjs, o)
			}
			var rule *resourceapi.DeviceTaintRule
			if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, clTimeout, true, func(ctx context.Context) (bool, error) {
				r, err := c.Client.ResourceV1().DeviceTaintRules().Get(ctx, name, metav1.GetOptions{})
				if err != nil || r.UID == old.UID {
					return false, nil //nolint:nilerr // retried until restored
				}
				rule = r
				return true, nil
			}); err != nil {
				t.Fatalf("the operator did not restore rule %s: %v", name, err)
			}
			restoredAt := time.Now()
			joinedAt := chWaitJoined(ctx, t, c, name)
			alloc, ok := s.watch.tryAllocationOfPool(ctx, pool, deleted, true)
			if !ok {
				for _, o := range poolObjs {
					t.Errorf("claim %s: %s; events: %s", o.key(), clClaimSummary(chGetClaim(ctx, c, o)), clClaimEvents(ctx, c, o.ns, o.name))
				}
				t.Fatalf("the operator allocated no device of pool %s after its rule was restored and joined", pool)
			}
			s.all = append(s.all, poolObjs...)
			poolDone := s.watch.waitSettled(ctx, t, c, poolObjs, deleted)
			objs := s.finishPart(ctx, t, c, st)
			if rule.Spec.Taint.Key != central.TaintKey {
				t.Errorf("restored rule %s taints %q, want %q", name, rule.Spec.Taint.Key, central.TaintKey)
			}
			chWaitEventReason(ctx, t, c, "CentralTaintRestored", deleted)
			if n, err := leader.metric(ctx, "drastack_central_rules_restored_total"); err != nil || n <= restored0 {
				t.Errorf("drastack_central_rules_restored_total of the leader %s: %v -> %v (%v), want an increase", leader.name, restored0, n, err)
			}
			byScheduler := 0
			s.watch.mu.Lock()
			for _, a := range s.watch.allocs {
				if a.at.After(deleted) && a.by != claimsctrl.FieldManager && slices.ContainsFunc(a.results, func(r resourceapi.DeviceRequestAllocationResult) bool {
					return r.Driver == chDriver && r.Pool == pool
				}) {
					byScheduler++
				}
			}
			s.watch.mu.Unlock()
			t.Logf("timing (b): rule of pool %s deleted -> restored %s, -> joined again %s, -> first operator allocation from the pool %s, -> all %d claims only the pool can serve allocated %s; kube-scheduler allocated %d devices of the pool meanwhile; %d objects in the stream",
				pool, restoredAt.Sub(deleted).Round(time.Millisecond), joinedAt.Sub(deleted).Round(time.Millisecond), alloc.at.Sub(deleted).Round(time.Millisecond),
				len(poolObjs), poolDone.Round(time.Millisecond), byScheduler, len(objs))
			return ctx
		}).
		Assess("(c) a pool moved into the partition and out again by DRAStack edits mid-burst", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), ctx.Value(chKeyT{}).(*chState)
			// Part (b) has settled: the pools of the start are the
			// operator's alone again.
			s.watch.setStrict(chCentralPools()...)
			mover := chNode(chMoverNode)
			name := central.RuleName(chDriver, mover)
			// Join: the mover pool becomes central while kube-scheduler
			// may be giving its devices to "any" pods.
			st := s.stream(ctx, c, "c1-", []string{kindImmMover, kindAny, kindCEL, kindImmediate, kindAny, kindOpen}, 30, chInterval)
			st.at(4 * time.Second)
			joinEdit := time.Now()
			writeStackSpec(ctx, t, s.crc, clTimeout, func(spec *v1alpha1.DRAStackSpec) { spec.Claims.Central[0].Pools = append(chCentralPools(), mover) })
			joinedAt := chWaitJoined(ctx, t, c, name)
			alloc := s.watch.waitAllocationOfPool(ctx, t, mover, joinEdit, true)
			objs := s.finishPart(ctx, t, c, st)
			t.Logf("timing (c) join: DRAStack edit -> pool rule joined %s, -> first operator allocation from the pool %s; %d objects (%d immediate claims only the mover pool can serve)",
				joinedAt.Sub(joinEdit).Round(time.Millisecond), alloc.at.Sub(joinEdit).Round(time.Millisecond), len(objs), chCount(objs, kindImmMover))
			var movers []chObject
			for _, o := range objs {
				if o.kind == kindImmMover {
					movers = append(movers, o)
				}
			}

			// Leave: the pool stops being central while the operator holds
			// some of its devices; half of those are released midway.
			// Ordinary pods that only the mover pool can serve wait until
			// its free devices leave the partition.
			st = s.stream(ctx, c, "c2-", []string{kindAnyMover, kindImmediate, kindCEL, kindOpen}, 32, chInterval)
			st.at(3 * time.Second)
			leaveEdit := time.Now()
			writeStackSpec(ctx, t, s.crc, clTimeout, func(spec *v1alpha1.DRAStackSpec) { spec.Claims.Central[0].Pools = chCentralPools() })
			st.at(8 * time.Second)
			kept := movers[:len(movers)/2]
			for _, o := range movers[len(movers)/2:] {
				if err := c.Client.ResourceV1().ResourceClaims(o.ns).Delete(ctx, o.name, metav1.DeleteOptions{}); err != nil {
					t.Errorf("delete claim %s: %v", o.key(), err)
				}
				s.all = slices.DeleteFunc(s.all, func(a chObject) bool { return a == o })
			}
			scheduled := s.watch.waitAllocationOfPool(ctx, t, mover, leaveEdit, false)
			objs = s.finishPart(ctx, t, c, st)
			chCheckHeldCovered(ctx, t, c, kept, mover)
			t.Logf("timing (c) leave: DRAStack edit -> first kube-scheduler allocation from the pool %s; %d objects (%d ordinary pods only the pool can serve); %d operator claims kept their devices",
				scheduled.at.Sub(leaveEdit).Round(time.Millisecond), len(objs), chCount(objs, kindAnyMover), len(kept))
			return ctx
		}).
		Assess("at the end: every claim allocated, every pod Running, no device given twice, the operator's RBAC sufficed", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), ctx.Value(chKeyT{}).(*chState)
			s.watch.waitSettled(ctx, t, c, s.all, time.Now())
			s.watch.check(t)
			clCheckNoRaces(ctx, t, c)
			chCheckOperatorClaims(ctx, t, c, s.all)
			for _, path := range s.logs {
				for _, line := range chLogForbidden(path) {
					t.Errorf("%s: the API server refused the operator: %s", path, line)
				}
			}
			s.watch.mu.Lock()
			n := len(s.watch.allocs)
			s.watch.mu.Unlock()
			t.Logf("chaos suite: %d objects, %d allocations seen by the watcher, %d operator processes started, wall time %s (shared machine)",
				len(s.all), n, s.replicaSeq, since(s.begin))
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			s, _ := ctx.Value(chKeyT{}).(*chState)
			if s == nil {
				s = state
			}
			if s != nil {
				if s.watch != nil {
					close(s.watch.stop)
				}
				if len(s.replicas) == 0 && s.exe != "" && s.id != nil && s.svc != nil {
					// Claims and the DRAStack leave through the operator.
					s.startReplica(t)
				}
				for _, r := range s.replicas {
					_ = r.proc.Resume()
				}
				clDeleteNamespace(ctx, t, c, chNamespaceA)
				clDeleteNamespace(ctx, t, c, chNamespaceB)
				if s.restore != nil {
					s.restore()
				}
				for _, r := range s.replicas {
					if err := r.proc.Terminate(); err != nil {
						t.Error(err)
					}
				}
				if s.stopSvc != nil {
					s.stopSvc()
				}
			}
			clRemoveWebhook(ctx, t, c)
			for _, d := range []string{chDriver, chOpenDriver} {
				if err := c.Client.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "spec.driver=" + d}); err != nil {
					t.Errorf("delete slices: %v", err)
				}
			}
			for _, dc := range []string{chOpenClass, chAnyClass, chCentralClass} {
				_ = c.Client.ResourceV1().DeviceClasses().Delete(ctx, dc, metav1.DeleteOptions{})
			}
			for i := range chNodes {
				if err := c.DeleteNode(ctx, chNode(i)); err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("%v", err)
				}
			}
			return ctx
		}).
		Feature()
	testenv.Test(t, feature)
}

// chCheckWatcher makes the watcher see what it is there to catch, with
// claims whose allocations the test writes itself: a device in two
// claims, and a central device allocated by someone other than the
// operator. It fails the test unless the watcher reports both, then
// deletes the claims and forgets the reports.
func chCheckWatcher(ctx context.Context, t *testing.T, c *cluster.Cluster, w *chWatch) {
	t.Helper()
	const fake = "selfcheck.chaos.e2e.drastack.io"
	claims := []*resourceapi.ResourceClaim{
		createAllocatedClaim(ctx, t, c, chNamespaceA, "selfcheck-x", fake, "p", "d0"),
		createAllocatedClaim(ctx, t, c, chNamespaceA, "selfcheck-y", fake, "p", "d0"),
		createAllocatedClaim(ctx, t, c, chNamespaceA, "selfcheck-z", chDriver, chNode(0), fmt.Sprintf("dev-%d", chDevices-1)),
	}
	var twice, partition []string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, clTimeout, true, func(context.Context) (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		twice, partition = slices.Clone(w.violations), slices.Clone(w.partition)
		return len(twice) > 0 && len(partition) > 0, nil
	})
	if err != nil || len(twice) != 1 || !strings.Contains(twice[0], fake+"/p/d0") || !strings.Contains(partition[0], "selfcheck-z") {
		t.Fatalf("the watcher does not see what it checks: device given twice %v, partition %v (%v)", twice, partition, err)
	}
	for _, cl := range claims {
		if err := c.Client.ResourceV1().ResourceClaims(cl.Namespace).Delete(ctx, cl.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, clTimeout, true, func(context.Context) (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, cl := range claims {
			if len(w.held[chKey(cl.Namespace, cl.Name)]) > 0 {
				return false, nil
			}
		}
		w.violations, w.partition = nil, nil
		return true, nil
	})
	if err != nil {
		t.Fatalf("the watcher did not see the self-check claims deleted: %v", err)
	}
	t.Logf("the watcher reported the test's own double allocation (%s) and central allocation (%s)", twice[0], partition[0])
}

// chSpec is the suite's spec.claims: the pools given of chDriver are
// central, for the operator-owned class chCentralClass, with the Immediate
// label allowed.
func chSpec(pools []string) v1alpha1.ClaimsSpec {
	return v1alpha1.ClaimsSpec{Engine: v1alpha1.EngineNative, GatePods: ptr.To(true), Central: []v1alpha1.CentralDevices{{
		Driver: chDriver, Pools: pools, Classes: []string{chCentralClass}, AllowImmediate: true,
	}}}
}

// chAnyDeviceClass matches the devices of both drivers.
func chAnyDeviceClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: chAnyClass},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == %q || device.driver == %q", chDriver, chOpenDriver),
		}}}},
	}
}

// finishPart waits for the stream's objects, then until each is allocated
// or running, checks the watcher and the operator's claims, and adds the
// objects to the suite's.
func (s *chState) finishPart(ctx context.Context, t *testing.T, c *cluster.Cluster, st *chStream) []chObject {
	t.Helper()
	objs := st.wait(t)
	s.all = append(s.all, objs...)
	settled := s.watch.waitSettled(ctx, t, c, objs, st.start)
	s.watch.check(t)
	chCheckOperatorClaims(ctx, t, c, objs)
	t.Logf("part settled: %d objects allocated and Running %s after the first create", len(objs), settled.Round(time.Millisecond))
	return objs
}

// waitReady waits until the service has n ready endpoints.
func (s *chState) waitReady(ctx context.Context, t *testing.T, n int) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, clTimeout, true, func(context.Context) (bool, error) {
		return len(s.svc.Ready()) >= n, nil
	}); err != nil {
		t.Fatalf("ready replicas %v, want %d: %v", s.svc.Ready(), n, err)
	}
}

// chWaitUnschedulable waits until kube-scheduler has reported each pod
// (ns/name) Unschedulable.
func chWaitUnschedulable(ctx context.Context, t *testing.T, c *cluster.Cluster, pods []string) {
	t.Helper()
	for _, key := range pods {
		ns, name, _ := strings.Cut(key, "/")
		var last *corev1.Pod
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, clTimeout, true, func(ctx context.Context) (bool, error) {
			p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil //nolint:nilerr // retried
			}
			last = p
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("pod %s: kube-scheduler did not report it Unschedulable: %v\n%s", key, err, diagnose(ctx, c, ns, last))
		}
	}
}

// chCheckUnplaced: with no operator running, an operator object is not
// allocated (immediate claim) or not bound (CEL pod), and its claims are
// not allocated.
func chCheckUnplaced(ctx context.Context, t *testing.T, c *cluster.Cluster, w *chWatch, o chObject) {
	t.Helper()
	switch o.kind {
	case kindImmediate:
		w.mu.Lock()
		_, allocated := w.allocatedAt[o.key()]
		w.mu.Unlock()
		if allocated {
			t.Errorf("immediate claim %s was allocated while no operator ran", o.key())
		}
	case kindCEL:
		p, err := c.Client.CoreV1().Pods(o.ns).Get(ctx, o.name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("pod %s: %v", o.key(), err)
			return
		}
		if p.Spec.NodeName != "" {
			t.Errorf("CEL pod %s was bound to %s while no operator ran", o.key(), p.Spec.NodeName)
		}
		for _, st := range p.Status.ResourceClaimStatuses {
			if st.ResourceClaimName == nil {
				continue
			}
			w.mu.Lock()
			_, allocated := w.allocatedAt[chKey(o.ns, *st.ResourceClaimName)]
			w.mu.Unlock()
			if allocated {
				t.Errorf("claim %s/%s of CEL pod %s was allocated while no operator ran", o.ns, *st.ResourceClaimName, o.name)
			}
		}
	}
}

// chCheckOperatorClaims checks the final state of the objects' claims:
// each operator claim is allocated by the operator, from central devices
// of chDriver (the mover pool only for claims that ask for it), and a CEL
// claim's two devices are adjacent on one node; each kube-scheduler claim
// is allocated by someone else.
func chCheckOperatorClaims(ctx context.Context, t *testing.T, c *cluster.Cluster, objs []chObject) {
	t.Helper()
	want := map[string]chObject{}
	pods := map[string]chObject{}
	for _, o := range objs {
		if _, pod := podKinds[o.kind]; pod {
			pods[o.key()] = o
		} else {
			want[o.key()] = o
		}
	}
	for _, ns := range []string{chNamespaceA, chNamespaceB} {
		list, err := c.Client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range list.Items {
			cl := &list.Items[i]
			key := chKey(cl.Namespace, cl.Name)
			o, mine := want[key]
			for _, ref := range cl.OwnerReferences {
				if p, ok := pods[chKey(cl.Namespace, ref.Name)]; ok && ref.Kind == "Pod" {
					o, mine = p, true
				}
			}
			if !mine {
				continue
			}
			if cl.Status.Allocation == nil {
				t.Errorf("claim %s of %s %s is not allocated", key, o.kind, o.key())
				continue
			}
			chCheckAllocation(t, key, o.kind, cl)
		}
	}
}

// chInMoverPart: the claim was created by part (c), while the mover pool
// was moved into the partition and out again (its objects are named c1-
// and c2-; the pods' claims carry their pod's name first).
func chInMoverPart(name string) bool {
	return strings.HasPrefix(name, "c1-") || strings.HasPrefix(name, "c2-")
}

// chCheckAllocation checks one allocated claim of an object of kind.
func chCheckAllocation(t *testing.T, key, kind string, cl *resourceapi.ResourceClaim) {
	t.Helper()
	by := claimpolicy.AllocatedBy(cl)
	results := cl.Status.Allocation.Devices.Results
	if !chOperatorClaim(cl) {
		if by == claimsctrl.FieldManager {
			t.Errorf("kube-scheduler's claim %s (%s) allocated by the operator", key, kind)
		}
		return
	}
	if by != claimsctrl.FieldManager {
		t.Errorf("operator claim %s (%s) allocated by %q", key, kind, by)
	}
	var idx []int
	pools := map[string]bool{}
	for _, r := range results {
		pools[r.Pool] = true
		want := slices.Contains(chCentralPools(), r.Pool)
		switch {
		case kind == kindImmMover:
			want = r.Pool == chNode(chMoverNode)
		case chInMoverPart(cl.Name) && r.Pool == chNode(chMoverNode):
			// Part (c) streams its claims while the mover pool joins the
			// partition and leaves it: while it is central, any of the
			// operator's claims may get its devices (which claims do
			// depends on how fast the others are allocated). That no
			// device went twice, and that held ones stayed covered, the
			// watcher and chCheckHeldCovered check.
			want = true
		}
		if r.Driver != chDriver || !want {
			t.Errorf("operator claim %s (%s) got %s/%s/%s, not a central device it may use", key, kind, r.Driver, r.Pool, r.Device)
		}
		i, err := strconv.Atoi(strings.TrimPrefix(r.Device, "dev-"))
		if err != nil {
			t.Errorf("claim %s: unknown device %s", key, r.Device)
		}
		idx = append(idx, i)
	}
	if kind == kindCEL {
		slices.Sort(idx)
		if len(idx) != 2 || len(pools) != 1 || idx[1]-idx[0] != 1 {
			t.Errorf("CEL claim %s got devices %v of pools %v: its constraint wants two adjacent ones", key, idx, pools)
		}
	}
}

// chWaitJoined waits until the rule carries the join annotation and
// returns when it was seen.
func chWaitJoined(ctx context.Context, t *testing.T, c *cluster.Cluster, name string) time.Time {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, clTimeout, true, func(ctx context.Context) (bool, error) {
		r, err := c.Client.ResourceV1().DeviceTaintRules().Get(ctx, name, metav1.GetOptions{})
		return err == nil && r.Annotations[chJoinedAnnotation] != "", nil
	}); err != nil {
		t.Fatalf("rule %s did not join: %v", name, err)
	}
	return time.Now()
}

// chWaitEventReason waits for an Event of the reason, in any namespace,
// created after from.
func chWaitEventReason(ctx context.Context, t *testing.T, c *cluster.Cluster, reason string, from time.Time) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, clTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := c.Client.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + reason})
		if err != nil {
			return false, nil //nolint:nilerr // retried
		}
		for _, e := range list.Items {
			if !e.CreationTimestamp.Time.Before(from.Truncate(time.Second)) {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Errorf("no %s Event after %s: %v", reason, from.Format(time.RFC3339), err)
	}
}

// chCheckHeldCovered: each device the kept claims hold in pool is still
// tainted by a rule of the operator (it leaves the partition only when
// released), and no rule of the operator covers the whole pool any more.
func chCheckHeldCovered(ctx context.Context, t *testing.T, c *cluster.Cluster, kept []chObject, pool string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, clTimeout, true, func(ctx context.Context) (bool, error) {
		rules, err := c.Client.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // retried
		}
		covers := func(device string) bool {
			for i := range rules.Items {
				r := &rules.Items[i]
				sel := r.Spec.DeviceSelector
				if !central.Owned(r) || sel == nil || r.Spec.Taint.Key != central.TaintKey {
					continue
				}
				if (sel.Driver == nil || *sel.Driver == chDriver) && (sel.Pool == nil || *sel.Pool == pool) && (sel.Device == nil || *sel.Device == device) {
					return true
				}
			}
			return false
		}
		for i := range rules.Items {
			r := &rules.Items[i]
			if sel := r.Spec.DeviceSelector; central.Owned(r) && sel != nil && sel.Pool != nil && *sel.Pool == pool && sel.Device == nil {
				last = "rule " + r.Name + " still covers the whole pool"
				return false, nil
			}
		}
		for _, o := range kept {
			cl, err := c.Client.ResourceV1().ResourceClaims(o.ns).Get(ctx, o.name, metav1.GetOptions{})
			if err != nil || cl.Status.Allocation == nil {
				last = fmt.Sprintf("claim %s: %v", o.key(), err)
				return false, nil
			}
			for _, r := range cl.Status.Allocation.Devices.Results {
				if r.Pool == pool && !covers(r.Device) {
					last = fmt.Sprintf("device %s/%s held by %s is not tainted", pool, r.Device, o.key())
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("after the pool left the partition: %s: %v", last, err)
	}
}
