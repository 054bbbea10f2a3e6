//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/central"
	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/claimwebhook"
	claimsctrl "github.com/drastack/drastack/internal/controller/claims"
	"github.com/drastack/drastack/internal/operator"
	"github.com/drastack/drastack/internal/webhookcert"
	"github.com/drastack/drastack/test/cluster"
)

// The removal suite: deleting the DRAStack while pods wait behind the
// operator's gate lifts every gate first and removes the central taints
// after the last one (ordered through the operator's finalizer, not left
// to the garbage collector), keeps the allocations the operator wrote,
// and lets the DRAStack go. Uninstalling leaves no pod gated.
const (
	rmNamespace = "claims-removal"
	rmDriver    = "rm.claims.e2e.drastack.io"
	rmClass     = "claims-removal"
	rmNodes     = 2
	rmGated     = 3
)

func rmNode(i int) string { return fmt.Sprintf("claims-removal-%d", i) }

// rmLog records, from independent watches, the etcd revision at which
// each gate was lifted and each of the operator's rules was deleted. One
// etcd orders both, so the revisions say which came first.
type rmLog struct {
	mu          sync.Mutex
	gateLifted  map[string]int64 // pod -> revision of the update without the gate
	ruleDeleted map[string]int64 // rule -> revision of its deletion
}

func revision(o metav1.Object) int64 {
	n, _ := strconv.ParseInt(o.GetResourceVersion(), 10, 64)
	return n
}

func (l *rmLog) watch(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods(rmNamespace).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rules, err := c.Client.ResourceV1().DeviceTaintRules().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer pods.Stop()
		// Only a pod seen gated counts: one whose gate went before the
		// watch began (its first event is then an ADDED without it) was
		// lifted earlier, and its later writes (binding, status) are no
		// lifts.
		gated := map[string]bool{}
		for ev := range pods.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			if claimpolicy.HasGate(p) {
				gated[p.Name] = true
				continue
			}
			if ev.Type != watch.Modified || !gated[p.Name] {
				continue
			}
			l.mu.Lock()
			if _, seen := l.gateLifted[p.Name]; !seen {
				l.gateLifted[p.Name] = revision(p)
			}
			l.mu.Unlock()
		}
	}()
	go func() {
		defer rules.Stop()
		for ev := range rules.ResultChan() {
			r, ok := ev.Object.(*resourceapi.DeviceTaintRule)
			if !ok || ev.Type != watch.Deleted || !central.Owned(r) {
				continue
			}
			l.mu.Lock()
			l.ruleDeleted[r.Name] = revision(r)
			l.mu.Unlock()
		}
	}()
}

func TestClaimsRemoval(t *testing.T) {
	feature := features.New("deleting the DRAStack leaves no pod gated, lifts the central taints last, and keeps held devices tainted until they are released").
		Assess("gates lifted, then free devices untainted, held ones when released, then the DRAStack gone", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			createNamespace(ctx, t, c.Client, rmNamespace)
			defer clDeleteNamespace(ctx, t, c, rmNamespace)
			if err := c.InstallCRDs(CRDDir); err != nil {
				t.Fatal(err)
			}
			var specs []cluster.NodeSpec
			for i := range rmNodes {
				specs = append(specs, cluster.NodeSpec{Name: rmNode(i)})
			}
			if err := c.AddNodes(ctx, specs...); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, deviceClass(rmClass, rmDriver, ""), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
			for i := range rmNodes {
				devs := []resourceapi.Device{
					{Name: "dev-0", Attributes: clIntAttrs(map[string]int64{"index": 0})},
					{Name: "dev-1", Attributes: clIntAttrs(map[string]int64{"index": 1})},
				}
				clCreateSlices(ctx, t, c, clNodeSlice(rmDriver, rmNode(i), 1, devs))
			}
			defer func() {
				if err := c.Client.ResourceV1().ResourceSlices().DeleteCollection(context.WithoutCancel(ctx), metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "spec.driver=" + rmDriver}); err != nil {
					t.Errorf("delete slices: %v", err)
				}
			}()
			crc, err := client.New(c.Config, client.Options{Scheme: operator.Scheme()})
			if err != nil {
				t.Fatal(err)
			}
			clApplyClaimsSpec(ctx, t, crc, v1alpha1.ClaimsSpec{Engine: v1alpha1.EngineNative, GatePods: ptr.To(true),
				Central: []v1alpha1.CentralDevices{{Driver: rmDriver, Classes: []string{rmClass}, AllowImmediate: true}}})
			op := clStartOperator(ctx, t, c, rmNamespace)
			defer op.stop()
			defer clRemoveWebhook(ctx, t, c)
			clWaitCentral(ctx, t, c, rmDriver)
			var st v1alpha1.DRAStack
			if err := crc.Get(ctx, client.ObjectKey{Name: v1alpha1.DRAStackName}, &st); err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(st.Finalizers, claimsctrl.CleanupFinalizer) {
				t.Fatalf("DRAStack finalizers %v: want %s while the operator's DeviceTaintRules exist", st.Finalizers, claimsctrl.CleanupFinalizer)
			}

			// A `kubectl apply` of config/default resets the caBundle the
			// operator set: the operator watches its configuration and sets
			// it again within seconds, not at its 5-minute check.
			before, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, webhookcert.DefaultWebhookConfigName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			gate := slices.IndexFunc(before.Webhooks, func(w admissionregistrationv1.MutatingWebhook) bool { return w.Name == claimwebhook.WebhookName })
			if gate < 0 {
				t.Fatalf("%s has no webhook %s", webhookcert.DefaultWebhookConfigName, claimwebhook.WebhookName)
			}
			resetAt := time.Now()
			cfgPatch := fmt.Sprintf(`[{"op":"test","path":"/webhooks/%d/name","value":%q},{"op":"remove","path":"/webhooks/%d/clientConfig/caBundle"}]`, gate, claimwebhook.WebhookName, gate)
			if _, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, webhookcert.DefaultWebhookConfigName, types.JSONPatchType, []byte(cfgPatch), metav1.PatchOptions{}); err != nil {
				t.Fatalf("reset the caBundle: %v", err)
			}
			if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
				cfg, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, webhookcert.DefaultWebhookConfigName, metav1.GetOptions{})
				return err == nil && len(cfg.Webhooks) > gate && len(cfg.Webhooks[gate].ClientConfig.CABundle) > 0, nil
			}); err != nil {
				t.Fatalf("caBundle not set again within 5 s of a reset: %v", err)
			}
			t.Logf("timing: caBundle reset -> set again in %s", since(resetAt))

			// One immediate claim and one pod the operator places; three
			// pods whose CEL constraint no node can meet (3 devices on
			// nodes of 2) wait behind the gate.
			clCreateClaim(ctx, t, c, rmNamespace, "immediate", map[string]string{claimpolicy.AllocationLabel: claimpolicy.AllocationImmediate}, nil, clClaimSpec(rmClass, 1, ""))
			clCreateTemplate(ctx, t, c, rmNamespace, "fits", nil, clCEL("size(devices) == 1"), clClaimSpec(rmClass, 1, ""))
			clCreateTemplate(ctx, t, c, rmNamespace, "never", nil, clCEL("size(devices) == 3"), clClaimSpec(rmClass, 3, ""))
			// The API server's webhook client follows its configuration
			// through a watch of its own: until it has the caBundle back,
			// a call fails and the webhook (failurePolicy Ignore) lets the
			// pod through ungated. Wait until it gates a dry run.
			clWaitWebhook(ctx, t, c, rmNamespace, "never")
			clCreatePod(ctx, t, c, claimPod(rmNamespace, "placed", "fits"))
			for i := range rmGated {
				p := clCreatePod(ctx, t, c, claimPod(rmNamespace, fmt.Sprintf("waiting-%d", i), "never"))
				if !claimpolicy.HasGate(p) {
					t.Fatalf("pod %s admitted without the operator's gate: %v", p.Name, p.Spec.SchedulingGates)
				}
			}
			immediate := clWaitClaim(ctx, t, c, rmNamespace, "immediate", "allocated", clAllocated)
			placed := clWaitClaim(ctx, t, c, rmNamespace, clPodClaimName(ctx, t, c, rmNamespace, "placed"), "allocated", clAllocated)
			for i := range rmGated {
				clWaitEvent(ctx, t, c, rmNamespace, "Pod", fmt.Sprintf("waiting-%d", i), "Unsatisfiable", "")
			}

			log := &rmLog{gateLifted: map[string]int64{}, ruleDeleted: map[string]int64{}}
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			log.watch(wctx, t, c)
			begin := time.Now()
			if err := crc.Delete(ctx, &v1alpha1.DRAStack{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DRAStackName}}); err != nil {
				t.Fatalf("delete the DRAStack: %v", err)
			}
			// Every gate goes and every rule but the held devices' goes;
			// the two allocations keep their devices tainted, so the
			// DRAStack stays until they are released
			// (docs/allocation-protocol.md, section 4).
			held := map[string]bool{}
			for _, c := range []*resourceapi.ResourceClaim{immediate, placed} {
				for _, r := range c.Status.Allocation.Devices.Results {
					held[central.HoldRuleName(central.DeviceID{Driver: r.Driver, Pool: r.Pool, Device: r.Device})] = true
				}
			}
			var ownedRules []string
			if err := wait.PollUntilContextTimeout(ctx, pollInterval, clTimeout, true, func(ctx context.Context) (bool, error) {
				pods, err := c.Client.CoreV1().Pods(rmNamespace).List(ctx, metav1.ListOptions{})
				if err != nil {
					return false, err
				}
				for _, p := range pods.Items {
					if claimpolicy.HasGate(&p) {
						return false, nil
					}
				}
				rules, err := c.Client.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{})
				if err != nil {
					return false, err
				}
				ownedRules = ownedRules[:0]
				for _, r := range rules.Items {
					if central.Owned(&r) {
						ownedRules = append(ownedRules, r.Name)
					}
				}
				if len(ownedRules) != len(held) {
					return false, nil
				}
				for _, n := range ownedRules {
					if !held[n] {
						return false, nil
					}
				}
				return true, nil
			}); err != nil {
				t.Fatalf("after the deletion: operator rules %v, want only the held devices' %v; or a pod is still gated", ownedRules, held)
			}
			t.Logf("timing: DRAStack deleted -> gates lifted and the free devices' rules gone in %s", since(begin))
			if err := crc.Get(ctx, client.ObjectKey{Name: v1alpha1.DRAStackName}, &v1alpha1.DRAStack{}); err != nil {
				t.Fatalf("the DRAStack went while its allocations still hold devices: %v", err)
			}
			// Existing allocations stay valid.
			for _, was := range []*resourceapi.ResourceClaim{immediate, placed} {
				now, err := c.Client.ResourceV1().ResourceClaims(rmNamespace).Get(ctx, was.Name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if now.UID != was.UID || !equality.Semantic.DeepEqual(now.Status.Allocation, was.Status.Allocation) {
					t.Errorf("claim %s: allocation %v after the removal, want it kept as %v", was.Name, now.Status.Allocation, was.Status.Allocation)
				}
			}
			// Releasing them ends the holds and lets the DRAStack go.
			released := time.Now()
			if err := c.Client.CoreV1().Pods(rmNamespace).Delete(ctx, "placed", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
				t.Fatal(err)
			}
			if err := c.Client.ResourceV1().ResourceClaims(rmNamespace).Delete(ctx, "immediate", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := wait.PollUntilContextTimeout(ctx, pollInterval, clTimeout, true, func(ctx context.Context) (bool, error) {
				err := crc.Get(ctx, client.ObjectKey{Name: v1alpha1.DRAStackName}, &v1alpha1.DRAStack{})
				return apierrors.IsNotFound(err), nil
			}); err != nil {
				t.Fatalf("the DRAStack is still there after its allocations were released: %v", err)
			}
			t.Logf("timing: allocations released -> DRAStack gone in %s", since(released))
			rules, err := c.Client.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rules.Items {
				if central.Owned(&r) {
					t.Errorf("DeviceTaintRule %s of the operator left behind", r.Name)
				}
			}
			// The watches may lag the API; wait until they saw every lift
			// and deletion, then compare revisions.
			if err := wait.PollUntilContextTimeout(ctx, pollInterval, clTimeout, true, func(context.Context) (bool, error) {
				log.mu.Lock()
				defer log.mu.Unlock()
				return len(log.gateLifted) >= rmGated && len(log.ruleDeleted) > 0, nil
			}); err != nil {
				t.Fatalf("watches saw %d gate lifts and %d rule deletions", len(log.gateLifted), len(log.ruleDeleted))
			}
			log.mu.Lock()
			var lastLift int64
			for _, rev := range log.gateLifted {
				lastLift = max(lastLift, rev)
			}
			for name, rev := range log.ruleDeleted {
				if rev < lastLift {
					t.Errorf("DeviceTaintRule %s deleted at revision %d, before the last gate was lifted (revision %d): kube-scheduler could allocate an operator claim without its constraints", name, rev, lastLift)
				}
			}
			t.Logf("gates lifted at revisions %v; rules deleted at %v", log.gateLifted, log.ruleDeleted)
			log.mu.Unlock()

			return ctx
		}).Feature()
	testenv.Test(t, feature)
}
