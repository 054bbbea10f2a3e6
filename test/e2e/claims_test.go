//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/claimpolicy"
	claimsctrl "github.com/drastack/drastack/internal/controller/claims"
	"github.com/drastack/drastack/internal/operator"
	"github.com/drastack/drastack/internal/pool"
	"github.com/drastack/drastack/internal/topology"
	"github.com/drastack/drastack/test/cluster"
)

// The claim controller suite on the real control plane: KEP-5254 stories
// with pods held by the webhook's scheduling gate, an immediate multi-host
// claim, the upstream engine, a pod the webhook did not gate, invalid and
// unsatisfiable claims, a pool republished at a new generation, placement
// that honours the pod, placing again a pod that cannot run, and claims
// deleted while allocated. Every driver of the suite but openDriver is
// central (spec.claims.central): only the operator allocates its devices.
const (
	clNamespace  = "claims"
	ringDriver   = "ring.claims.e2e.drastack.io"
	gridDriver   = "grid.claims.e2e.drastack.io"
	tpuDriver    = "tpu.claims.e2e.drastack.io"
	genDriver    = "gen.claims.e2e.drastack.io"
	placeDriver  = "place.claims.e2e.drastack.io"
	openDriver   = "open.claims.e2e.drastack.io"
	placeClass   = "claims-place"
	openClass    = "claims-open"
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

// placeNode are the nodes of the placement steps: each has three central
// devices (placeDriver) and one of kube-scheduler's (openDriver).
func placeNode(i int) string { return fmt.Sprintf("claims-place-%d", i) }

const placeNodes = 4

func clNodes() []string {
	nodes := []string{ringNode, gridNode, genNode}
	for i := range placeNodes {
		nodes = append(nodes, placeNode(i))
	}
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
				spec := cluster.NodeSpec{Name: n}
				if n == placeNode(0) {
					// The only node a pod asking for 48 CPUs fits.
					spec.Capacity = cluster.DefaultNodeCapacity()
					spec.Capacity[corev1.ResourceCPU] = resource.MustParse("64")
				}
				specs = append(specs, spec)
			}
			if err := c.AddNodes(ctx, specs...); err != nil {
				t.Fatal(err)
			}
			for _, dc := range []*resourceapi.DeviceClass{
				deviceClass(ringClass, ringDriver, ""), deviceClass(gridClass, gridDriver, ""),
				deviceClass(tpuClass, tpuDriver, ""), deviceClass(genClass, genDriver, ""),
				deviceClass(placeClass, placeDriver, ""), deviceClass(openClass, openDriver, ""),
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
			s.restore = clApplyClaimsSpec(ctx, t, s.crc, clSuiteSpec())
			begin := time.Now()
			s.op = clStartOperator(ctx, t, c, clNamespace)
			clWaitCentral(ctx, t, c, ringDriver, gridDriver, tpuDriver, genDriver, placeDriver)
			clCreateTemplate(ctx, t, c, clNamespace, "probe", nil, clCEL("true"), clClaimSpec(ringClass, 1, ""))
			clWaitWebhook(ctx, t, c, clNamespace, "probe")
			t.Logf("timing: operator start -> ready in %s", since(begin))
			return context.WithValue(ctx, clKey{}, s)
		}).
		Assess("KEP-5254: a pod's claim for 4 contiguous devices is allocated exactly such a set while the pod waits behind the gate", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			// Another pod takes index 1, so a naive first fit (0, 2, 3, 4)
			// is not contiguous; only 2..5 is. Its claim is for a central
			// class, so it is the operator's too, and gated.
			clCreateTemplate(ctx, t, c, clNamespace, "ring-busy", nil, nil,
				clClaimSpec(ringClass, 1, "device.attributes['"+ringDriver+"'].index == 1"))
			busy := clCreatePod(ctx, t, c, claimPod(clNamespace, "ring-busy", "ring-busy"))
			if !claimpolicy.HasGate(busy) {
				t.Errorf("pod %s with a claim for a central class was not gated", busy.Name)
			}
			waitPodRunning(ctx, t, c, clNamespace, busy.Name)

			clCreateTemplate(ctx, t, c, clNamespace, "ring-4", nil, clCEL(contiguous4), clClaimSpec(ringClass, 4, ""))
			begin := time.Now()
			pod := clCreatePod(ctx, t, c, claimPod(clNamespace, "ring-four", "ring-4"))
			if !claimpolicy.HasGate(pod) {
				t.Fatalf("pod %s was admitted without the gate %s: %v", pod.Name, claimpolicy.SchedulingGate, pod.Spec.SchedulingGates)
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
				if !claimpolicy.HasGate(pod) {
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
			// The workload knows its nodes before it starts; its pods are
			// gated like every pod with an operator claim, released once a
			// node of the slice fits them, and land there.
			for i := range 2 {
				p := clCreatePod(ctx, t, c, clSharedPod(clNamespace, fmt.Sprintf("tpu-%d", i), "tpu-slice"))
				if !claimpolicy.HasGate(p) {
					t.Errorf("pod %s of an operator claim was not gated", p.Name)
				}
			}
			for i := range 2 {
				p := waitPodRunning(ctx, t, c, clNamespace, fmt.Sprintf("tpu-%d", i))
				if !slices.Contains(hosts, p.Spec.NodeName) {
					t.Errorf("pod %s on node %s, outside the slice's hosts %v", p.Name, p.Spec.NodeName, hosts)
				}
			}
			claim = clWaitClaim(ctx, t, c, clNamespace, "tpu-slice", "two consumers", func(cl *resourceapi.ResourceClaim) bool { return len(cl.Status.ReservedFor) == 2 })
			if by := claimpolicy.AllocatedBy(claim); by != claimsctrl.FieldManager {
				t.Errorf("allocation written by %q, want %q", by, claimsctrl.FieldManager)
			}

			// A pod that names a claim before it exists is not gated: the
			// webhook gates only for claims it can see, so that plain
			// workloads created before their claims never wait for the
			// operator. kube-scheduler cannot allocate the claim once it
			// appears either (its class matches only central devices, which
			// no claim may tolerate), so the pod waits unscheduled until
			// the operator has allocated it.
			early := clCreatePod(ctx, t, c, clSharedPod(clNamespace, "tpu-early", "tpu-later"))
			if claimpolicy.HasGate(early) {
				t.Fatalf("pod %s naming a missing claim was gated", early.Name)
			}
			time.Sleep(time.Second)
			if p, err := c.Client.CoreV1().Pods(clNamespace).Get(ctx, early.Name, metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
				t.Errorf("pod %s was scheduled before its claim existed (err %v)", early.Name, err)
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
			if !claimpolicy.HasGate(pod) {
				t.Fatalf("pod %s was admitted without the gate", pod.Name)
			}
			name := clPodClaimName(ctx, t, c, clNamespace, pod.Name)
			e := clWaitEvent(ctx, t, c, clNamespace, "Pod", pod.Name, string(claimpolicy.OutcomeNotSupported), "not supported by the upstream engine")
			t.Logf("event on %s: %s: %s", name, e.Reason, e.Note)
			claim, err := c.Client.ResourceV1().ResourceClaims(clNamespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := claim.Annotations[allocator.CELConstraintsAnnotation]; !ok || claim.Status.Allocation != nil {
				t.Errorf("claim %s from the template: annotation copied=%v, allocated=%v; want copied, unallocated", name, ok, claim.Status.Allocation != nil)
			}
			if p, err := c.Client.CoreV1().Pods(clNamespace).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil || !claimpolicy.HasGate(p) || p.Spec.NodeName != "" {
				t.Errorf("pod %s must stay gated and unscheduled while its claim cannot be allocated (err %v)", pod.Name, err)
			}
			clWaitStackClaims(ctx, t, s.crc, metav1.ConditionFalse, claimpolicy.ReasonEngineNotSupported, func(v1alpha1.ClaimCounts) bool { return true })

			begin := time.Now()
			clSetEngine(ctx, t, s.crc, v1alpha1.EngineNative)
			pod = waitPodRunning(ctx, t, c, clNamespace, pod.Name)
			t.Logf("timing: engine set back to native -> pod Running in %s", since(begin))
			claim = clCheckOperatorAllocation(ctx, t, c, name, pod)
			if idx := ringIndices(ctx, t, c, claim); !contiguous(idx, 2) {
				t.Errorf("devices with indices %v, want 2 contiguous ones", idx)
			}
			clCheckNoRaces(ctx, t, c)
			clWaitStackClaims(ctx, t, s.crc, metav1.ConditionTrue, claimpolicy.ReasonKeepingUp, func(v1alpha1.ClaimCounts) bool { return true })
			return ctx
		}).
		Assess("a pod the webhook did not gate: kube-scheduler cannot take central devices, the operator places its claim", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), clFrom(ctx, t)
			// gatePods false makes the webhook let pods through, as a
			// webhook that is down does (failurePolicy Ignore).
			writeStackSpec(ctx, t, s.crc, clTimeout, func(sp *v1alpha1.DRAStackSpec) { sp.Claims.GatePods = ptr.To(false) })
			defer writeStackSpec(ctx, t, s.crc, clTimeout, func(sp *v1alpha1.DRAStackSpec) { sp.Claims.GatePods = ptr.To(true) })
			if err := wait.PollUntilContextTimeout(ctx, pollInterval, clTimeout, true, func(ctx context.Context) (bool, error) {
				// The webhook reads the DRAStack from its cache: retry until
				// it sees gatePods off.
				p, err := c.Client.CoreV1().Pods(clNamespace).Create(ctx, claimPod(clNamespace, "grid-ungated", "grid-2x2"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				return err == nil && !claimpolicy.HasGate(p), nil
			}); err != nil {
				t.Fatalf("pods are still gated with gatePods off: %v", err)
			}
			pod := clCreatePod(ctx, t, c, claimPod(clNamespace, "grid-ungated", "grid-2x2"))
			if claimpolicy.HasGate(pod) {
				t.Fatalf("pod %s was gated", pod.Name)
			}
			pod = waitPodRunning(ctx, t, c, clNamespace, pod.Name)
			name := clPodClaimName(ctx, t, c, clNamespace, pod.Name)
			claim := clWaitClaim(ctx, t, c, clNamespace, name, "allocation", clAllocated)
			if by := claimpolicy.AllocatedBy(claim); by != claimsctrl.FieldManager {
				t.Fatalf("claim %s allocated by %q, want the operator (%s): kube-scheduler must not take central devices", name, by, claimsctrl.FieldManager)
			}
			rows, cols := map[int64]bool{}, map[int64]bool{}
			for _, a := range clDeviceAttrs(ctx, t, c, gridDriver, claim.Status.Allocation.Devices.Results) {
				rows[*a["row"].IntValue], cols[*a["col"].IntValue] = true, true
			}
			if !clAdjacentPair(rows) || !clAdjacentPair(cols) {
				t.Errorf("ungated pod: devices in rows %v and columns %v, want a 2x2 block", clKeys(rows), clKeys(cols))
			}
			if err := c.Client.CoreV1().Pods(clNamespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
				t.Fatal(err)
			}
			return ctx
		}).
		Assess("an invalid CEL constraint gets one Event and no retries until the claim changes", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), clFrom(ctx, t)
			clCreateClaim(ctx, t, c, clNamespace, "bad-cel", nil, clCEL("size(devices ==="), clClaimSpec(ringClass, 1, ""))
			clCreatePod(ctx, t, c, clSharedPod(clNamespace, "bad-cel-user", "bad-cel"))
			clWaitEvent(ctx, t, c, clNamespace, "Pod", "bad-cel-user", string(claimpolicy.OutcomeInvalid), "not retried until the claim changes")
			attempts := clMetric(t, "drastack_claim_placements_total", map[string]string{"result": string(claimpolicy.OutcomeInvalid)})
			counts := clWaitStackClaims(ctx, t, s.crc, metav1.ConditionTrue, claimpolicy.ReasonKeepingUp, func(c v1alpha1.ClaimCounts) bool { return c.Invalid >= 1 })
			t.Logf("DRAStack status.claims with an invalid claim: %+v", counts)
			// Slices change meanwhile (they would retry an unsatisfiable
			// claim); an invalid one stays put.
			extra := clNodeSlice(genDriver, genNode+"-noise", 1, []resourceapi.Device{{Name: "noise"}})
			extra.Spec.NodeName = ptr.To(genNode)
			clCreateSlices(ctx, t, c, extra)
			time.Sleep(3 * time.Second)
			if after := clMetric(t, "drastack_claim_placements_total", map[string]string{"result": string(claimpolicy.OutcomeInvalid)}); after != attempts {
				t.Errorf("the invalid claim was retried %v times without changing", after-attempts)
			}
			var n int32
			for _, e := range clEventsOn(ctx, c, clNamespace, "Pod", "bad-cel-user") {
				if e.Reason == string(claimpolicy.OutcomeInvalid) {
					n += clEventCount(e)
				}
			}
			if n != 1 {
				t.Errorf("%d Invalid Events on the pod, want exactly 1", n)
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
			waitPodRunning(ctx, t, c, clNamespace, "bad-cel-user")
			_ = c.Client.ResourceV1().ResourceSlices().Delete(ctx, extra.Name, metav1.DeleteOptions{})
			return ctx
		}).
		Assess("a pool republished at a new generation while claims wait: nothing is allocated from the incomplete generation, then everything at once", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			immediate := map[string]string{claimpolicy.AllocationLabel: claimpolicy.AllocationImmediate}
			clCreateClaim(ctx, t, c, clNamespace, "gen-v2", immediate, nil, clClaimSpec(genClass, 1, "device.attributes['"+genDriver+"'].version == 2"))
			clWaitClaimEvent(ctx, t, c, clNamespace, "gen-v2", string(claimpolicy.OutcomeUnsatisfiable), "retried with backoff")
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
		Assess("placement honours the pod: node selector, affinity, cordon, node taints, CPU, and claims of both allocators on one node", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			clCreateTemplate(ctx, t, c, clNamespace, "place-1", nil, nil, clClaimSpec(placeClass, 1, ""))
			clCreateTemplate(ctx, t, c, clNamespace, "open-1", nil, nil, clClaimSpec(openClass, 1, ""))

			// A node selector and a required affinity pick the node.
			sel := claimPod(clNamespace, "place-selector", "place-1")
			sel.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": placeNode(3)}
			aff := claimPod(clNamespace, "place-affinity", "place-1")
			aff.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{placeNode(2)},
				}}}},
			}}}
			for pod, want := range map[*corev1.Pod]string{sel: placeNode(3), aff: placeNode(2)} {
				clCreatePod(ctx, t, c, pod)
				if got := waitPodRunning(ctx, t, c, clNamespace, pod.Name).Spec.NodeName; got != want {
					t.Errorf("pod %s on %s, want %s", pod.Name, got, want)
				}
			}

			// Node 0 cordoned, node 1 tainted: a pod that needs more CPU
			// than nodes 2 and 3 have left... is placed nowhere until
			// the cordon is lifted.
			setUnschedulable(ctx, t, c, placeNode(0), true)
			clTaintNode(ctx, t, c, placeNode(1), corev1.Taint{Key: "claims.e2e.drastack.io/maintenance", Effect: corev1.TaintEffectNoSchedule})
			big := claimPod(clNamespace, "place-big", "place-1")
			big.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("48")}
			clCreatePod(ctx, t, c, big)
			e := clWaitEvent(ctx, t, c, clNamespace, "Pod", big.Name, string(claimpolicy.OutcomeUnsatisfiable), "nodes are available")
			t.Logf("pod %s: %s", big.Name, e.Note)
			for _, want := range []string{"unschedulable", "untolerated taint", "Insufficient cpu"} {
				if !strings.Contains(e.Note, want) {
					t.Errorf("the Unsatisfiable Event does not say %q: %s", want, e.Note)
				}
			}
			if p, err := c.Client.CoreV1().Pods(clNamespace).Get(ctx, big.Name, metav1.GetOptions{}); err != nil || !claimpolicy.HasGate(p) {
				t.Errorf("pod %s must stay gated while no node fits it (err %v)", big.Name, err)
			}
			setUnschedulable(ctx, t, c, placeNode(0), false)
			if got := waitPodRunning(ctx, t, c, clNamespace, big.Name).Spec.NodeName; got != placeNode(0) {
				t.Errorf("pod %s on %s, want %s (the only node with 48 CPUs)", big.Name, got, placeNode(0))
			}

			// Two operator claims and one of kube-scheduler's: the
			// operator's are placed together where kube-scheduler's fits
			// too, and the pod runs there.
			both := claimPod(clNamespace, "place-both", "place-1")
			both.Spec.ResourceClaims = append(both.Spec.ResourceClaims,
				corev1.PodResourceClaim{Name: "second", ResourceClaimTemplateName: ptr.To("place-1")},
				corev1.PodResourceClaim{Name: "open", ResourceClaimTemplateName: ptr.To("open-1")})
			both.Spec.Containers[0].Resources.Claims = append(both.Spec.Containers[0].Resources.Claims,
				corev1.ResourceClaim{Name: "second"}, corev1.ResourceClaim{Name: "open"})
			clCreatePod(ctx, t, c, both)
			both = waitPodRunning(ctx, t, c, clNamespace, both.Name)
			byAllocator := map[string]int{}
			for _, r := range allocatedDevices(ctx, t, c.Client, both) {
				if r.Pool != both.Spec.NodeName {
					t.Errorf("pod %s on %s got %s/%s of another node", both.Name, both.Spec.NodeName, r.Pool, r.Device)
				}
				byAllocator[r.Driver]++
			}
			if byAllocator[placeDriver] != 2 || byAllocator[openDriver] != 1 {
				t.Errorf("pod %s got %v, want 2 central devices and 1 of kube-scheduler's", both.Name, byAllocator)
			}
			clUntaintNode(ctx, t, c, placeNode(1))
			clCheckNoRaces(ctx, t, c)
			return ctx
		}).
		Assess("a pod that cannot run where its claim was placed is placed again after placementTimeout", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), clFrom(ctx, t)
			for _, p := range []string{"place-selector", "place-affinity", "place-big", "place-both"} {
				_ = c.Client.CoreV1().Pods(clNamespace).Delete(ctx, p, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			}
			clWaitDriverFree(ctx, t, c, clNamespace, placeDriver)
			writeStackSpec(ctx, t, s.crc, clTimeout, func(sp *v1alpha1.DRAStackSpec) {
				sp.Claims.PlacementTimeout = &metav1.Duration{Duration: 5 * time.Second}
			})
			// A pod already on node 0 holds host port 7000; placement does
			// not look at host ports (kube-scheduler does), so the next pod,
			// which wants the same port and may only run on nodes 0 and 1,
			// is placed on node 0 while node 1 is cordoned, and then cannot
			// be scheduled there.
			setUnschedulable(ctx, t, c, placeNode(1), true)
			blocker := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: clNamespace, Name: "port-blocker"},
				Spec: corev1.PodSpec{NodeName: placeNode(0), Containers: []corev1.Container{{
					Name: "main", Image: "registry.k8s.io/pause:3.10", Ports: []corev1.ContainerPort{{ContainerPort: 7000, HostPort: 7000}},
				}}},
			}
			clCreatePod(ctx, t, c, blocker)
			waitPodRunning(ctx, t, c, clNamespace, blocker.Name)
			moving := claimPod(clNamespace, "place-moving", "place-1")
			moving.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 7000, HostPort: 7000}}
			moving.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{placeNode(0), placeNode(1)},
				}}}},
			}}}
			clCreatePod(ctx, t, c, moving)
			name := clPodClaimName(ctx, t, c, clNamespace, moving.Name)
			first := clWaitClaim(ctx, t, c, clNamespace, name, "allocation on node 0", clAllocated)
			if pool := first.Status.Allocation.Devices.Results[0].Pool; pool != placeNode(0) {
				t.Fatalf("claim %s placed on %s, want %s", name, pool, placeNode(0))
			}
			// The node is cordoned before the pod could bind, and node 1 is
			// open again.
			setUnschedulable(ctx, t, c, placeNode(0), true)
			setUnschedulable(ctx, t, c, placeNode(1), false)
			begin := time.Now()
			pod := waitPodRunning(ctx, t, c, clNamespace, moving.Name)
			t.Logf("timing: node cordoned -> claim placed again and pod Running on %s in %s", pod.Spec.NodeName, since(begin))
			if pod.Spec.NodeName != placeNode(1) {
				t.Errorf("pod %s on %s, want %s", pod.Name, pod.Spec.NodeName, placeNode(1))
			}
			claim := clCheckOperatorAllocation(ctx, t, c, name, pod)
			if pool := claim.Status.Allocation.Devices.Results[0].Pool; pool != placeNode(1) {
				t.Errorf("claim %s finally on %s, want %s", name, pool, placeNode(1))
			}
			// Who took the first placement back: kube-scheduler's PostFilter
			// deallocates an unreserved claim of a pod it cannot schedule
			// (freeing devices is always safe), or the operator after
			// placementTimeout, whichever comes first.
			replaced := 0
			for _, e := range clEventsOn(ctx, c, clNamespace, "ResourceClaim", name) {
				if e.Reason == claimsctrl.EventReplaced {
					replaced++
				}
			}
			t.Logf("claim %s placed again; AllocationReplaced Events by the operator: %d", name, replaced)
			setUnschedulable(ctx, t, c, placeNode(0), false)
			clCheckNoRaces(ctx, t, c)
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
			// The claims go first, while the operator runs: a central
			// device leaves the partition (and the DRAStack goes) only
			// once no allocation holds it.
			clDeleteNamespace(ctx, t, c, clNamespace)
			if s, _ := ctx.Value(clKey{}).(*clState); s != nil {
				s.restore()
				s.op.stop()
			}
			clRemoveWebhook(ctx, t, c)
			for _, d := range []string{ringDriver, gridDriver, tpuDriver, genDriver, placeDriver, openDriver} {
				sel := "spec.driver=" + d
				if err := c.Client.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: sel}); err != nil {
					t.Errorf("delete slices of %s: %v", d, err)
				}
			}
			for _, dc := range []string{ringClass, gridClass, tpuClass, genClass, placeClass, openClass} {
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
	for i := range placeNodes {
		clCreateSlices(ctx, t, c,
			clNodeSlice(placeDriver, placeNode(i), 1, []resourceapi.Device{{Name: "p0"}, {Name: "p1"}, {Name: "p2"}}),
			clNodeSlice(openDriver, placeNode(i), 1, []resourceapi.Device{{Name: "o0"}}))
	}

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
	if by := claimpolicy.AllocatedBy(claim); by != claimsctrl.FieldManager {
		t.Errorf("claim %s: allocation written by %q, want %q", name, by, claimsctrl.FieldManager)
	}
	if claim.Status.Allocation.AllocationTimestamp == nil {
		t.Errorf("claim %s: allocation without allocationTimestamp", name)
	}
	if !claimpolicy.HasFinalizer(claim) {
		t.Errorf("claim %s: no %s finalizer", name, claimpolicy.Finalizer)
	}
	clWaitClaimEvent(ctx, t, c, pod.Namespace, name, claimsctrl.EventAllocated, "allocated by the native engine for pod "+pod.Name)
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
