//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/allocator"
	claimspkg "github.com/drastack/drastack/internal/claims"
	claimsctrl "github.com/drastack/drastack/internal/controller/claims"
	"github.com/drastack/drastack/internal/operator"
	"github.com/drastack/drastack/internal/pool"
	"github.com/drastack/drastack/internal/topology"
	"github.com/drastack/drastack/test/cluster"
)

// The claim controller suite on the real control plane: KEP-5254 stories
// with pods held by the webhook's scheduling gate, an immediate multi-host
// claim, the upstream engine, invalid and unsatisfiable claims, a pool
// republished at a new generation, and claims deleted while allocated.
const (
	clNamespace  = "claims"
	ringDriver   = "ring.claims.e2e.drastack.io"
	gridDriver   = "grid.claims.e2e.drastack.io"
	tpuDriver    = "tpu.claims.e2e.drastack.io"
	genDriver    = "gen.claims.e2e.drastack.io"
	raceDriver   = "race.claims.e2e.drastack.io"
	raceClass    = "claims-race"
	ringClass    = "claims-ring"
	gridClass    = "claims-grid"
	tpuClass     = "claims-tpu"
	genClass     = "claims-gen"
	ringNode     = "claims-ring"
	gridNode     = "claims-grid"
	genNode      = "claims-gen"
	tpuPool      = "claims-tpu"
	contiguous4  = "size(devices) == 4 && devices.map(d, d.attributes['ring.claims.e2e.drastack.io'].index).max() - devices.map(d, d.attributes['ring.claims.e2e.drastack.io'].index).min() == 3"
	contiguous2  = "size(devices) == 2 && devices.map(d, d.attributes['ring.claims.e2e.drastack.io'].index).max() - devices.map(d, d.attributes['ring.claims.e2e.drastack.io'].index).min() == 1"
	gridAttr     = "d.attributes['grid.claims.e2e.drastack.io']"
	otherAttr    = "o.attributes['grid.claims.e2e.drastack.io']"
	gridNeighbor = "(" + gridAttr + ".row == " + otherAttr + ".row && (" + gridAttr + ".col - " + otherAttr + ".col == 1 || " + otherAttr + ".col - " + gridAttr + ".col == 1)) || (" +
		gridAttr + ".col == " + otherAttr + ".col && (" + gridAttr + ".row - " + otherAttr + ".row == 1 || " + otherAttr + ".row - " + gridAttr + ".row == 1))"
	// grid2x2: four devices, each with two grid neighbours in the set.
	grid2x2 = "size(devices) == 4 && devices.all(d, devices.filter(o, " + gridNeighbor + ").size() == 2)"
)

func clTPUNode(x, y int) string { return fmt.Sprintf("claims-tpu-%d-%d", x, y) }

type clKey struct{}

// clState is what the steps of the suite share.
type clState struct {
	crc     client.Client
	op      *clOperator
	restore func()
}

func clFrom(ctx context.Context, t *testing.T) *clState {
	t.Helper()
	s, ok := ctx.Value(clKey{}).(*clState)
	if !ok {
		t.Fatal("claim suite state missing: Setup failed")
	}
	return s
}

func clNodes() []string {
	nodes := []string{ringNode, gridNode, genNode}
	for x := 0; x < 2; x++ {
		for y := 0; y < 2; y++ {
			nodes = append(nodes, clTPUNode(x, y))
		}
	}
	return nodes
}

// TestClaims runs the allocator-backed claim controller with the real
// kube-scheduler and kube-controller-manager.
func TestClaims(t *testing.T) {
	feature := features.New("allocator-backed claim controller").
		Setup(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			createNamespace(ctx, t, c.Client, clNamespace)
			if err := c.InstallCRDs(CRDDir); err != nil {
				t.Fatal(err)
			}
			var specs []cluster.NodeSpec
			for _, n := range clNodes() {
				specs = append(specs, cluster.NodeSpec{Name: n})
			}
			if err := c.AddNodes(ctx, specs...); err != nil {
				t.Fatal(err)
			}
			for _, dc := range []*resourceapi.DeviceClass{
				deviceClass(ringClass, ringDriver, ""), deviceClass(gridClass, gridDriver, ""),
				deviceClass(tpuClass, tpuDriver, ""), deviceClass(genClass, genDriver, ""), deviceClass(raceClass, raceDriver, ""),
			} {
				if _, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					t.Fatal(err)
				}
			}
			clPublishSlices(ctx, t, c)

			s := &clState{}
			var err error
			if s.crc, err = client.New(c.Config, client.Options{Scheme: operator.Scheme()}); err != nil {
				t.Fatal(err)
			}
			s.restore = clApplyClaimsSpec(ctx, t, s.crc, v1alpha1.ClaimsSpec{
				Engine: v1alpha1.EngineNative, ImmediateClasses: []string{tpuClass}, GatePods: ptr.To(true),
			})
			begin := time.Now()
			s.op = clStartOperator(ctx, t, c, clNamespace)
			clCreateTemplate(ctx, t, c, clNamespace, "probe", nil, clCEL("true"), clClaimSpec(ringClass, 1, ""))
			clWaitWebhook(ctx, t, c, clNamespace, "probe")
			t.Logf("timing: operator start -> ready in %s", since(begin))
			return context.WithValue(ctx, clKey{}, s)
		}).
		Assess("KEP-5254: a pod's claim for 4 contiguous devices is allocated exactly such a set while the pod waits behind the gate", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			// kube-scheduler takes index 1 for an ordinary pod, so a naive
			// first fit (0, 2, 3, 4) is not contiguous; only 2..5 is.
			clCreateTemplate(ctx, t, c, clNamespace, "ring-busy", nil, nil,
				clClaimSpec(ringClass, 1, "device.attributes['"+ringDriver+"'].index == 1"))
			busy := clCreatePod(ctx, t, c, claimPod(clNamespace, "ring-busy", "ring-busy"))
			if claimspkg.HasGate(busy) {
				t.Errorf("pod %s with an ordinary claim was gated", busy.Name)
			}
			waitPodRunning(ctx, t, c, clNamespace, busy.Name)

			clCreateTemplate(ctx, t, c, clNamespace, "ring-4", nil, clCEL(contiguous4), clClaimSpec(ringClass, 4, ""))
			begin := time.Now()
			pod := clCreatePod(ctx, t, c, claimPod(clNamespace, "ring-four", "ring-4"))
			if !claimspkg.HasGate(pod) {
				t.Fatalf("pod %s was admitted without the gate %s: %v", pod.Name, claimspkg.SchedulingGate, pod.Spec.SchedulingGates)
			}
			name := clPodClaimName(ctx, t, c, clNamespace, pod.Name)
			pod = waitPodRunning(ctx, t, c, clNamespace, pod.Name)
			t.Logf("timing: gated pod created -> claim allocated, gate removed, pod Running in %s", since(begin))
			if pod.Spec.NodeName != ringNode {
				t.Errorf("pod on node %s, want %s", pod.Spec.NodeName, ringNode)
			}
			claim := clCheckOperatorAllocation(ctx, t, c, name, pod)
			idx := ringIndices(ctx, t, c, claim)
			if !contiguous(idx, 4) || slices.Contains(idx, 1) {
				t.Errorf("devices with indices %v, want 4 contiguous free ones (index 1 is busy; a first fit would take 0, 2, 3, 4)", idx)
			}
			return ctx
		}).
		Assess("KEP-5254: pods whose claims ask for a 2x2 grid get two disjoint 2x2 blocks", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			clCreateTemplate(ctx, t, c, clNamespace, "grid-2x2", nil, clCEL(grid2x2), clClaimSpec(gridClass, 4, ""))
			seen := map[string]bool{}
			for i := range 2 {
				pod := clCreatePod(ctx, t, c, claimPod(clNamespace, fmt.Sprintf("grid-%d", i), "grid-2x2"))
				if !claimspkg.HasGate(pod) {
					t.Fatalf("pod %s was admitted without the gate", pod.Name)
				}
				name := clPodClaimName(ctx, t, c, clNamespace, pod.Name)
				pod = waitPodRunning(ctx, t, c, clNamespace, pod.Name)
				if pod.Spec.NodeName != gridNode {
					t.Errorf("pod %s on node %s, want %s", pod.Name, pod.Spec.NodeName, gridNode)
				}
				claim := clCheckOperatorAllocation(ctx, t, c, name, pod)
				rows, cols := map[int64]bool{}, map[int64]bool{}
				for j, a := range clDeviceAttrs(ctx, t, c, gridDriver, claim.Status.Allocation.Devices.Results) {
					rows[*a["row"].IntValue], cols[*a["col"].IntValue] = true, true
					dev := claim.Status.Allocation.Devices.Results[j].Device
					if seen[dev] {
						t.Errorf("device %s given to two pods", dev)
					}
					seen[dev] = true
				}
				if !clAdjacentPair(rows) || !clAdjacentPair(cols) {
					t.Errorf("pod %s: devices in rows %v and columns %v, want a 2x2 block", pod.Name, clKeys(rows), clKeys(cols))
				}
			}
			return ctx
		}).
		Assess("an immediate multi-host claim is allocated before any pod exists, and its pods land on the slice's hosts", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			begin := time.Now()
			clCreateClaim(ctx, t, c, clNamespace, "tpu-slice", nil, nil, clClaimSpec(tpuClass, 1, "device.attributes['"+tpuDriver+"'].shape == '2x4'"))
			claim := clWaitClaim(ctx, t, c, clNamespace, "tpu-slice", "allocation", clAllocated)
			t.Logf("timing: immediate claim created -> allocated in %s, no pod exists", since(begin))
			attrs := clDeviceAttrs(ctx, t, c, tpuDriver, claim.Status.Allocation.Devices.Results)
			hosts := attrs[0]["hosts"].StringValues
			if len(hosts) != 2 || claim.Status.Allocation.NodeSelector == nil {
				t.Fatalf("2x4 device on hosts %v with node selector %v: want two hosts and a node selector", hosts, claim.Status.Allocation.NodeSelector)
			}
			// The workload knows its nodes before it starts; its pods
			// are not gated (the claim is allocated) and land there.
			for i := range 2 {
				p := clCreatePod(ctx, t, c, clSharedPod(clNamespace, fmt.Sprintf("tpu-%d", i), "tpu-slice"))
				if claimspkg.HasGate(p) {
					t.Errorf("pod %s of an allocated claim was gated", p.Name)
				}
			}
			for i := range 2 {
				p := waitPodRunning(ctx, t, c, clNamespace, fmt.Sprintf("tpu-%d", i))
				if !slices.Contains(hosts, p.Spec.NodeName) {
					t.Errorf("pod %s on node %s, outside the slice's hosts %v", p.Name, p.Spec.NodeName, hosts)
				}
			}
			claim = clWaitClaim(ctx, t, c, clNamespace, "tpu-slice", "two consumers", func(cl *resourceapi.ResourceClaim) bool { return len(cl.Status.ReservedFor) == 2 })
			if by := claimspkg.AllocatedBy(claim); by != claimsctrl.FieldManager {
				t.Errorf("allocation written by %q, want %q", by, claimsctrl.FieldManager)
			}

			// A pod that names a claim before it exists waits behind the
			// gate, so kube-scheduler cannot allocate the claim on its own.
			early := clCreatePod(ctx, t, c, clSharedPod(clNamespace, "tpu-early", "tpu-later"))
			if !claimspkg.HasGate(early) {
				t.Fatalf("pod %s naming a missing claim was admitted without the gate", early.Name)
			}
			time.Sleep(time.Second)
			if p, err := c.Client.CoreV1().Pods(clNamespace).Get(ctx, early.Name, metav1.GetOptions{}); err != nil || !claimspkg.HasGate(p) {
				t.Errorf("pod %s lost its gate before its claim existed (err %v)", early.Name, err)
			}
			clCreateClaim(ctx, t, c, clNamespace, "tpu-later", nil, nil, clClaimSpec(tpuClass, 1, "device.attributes['"+tpuDriver+"'].shape == '2x2'"))
			later := clWaitClaim(ctx, t, c, clNamespace, "tpu-later", "allocation", clAllocated)
			p := waitPodRunning(ctx, t, c, clNamespace, early.Name)
			if h := clDeviceAttrs(ctx, t, c, tpuDriver, later.Status.Allocation.Devices.Results)[0]["hosts"].StringValues; !slices.Equal(h, []string{p.Spec.NodeName}) {
				t.Errorf("pod %s on node %s, its 2x2 device is on %v", p.Name, p.Spec.NodeName, h)
			}
			return ctx
		}).
		Assess("with engine upstream, a CEL claim gets a clear NotSupported Event and its pod stays gated; kube-controller-manager still creates the claim", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), clFrom(ctx, t)
			clSetEngine(ctx, t, s.crc, v1alpha1.EngineUpstream)
			clCreateTemplate(ctx, t, c, clNamespace, "ring-2", nil, clCEL(contiguous2), clClaimSpec(ringClass, 2, ""))
			pod := clCreatePod(ctx, t, c, claimPod(clNamespace, "ring-upstream", "ring-2"))
			if !claimspkg.HasGate(pod) {
				t.Fatalf("pod %s was admitted without the gate", pod.Name)
			}
			name := clPodClaimName(ctx, t, c, clNamespace, pod.Name)
			e := clWaitClaimEvent(ctx, t, c, clNamespace, name, string(claimspkg.OutcomeNotSupported), "not supported by the upstream engine")
			t.Logf("event on %s: %s: %s", name, e.Reason, e.Note)
			claim, err := c.Client.ResourceV1().ResourceClaims(clNamespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := claim.Annotations[allocator.CELConstraintsAnnotation]; !ok || claim.Status.Allocation != nil {
				t.Errorf("claim %s from the template: annotation copied=%v, allocated=%v; want copied, unallocated", name, ok, claim.Status.Allocation != nil)
			}
			if p, err := c.Client.CoreV1().Pods(clNamespace).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil || !claimspkg.HasGate(p) || p.Spec.NodeName != "" {
				t.Errorf("pod %s must stay gated and unscheduled while its claim cannot be allocated (err %v)", pod.Name, err)
			}
			clWaitStackClaims(ctx, t, s.crc, metav1.ConditionFalse, claimspkg.ReasonEngineNotSupported, func(v1alpha1.ClaimCounts) bool { return true })

			begin := time.Now()
			clSetEngine(ctx, t, s.crc, v1alpha1.EngineNative)
			pod = waitPodRunning(ctx, t, c, clNamespace, pod.Name)
			t.Logf("timing: engine set back to native -> pod Running in %s", since(begin))
			claim = clCheckOperatorAllocation(ctx, t, c, name, pod)
			if idx := ringIndices(ctx, t, c, claim); !contiguous(idx, 2) {
				t.Errorf("devices with indices %v, want 2 contiguous ones", idx)
			}
			clCheckNoRaces(ctx, t, c)
			clWaitStackClaims(ctx, t, s.crc, metav1.ConditionTrue, claimspkg.ReasonKeepingUp, func(v1alpha1.ClaimCounts) bool { return true })
			return ctx
		}).
		Assess("with gatePods off, kube-scheduler allocates a CEL claim itself, and the operator says whether its constraints hold", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), clFrom(ctx, t)
			writeStackSpec(ctx, t, s.crc, clTimeout, func(sp *v1alpha1.DRAStackSpec) {
				sp.Claims.GatePods = ptr.To(false)
				sp.Claims.Engine = v1alpha1.EngineUpstream // the operator cannot allocate it either
			})
			defer writeStackSpec(ctx, t, s.crc, clTimeout, func(sp *v1alpha1.DRAStackSpec) {
				sp.Claims.GatePods = ptr.To(true)
				sp.Claims.Engine = v1alpha1.EngineNative
			})
			var pod *corev1.Pod
			if err := wait.PollUntilContextTimeout(ctx, pollInterval, clTimeout, true, func(ctx context.Context) (bool, error) {
				// The webhook reads the DRAStack from its cache: retry until
				// it sees gatePods off.
				p, err := c.Client.CoreV1().Pods(clNamespace).Create(ctx, claimPod(clNamespace, "grid-bypass", "grid-2x2"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				return err == nil && !claimspkg.HasGate(p), nil
			}); err != nil {
				t.Fatalf("pods are still gated with gatePods off: %v", err)
			}
			pod = clCreatePod(ctx, t, c, claimPod(clNamespace, "grid-bypass", "grid-2x2"))
			pod = waitPodRunning(ctx, t, c, clNamespace, pod.Name)
			name := clPodClaimName(ctx, t, c, clNamespace, pod.Name)
			claim := clWaitClaim(ctx, t, c, clNamespace, name, "allocation", clAllocated)
			if by := claimspkg.AllocatedBy(claim); by != "kube-scheduler" {
				t.Fatalf("claim %s allocated by %q, want kube-scheduler", name, by)
			}
			rows, cols := map[int64]bool{}, map[int64]bool{}
			for _, a := range clDeviceAttrs(ctx, t, c, gridDriver, claim.Status.Allocation.Devices.Results) {
				rows[*a["row"].IntValue], cols[*a["col"].IntValue] = true, true
			}
			want := "its CEL constraints hold"
			if !clAdjacentPair(rows) || !clAdjacentPair(cols) {
				want = "its CEL constraints do not hold"
			}
			e := clWaitClaimEvent(ctx, t, c, clNamespace, name, claimsctrl.EventBypassed, want)
			t.Logf("kube-scheduler gave rows %v, columns %v; event: %s", clKeys(rows), clKeys(cols), e.Note)
			if err := c.Client.CoreV1().Pods(clNamespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
				t.Fatal(err)
			}
			return ctx
		}).
		Assess("an invalid CEL constraint gets one Event and no retries until the claim changes", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), clFrom(ctx, t)
			clCreateClaim(ctx, t, c, clNamespace, "bad-cel", nil, clCEL("size(devices ==="), clClaimSpec(ringClass, 1, ""))
			clWaitClaimEvent(ctx, t, c, clNamespace, "bad-cel", string(claimspkg.OutcomeInvalid), "not retried until the claim changes")
			attempts := clMetric(t, "drastack_claim_allocations_total", map[string]string{"result": string(claimspkg.OutcomeInvalid)})
			counts := clWaitStackClaims(ctx, t, s.crc, metav1.ConditionTrue, claimspkg.ReasonKeepingUp, func(c v1alpha1.ClaimCounts) bool { return c.Invalid >= 1 })
			t.Logf("DRAStack status.claims with an invalid claim: %+v", counts)
			// Slices change meanwhile (they would retry an unsatisfiable
			// claim); an invalid one stays put.
			extra := clNodeSlice(genDriver, genNode+"-noise", 1, []resourceapi.Device{{Name: "noise"}})
			extra.Spec.NodeName = ptr.To(genNode)
			clCreateSlices(ctx, t, c, extra)
			time.Sleep(3 * time.Second)
			if after := clMetric(t, "drastack_claim_allocations_total", map[string]string{"result": string(claimspkg.OutcomeInvalid)}); after != attempts {
				t.Errorf("the invalid claim was retried %v times without changing", after-attempts)
			}
			var n int32
			for _, e := range clEventsOn(ctx, c, clNamespace, "ResourceClaim", "bad-cel") {
				if e.Reason == string(claimspkg.OutcomeInvalid) {
					n += clEventCount(e)
				}
			}
			if n != 1 {
				t.Errorf("%d Invalid Events on the claim, want exactly 1", n)
			}
			// Fixing the annotation is a change: the claim is allocated.
			err := wait.PollUntilContextTimeout(ctx, pollInterval, clTimeout, true, func(ctx context.Context) (bool, error) {
				cl, err := c.Client.ResourceV1().ResourceClaims(clNamespace).Get(ctx, "bad-cel", metav1.GetOptions{})
				if err != nil {
					return false, nil //nolint:nilerr // retried
				}
				cl.Annotations = clCEL("size(devices) == 1")
				_, err = c.Client.ResourceV1().ResourceClaims(clNamespace).Update(ctx, cl, metav1.UpdateOptions{})
				return err == nil, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			clWaitClaim(ctx, t, c, clNamespace, "bad-cel", "allocation after the fix", clAllocated)
			_ = c.Client.ResourceV1().ResourceSlices().Delete(ctx, extra.Name, metav1.DeleteOptions{})
			return ctx
		}).
		Assess("a pool republished at a new generation while claims wait: nothing is allocated from the incomplete generation, then everything at once", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			immediate := map[string]string{claimspkg.AllocationLabel: claimspkg.AllocationImmediate}
			clCreateClaim(ctx, t, c, clNamespace, "gen-v2", immediate, nil, clClaimSpec(genClass, 1, "device.attributes['"+genDriver+"'].version == 2"))
			clWaitClaimEvent(ctx, t, c, clNamespace, "gen-v2", string(claimspkg.OutcomeUnsatisfiable), "retried with backoff")
			// Let the backoff grow past what the test waits for below.
			time.Sleep(6 * time.Second)

			// Generation 2 in two slices: the first alone leaves the pool
			// incomplete, so nothing may be allocated from it.
			var v1, v2a, v2b []resourceapi.Device
			for i := range 8 {
				v1 = append(v1, resourceapi.Device{Name: fmt.Sprintf("d%d", i), Attributes: clIntAttrs(map[string]int64{"version": 1})})
			}
			v2a = append(slices.Clone(v1[:4]), resourceapi.Device{Name: "v2-0", Attributes: clIntAttrs(map[string]int64{"version": 2})})
			v2b = slices.Clone(v1[4:])
			a := clNodeSlice(genDriver, genNode, 2, v2a)
			a.Name += "-a"
			a.Spec.Pool.ResourceSliceCount = 2
			b := clNodeSlice(genDriver, genNode, 2, v2b)
			b.Name += "-b"
			b.Spec.Pool.ResourceSliceCount = 2
			clCreateSlices(ctx, t, c, a)
			var burst []string
			for i := range 4 {
				name := fmt.Sprintf("gen-any-%d", i)
				clCreateClaim(ctx, t, c, clNamespace, name, immediate, nil, clClaimSpec(genClass, 1, "device.attributes['"+genDriver+"'].version == 1"))
				burst = append(burst, name)
			}
			time.Sleep(2 * time.Second)
			for _, name := range append(burst, "gen-v2") {
				if cl, err := c.Client.ResourceV1().ResourceClaims(clNamespace).Get(ctx, name, metav1.GetOptions{}); err == nil && cl.Status.Allocation != nil {
					t.Errorf("claim %s allocated from an incomplete pool: %v", name, cl.Status.Allocation.Devices.Results)
				}
			}
			if err := c.Client.ResourceV1().ResourceSlices().Delete(ctx, clNodeSlice(genDriver, genNode, 1, nil).Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			begin := time.Now()
			clCreateSlices(ctx, t, c, b)
			v2 := clWaitClaim(ctx, t, c, clNamespace, "gen-v2", "allocation from generation 2", clAllocated)
			took := time.Since(begin)
			t.Logf("timing: generation 2 complete -> waiting claim allocated in %s (its backoff was past 8s)", took.Round(10*time.Millisecond))
			if took > 5*time.Second {
				t.Errorf("the waiting claim took %s: a new slice must retry it at once, not after its backoff", took)
			}
			if got := v2.Status.Allocation.Devices.Results[0].Device; got != "v2-0" {
				t.Errorf("gen-v2 got %s, want v2-0", got)
			}
			current := clPoolsOf(ctx, t, c, genDriver)[genNode]
			for _, name := range burst {
				cl := clWaitClaim(ctx, t, c, clNamespace, name, "allocation", clAllocated)
				dev := cl.Status.Allocation.Devices.Results[0].Device
				if !slices.ContainsFunc(current.Devices, func(d pool.Device) bool { return d.Device.Name == dev }) || current.Generation != 2 {
					t.Errorf("claim %s got %s, which generation %d does not publish", name, dev, current.Generation)
				}
			}
			clCheckNoRaces(ctx, t, c)
			return ctx
		}).
		Assess("a claim that lost a race is allocated again, and a hold keeps kube-scheduler counting the device the winner keeps", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			clCreateSlices(ctx, t, c, clNodeSlice(raceDriver, genNode, 1, []resourceapi.Device{{Name: "r0"}, {Name: "r1"}}))
			immediate := map[string]string{claimspkg.AllocationLabel: claimspkg.AllocationImmediate}
			ours := clWaitClaim(ctx, t, c, clNamespace, clCreateClaim(ctx, t, c, clNamespace, "race-ours", immediate, nil, clClaimSpec(raceClass, 1, "")).Name, "allocation", clAllocated)
			taken := ours.Status.Allocation.Devices.Results[0]

			// kube-scheduler's late write, as it happens when it chose the
			// same device before it saw the operator's allocation: another
			// claim gets the device, written under kube-scheduler's name.
			theirs := clCreateClaim(ctx, t, c, clNamespace, "race-theirs", nil, nil, clClaimSpec(raceClass, 1, ""))
			theirs.Status.Allocation = &resourceapi.AllocationResult{
				Devices:             resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{Request: "devices", Driver: taken.Driver, Pool: taken.Pool, Device: taken.Device}}},
				AllocationTimestamp: ptr.To(metav1.Now()),
			}
			begin := time.Now()
			if _, err := c.Client.ResourceV1().ResourceClaims(clNamespace).UpdateStatus(ctx, theirs, metav1.UpdateOptions{FieldManager: "kube-scheduler"}); err != nil {
				t.Fatal(err)
			}
			clWaitClaimEvent(ctx, t, c, clNamespace, "race-ours", claimsctrl.EventLostRace, taken.Device)
			again := clWaitClaim(ctx, t, c, clNamespace, "race-ours", "a new allocation", func(cl *resourceapi.ResourceClaim) bool {
				return cl.Status.Allocation != nil && cl.Status.Allocation.Devices.Results[0].Device != taken.Device
			})
			t.Logf("timing: colliding write -> operator's claim moved from %s to %s in %s", taken.Device, again.Status.Allocation.Devices.Results[0].Device, since(begin))
			hold := waitHold(ctx, t, c, func(h *resourceapi.ResourceClaim) bool {
				return h.Status.Allocation != nil && h.OwnerReferences[0].Name == "race-theirs" &&
					h.Annotations[claimspkg.HoldDeviceAnnotation] == claimspkg.DeviceKey(taken)
			})
			t.Logf("hold %s keeps %s counted for race-theirs", hold.Name, hold.Annotations[claimspkg.HoldDeviceAnnotation])
			clCheckNoRaces(ctx, t, c)

			// The keeper gives the device back: the hold goes with it.
			theirs, err := c.Client.ResourceV1().ResourceClaims(clNamespace).Get(ctx, "race-theirs", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			theirs.Status.Allocation = nil
			if _, err := c.Client.ResourceV1().ResourceClaims(clNamespace).UpdateStatus(ctx, theirs, metav1.UpdateOptions{FieldManager: "kube-scheduler"}); err != nil {
				t.Fatal(err)
			}
			if err := wait.PollUntilContextTimeout(ctx, pollInterval, clTimeout, true, func(ctx context.Context) (bool, error) {
				_, err := c.Client.ResourceV1().ResourceClaims(clNamespace).Get(ctx, hold.Name, metav1.GetOptions{})
				return apierrors.IsNotFound(err), nil
			}); err != nil {
				t.Errorf("hold %s outlives its keeper's allocation: %v", hold.Name, err)
			}
			return ctx
		}).
		Assess("claims deleted while the operator allocates them leave nothing behind", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			var names []string
			for i := range 20 {
				name := fmt.Sprintf("short-lived-%d", i)
				clCreateClaim(ctx, t, c, clNamespace, name, nil, nil, clClaimSpec(tpuClass, 1, "device.attributes['"+tpuDriver+"'].shape == '2x2'"))
				time.Sleep(time.Duration(i%5) * 5 * time.Millisecond)
				if err := c.Client.ResourceV1().ResourceClaims(clNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				names = append(names, name)
			}
			err := wait.PollUntilContextTimeout(ctx, pollInterval, clTimeout, true, func(ctx context.Context) (bool, error) {
				for _, n := range names {
					if _, err := c.Client.ResourceV1().ResourceClaims(clNamespace).Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
						return false, nil
					}
				}
				return true, nil
			})
			if err != nil {
				t.Fatalf("deleted claims are still there (a finalizer left behind?): %v", err)
			}
			// The devices are free again: the one 2x2 left (the 2x4 spans
			// two hosts, tpu-later holds a third) goes to a new claim.
			for i := range 1 {
				name := fmt.Sprintf("after-churn-%d", i)
				clCreateClaim(ctx, t, c, clNamespace, name, nil, nil, clClaimSpec(tpuClass, 1, "device.attributes['"+tpuDriver+"'].shape == '2x2'"))
				clWaitClaim(ctx, t, c, clNamespace, name, "allocation", clAllocated)
			}
			clCheckNoRaces(ctx, t, c)
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			if s, _ := ctx.Value(clKey{}).(*clState); s != nil {
				s.op.stop()
				s.restore()
			}
			clRemoveWebhook(ctx, t, c)
			clDeleteNamespace(ctx, t, c, clNamespace)
			for _, d := range []string{ringDriver, gridDriver, tpuDriver, genDriver, raceDriver} {
				sel := "spec.driver=" + d
				if err := c.Client.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: sel}); err != nil {
					t.Errorf("delete slices of %s: %v", d, err)
				}
			}
			for _, dc := range []string{ringClass, gridClass, tpuClass, genClass, raceClass} {
				_ = c.Client.ResourceV1().DeviceClasses().Delete(ctx, dc, metav1.DeleteOptions{})
			}
			for _, n := range clNodes() {
				if err := c.DeleteNode(ctx, n); err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("%v", err)
				}
			}
			return ctx
		}).
		Feature()
	testenv.Test(t, feature)
}

// waitHold waits for a hold claim of the suite's namespace that ok
// accepts.
func waitHold(ctx context.Context, t *testing.T, c *cluster.Cluster, ok func(*resourceapi.ResourceClaim) bool) *resourceapi.ResourceClaim {
	t.Helper()
	var found *resourceapi.ResourceClaim
	err := wait.PollUntilContextTimeout(ctx, pollInterval, clTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := c.Client.ResourceV1().ResourceClaims(clNamespace).List(ctx, metav1.ListOptions{LabelSelector: claimspkg.HoldLabel + "=true"})
		if err != nil {
			return false, nil //nolint:nilerr // retried
		}
		for i := range list.Items {
			if h := &list.Items[i]; len(h.OwnerReferences) == 1 && ok(h) {
				found = h
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no hold claim: %v", err)
	}
	return found
}

// clPublishSlices publishes the suite's devices: a ring of 8 with
// an index, a 4x4 grid with row and col, a 2x2-host multi-host pool of
// 2x2 chips per host (KEP-4815, through internal/topology as the central
// publisher would), and 8 devices of version 1 that a later step
// republishes.
func clPublishSlices(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	var ring, grid, gen []resourceapi.Device
	for i := range 8 {
		ring = append(ring, resourceapi.Device{Name: fmt.Sprintf("ring-%d", i), Attributes: clIntAttrs(map[string]int64{"index": int64(i)})})
		gen = append(gen, resourceapi.Device{Name: fmt.Sprintf("d%d", i), Attributes: clIntAttrs(map[string]int64{"version": 1})})
	}
	for r := range 4 {
		for col := range 4 {
			grid = append(grid, resourceapi.Device{Name: fmt.Sprintf("grid-%d", r*4+col), Attributes: clIntAttrs(map[string]int64{"row": int64(r), "col": int64(col)})})
		}
	}
	clCreateSlices(ctx, t, c, clNodeSlice(ringDriver, ringNode, 1, ring), clNodeSlice(gridDriver, gridNode, 1, grid), clNodeSlice(genDriver, genNode, 1, gen))

	var entries []topology.HostEntry
	for x := 0; x < 2; x++ {
		for y := 0; y < 2; y++ {
			entries = append(entries, topology.HostEntry{Node: clTPUNode(x, y), Coordinates: fmt.Sprintf("%d.%d", x, y)})
		}
	}
	hosts, err := topology.BuildHosts([]int{2, 2}, entries)
	if err != nil {
		t.Fatal(err)
	}
	res, err := topology.Generate(topology.Spec{
		Driver: tpuDriver, Pool: tpuPool, Domain: "a",
		HostGrid: []int{2, 2}, ChipsPerHost: []int{2, 2}, Partitions: []string{"2x2", "2x4", "4x4"},
		Hosts: hosts,
	}, 1)
	if err != nil {
		t.Fatal(err)
	}
	clCreateSlices(ctx, t, c, res.Slices...)
	t.Logf("published %d multi-host slices with %d devices", len(res.Slices), res.Summary.Devices)
}

// clCheckOperatorAllocation checks that the operator allocated the claim the
// way kube-scheduler would have: finalizer, timestamp, reserved for the
// pod, an Allocated Event, and the pod's gate removal Event.
func clCheckOperatorAllocation(ctx context.Context, t *testing.T, c *cluster.Cluster, name string, pod *corev1.Pod) *resourceapi.ResourceClaim {
	t.Helper()
	claim := clWaitClaim(ctx, t, c, pod.Namespace, name, "reservation for the pod", func(cl *resourceapi.ResourceClaim) bool {
		return cl.Status.Allocation != nil && slices.ContainsFunc(cl.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == pod.UID })
	})
	if by := claimspkg.AllocatedBy(claim); by != claimsctrl.FieldManager {
		t.Errorf("claim %s: allocation written by %q, want %q", name, by, claimsctrl.FieldManager)
	}
	if claim.Status.Allocation.AllocationTimestamp == nil {
		t.Errorf("claim %s: allocation without allocationTimestamp", name)
	}
	if !claimspkg.HasFinalizer(claim) {
		t.Errorf("claim %s: no %s finalizer", name, claimspkg.Finalizer)
	}
	clWaitClaimEvent(ctx, t, c, pod.Namespace, name, claimsctrl.EventAllocated, "allocated by the native engine")
	found := slices.ContainsFunc(clEventsOn(ctx, c, pod.Namespace, "Pod", pod.Name), func(e eventsv1.Event) bool { return e.Reason == claimsctrl.EventGateRemoved })
	if !found {
		if err := wait.PollUntilContextTimeout(ctx, pollInterval, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			return slices.ContainsFunc(clEventsOn(ctx, c, pod.Namespace, "Pod", pod.Name), func(e eventsv1.Event) bool { return e.Reason == claimsctrl.EventGateRemoved }), nil
		}); err != nil {
			t.Errorf("pod %s: no %s Event", pod.Name, claimsctrl.EventGateRemoved)
		}
	}
	return claim
}

// ringIndices are the index attributes of a claim's ring devices, sorted.
func ringIndices(ctx context.Context, t *testing.T, c *cluster.Cluster, claim *resourceapi.ResourceClaim) []int64 {
	t.Helper()
	var idx []int64
	for _, a := range clDeviceAttrs(ctx, t, c, ringDriver, claim.Status.Allocation.Devices.Results) {
		idx = append(idx, *a["index"].IntValue)
	}
	slices.Sort(idx)
	return idx
}

// contiguous: n sorted values, each one more than the one before.
func contiguous(idx []int64, n int) bool {
	if len(idx) != n {
		return false
	}
	for i := 1; i < n; i++ {
		if idx[i] != idx[i-1]+1 {
			return false
		}
	}
	return true
}

// clAdjacentPair: exactly two values, one apart.
func clAdjacentPair(m map[int64]bool) bool {
	k := clKeys(m)
	return len(k) == 2 && k[1]-k[0] == 1
}

func clKeys(m map[int64]bool) []int64 {
	var out []int64
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
