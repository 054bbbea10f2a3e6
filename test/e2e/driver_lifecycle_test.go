//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	driverctrl "github.com/drastack/drastack/internal/controller/driver"
	"github.com/drastack/drastack/internal/driver"
	"github.com/drastack/drastack/test/cluster"
)

// The driver lifecycle suite installs the example driver on two labelled
// kwok nodes through DRAStack spec.drivers and follows it through a
// rollout, a failing plugin, a removal blocked by a claim, and the
// deletion of the DRAStack. kwok runs no plugin code, so where a plugin
// would publish its node's ResourceSlice the test does, acting as the
// plugin's service account through the admission policy.
const (
	drvNamespace  = "drivers-e2e"
	drvDriver     = "gpu.example.com"
	drvNodeLabel  = "e2e.drastack.io/gpu-node"
	drvOpsNS      = driverctrl.DefaultNamespace
	drvNewImage   = "registry.k8s.io/dra-example-driver/dra-example-driver:v0.2.1"
	drvMinReadyS  = 8
	drvClassName  = drvDriver
	drvTemplate   = "one-gpu"
	drvHoldingPod = "holds-a-gpu"
)

var drvNodes = []string{"drv-node-a", "drv-node-b"}

// drvSpec is the example driver on the suite's nodes.
func drvSpec(mutate ...func(*v1alpha1.DriverSpec)) []v1alpha1.DriverSpec {
	d := v1alpha1.DriverSpec{
		Name:           drvDriver,
		Profile:        v1alpha1.DriverProfileExample,
		NodeSelector:   map[string]string{drvNodeLabel: "true"},
		UpdateStrategy: v1alpha1.DriverUpdateStrategy{MaxUnavailable: ptr.To(intstr.FromInt32(1))},
		RemovalPolicy:  v1alpha1.RemovalPolicyDrain,
		// kwok starts pods at once; minReadySeconds (through a user patch)
		// makes each node's new plugin count as available only after a
		// while, so a rollout goes one node at a time, as on real nodes.
		Patches: []v1alpha1.Patch{{Patch: fmt.Sprintf(`[{"op": "add", "path": "/spec/minReadySeconds", "value": %d}]`, drvMinReadyS),
			Target: &v1alpha1.PatchTarget{Kind: "DaemonSet", Name: "kubelet-plugin"}}},
	}
	for _, m := range mutate {
		m(&d)
	}
	return []v1alpha1.DriverSpec{d}
}

type drvKey struct{}

type drvState struct {
	crc          client.Client
	stopOperator func()
}

func drvFrom(ctx context.Context, t *testing.T) *drvState {
	t.Helper()
	s, ok := ctx.Value(drvKey{}).(*drvState)
	if !ok {
		t.Fatal("driver suite state missing: Setup failed")
	}
	return s
}

var dsName = driver.ObjectName(drvDriver, "kubelet-plugin")

// TestDriverLifecycle runs the driver lifecycle controller on the real
// control plane.
func TestDriverLifecycle(t *testing.T) {
	feature := features.New("driver lifecycle: install, roll out, fail, remove").
		Setup(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			var specs []cluster.NodeSpec
			for _, n := range drvNodes {
				specs = append(specs, cluster.NodeSpec{Name: n, Labels: map[string]string{drvNodeLabel: "true"}})
			}
			s := &drvState{crc: prepareFeature(ctx, t, c, drvNamespace, specs...)}
			s.stopOperator = drvStartOperator(ctx, t, c, drvNamespace)
			return context.WithValue(ctx, drvKey{}, s)
		}).
		Assess("a second DRAStack is rejected at admission", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := drvFrom(ctx, t)
			err := s.crc.Create(ctx, &v1alpha1.DRAStack{ObjectMeta: metav1.ObjectMeta{Name: "second"}})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "one DRAStack per cluster") {
				t.Errorf("creating DRAStack %q: %v, want Invalid: one DRAStack per cluster", "second", err)
			}
			return ctx
		}).
		Assess("the example driver installs; a plugin that publishes nothing is reported, then it is Ready", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), drvFrom(ctx, t)
			begin := time.Now()
			drvSetDrivers(ctx, t, s.crc, drvSpec())
			st := drvWaitStack(ctx, t, s.crc, "the plugin running on both nodes but publishing nothing", func(st *v1alpha1.DRAStack) bool {
				d := drvStatus(st, drvDriver)
				status, reason, msg := drvCondition(st, v1alpha1.ConditionDegraded)
				return d != nil && d.NodesReady == 2 && d.Reason == driver.ReasonNotPublishing &&
					status == metav1.ConditionTrue && reason == driver.ReasonNotPublishing && strings.Contains(msg, drvNodes[0]) && strings.Contains(msg, drvNodes[1])
			})
			t.Logf("timing: spec written -> plugin running on 2 nodes, reported not publishing in %s", since(begin))
			if !slices.Contains(st.Finalizers, driverctrl.Finalizer) {
				t.Errorf("DRAStack with a driver lacks finalizer %s: %v", driverctrl.Finalizer, st.Finalizers)
			}
			drvCheckInstalled(ctx, t, c)

			begin = time.Now()
			drvPublish(ctx, t, c, drvOpsNS, drvDriver, drvNodes...)
			st = drvWaitStack(ctx, t, s.crc, "the driver Ready on both nodes", func(st *v1alpha1.DRAStack) bool {
				d := drvStatus(st, drvDriver)
				status, _, _ := drvCondition(st, v1alpha1.ConditionDriversReady)
				deg, _, _ := drvCondition(st, v1alpha1.ConditionDegraded)
				return d != nil && d.Ready && status == metav1.ConditionTrue && deg == metav1.ConditionFalse
			})
			t.Logf("timing: slices published -> driver Ready in %s", since(begin))
			d := drvStatus(st, drvDriver)
			if d.NodesDesired != 2 || d.NodesUpdated != 2 || d.NodesPublishing != 2 || d.Version != "v0.1.0" || d.Image != driver.ExampleImage ||
				!slices.Equal(d.DeviceClasses, []string{drvClassName}) {
				t.Errorf("driver status %+v", d)
			}
			if st.Status.Summary == nil || st.Status.Summary.Drivers != "1/1 ready" {
				t.Errorf("summary.drivers = %+v, want 1/1 ready", st.Status.Summary)
			}
			return ctx
		}).
		Assess("the admission policy keeps each plugin to its own node's slices", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			a, b := drvNodes[0], drvNodes[1]
			tests := []struct {
				name  string
				node  string
				slice *resourceapi.ResourceSlice
				deny  string
			}{
				{"another node's slice", a, drvNodeSlice(drvDriver, b, 1), "may only write ResourceSlices of that node"},
				{"a slice of another driver", a, drvNodeSlice("other.example.com", a, 1), "may not write ResourceSlices of driver other.example.com"},
				{"a token without a node", "", drvNodeSlice(drvDriver, a, 1), "names no node"},
			}
			for _, tc := range tests {
				tc.slice.Name = "vap-probe-" + strings.ReplaceAll(tc.name, " ", "-")
				tc.slice.Name = strings.ReplaceAll(tc.slice.Name, "'", "")
				_, err := drvPluginClient(t, c, drvOpsNS, drvDriver, tc.node).ResourceV1().ResourceSlices().Create(ctx, tc.slice, metav1.CreateOptions{})
				if err == nil {
					t.Errorf("%s: the plugin on %q created it", tc.name, tc.node)
					_ = c.Client.ResourceV1().ResourceSlices().Delete(ctx, tc.slice.Name, metav1.DeleteOptions{})
					continue
				}
				if !strings.Contains(err.Error(), tc.deny) {
					t.Errorf("%s: denied with %v, want the policy's message %q", tc.name, err, tc.deny)
				}
			}
			// Updating and deleting another node's existing slice is denied too.
			pc := drvPluginClient(t, c, drvOpsNS, drvDriver, a)
			other := drvNodeSlice(drvDriver, b, 4).Name
			if err := pc.ResourceV1().ResourceSlices().Delete(ctx, other, metav1.DeleteOptions{}); err == nil || !strings.Contains(err.Error(), "may only write") {
				t.Errorf("the plugin on %s deleting %s's slice: %v, want denied", a, b, err)
			}
			// The cluster administrator is not the plugin and is not matched.
			admin := drvNodeSlice(drvDriver, b, 1)
			admin.Name = "vap-probe-admin"
			if _, err := c.Client.ResourceV1().ResourceSlices().Create(ctx, admin, metav1.CreateOptions{}); err != nil {
				t.Errorf("the administrator was denied: %v", err)
			}
			_ = c.Client.ResourceV1().ResourceSlices().Delete(ctx, admin.Name, metav1.DeleteOptions{})
			return ctx
		}).
		Assess("a new image rolls out one node at a time; a failing new pod stalls it and is named; fixing it completes the rollout", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), drvFrom(ctx, t)
			before := drvPluginPods(ctx, t, c, drvOpsNS, drvDriver)
			begin := time.Now()
			drvSetDrivers(ctx, t, s.crc, drvSpec(func(d *v1alpha1.DriverSpec) { d.Image = drvNewImage }))
			st := drvWaitStack(ctx, t, s.crc, "the rollout half done: one node updated, Progressing", func(st *v1alpha1.DRAStack) bool {
				d := drvStatus(st, drvDriver)
				prog, reason, _ := drvCondition(st, v1alpha1.ConditionProgressing)
				return d != nil && d.Image == drvNewImage && d.NodesUpdated == 1 && d.NodesDesired == 2 &&
					prog == metav1.ConditionTrue && reason == driver.ReasonRollingOut
			})
			t.Logf("timing: image changed -> one node updated in %s: %s", since(begin), drvStatus(st, drvDriver).Message)
			ds, err := drvDaemonSet(ctx, c, drvOpsNS, dsName)
			if err != nil {
				t.Fatal(err)
			}
			if mu := ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable; mu == nil || mu.IntValue() != 1 {
				t.Errorf("DaemonSet maxUnavailable %v, want 1 from the spec", mu)
			}

			// The updated node's new plugin cannot pull its image.
			var updatedNode string
			for node, p := range drvPluginPods(ctx, t, c, drvOpsNS, drvDriver) {
				if p.Spec.Containers[0].Image == drvNewImage {
					updatedNode = node
					drvFailPod(ctx, t, c, p, "ImagePullBackOff")
				}
			}
			if updatedNode == "" {
				t.Fatal("no plugin pod runs the new image")
			}
			st = drvWaitStack(ctx, t, s.crc, "Degraded naming the node whose new plugin cannot pull, and the rollout reported as stalled", func(st *v1alpha1.DRAStack) bool {
				status, reason, msg := drvCondition(st, v1alpha1.ConditionDegraded)
				return status == metav1.ConditionTrue && reason == "ImagePullBackOff" && strings.Contains(msg, "ImagePullBackOff on node "+updatedNode) &&
					strings.Contains(msg, "no node got an updated, ready plugin since")
			})
			_, _, msg := drvCondition(st, v1alpha1.ConditionDegraded)
			t.Logf("Degraded: %s", msg)
			if d := drvStatus(st, drvDriver); d.NodesUpdated != 0 {
				t.Errorf("the only new plugin fails, yet %d nodes count as updated (only running, ready pods of the new version count)", d.NodesUpdated)
			}
			for node, p := range drvPluginPods(ctx, t, c, drvOpsNS, drvDriver) {
				if node != updatedNode && p.Spec.Containers[0].Image == drvNewImage {
					t.Errorf("with maxUnavailable 1 and the updated node failing, node %s was updated too", node)
				}
			}

			// Fix it: the DaemonSet makes a new pod, which runs.
			begin = time.Now()
			bad := drvPluginPods(ctx, t, c, drvOpsNS, drvDriver)[updatedNode]
			if err := c.Client.CoreV1().Pods(drvOpsNS).Delete(ctx, bad.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			st = drvWaitStack(ctx, t, s.crc, "the rollout complete and the driver Ready on the new version", func(st *v1alpha1.DRAStack) bool {
				d := drvStatus(st, drvDriver)
				deg, _, _ := drvCondition(st, v1alpha1.ConditionDegraded)
				prog, _, _ := drvCondition(st, v1alpha1.ConditionProgressing)
				return d != nil && d.Ready && d.NodesUpdated == 2 && d.Version == "v0.2.1" && deg == metav1.ConditionFalse && prog == metav1.ConditionFalse
			})
			t.Logf("timing: failing pod replaced -> rollout complete in %s", since(begin))
			after := drvPluginPods(ctx, t, c, drvOpsNS, drvDriver)
			for node, p := range after {
				if p.UID == before[node].UID || p.Spec.Containers[0].Image != drvNewImage {
					t.Errorf("node %s still runs the old plugin pod or image", node)
				}
			}
			return ctx
		}).
		Assess("a crash-looping plugin makes the stack Degraded, naming the node", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), drvFrom(ctx, t)
			node := drvNodes[1]
			drvFailPod(ctx, t, c, drvPluginPods(ctx, t, c, drvOpsNS, drvDriver)[node], "CrashLoopBackOff")
			st := drvWaitStack(ctx, t, s.crc, "Degraded CrashLoopBackOff naming "+node, func(st *v1alpha1.DRAStack) bool {
				status, reason, msg := drvCondition(st, v1alpha1.ConditionDegraded)
				ready, readyReason, _ := drvCondition(st, v1alpha1.ConditionDriversReady)
				return status == metav1.ConditionTrue && reason == "CrashLoopBackOff" && strings.Contains(msg, drvDriver+": CrashLoopBackOff on node "+node) &&
					ready == metav1.ConditionFalse && readyReason == "CrashLoopBackOff"
			})
			if d := drvStatus(st, drvDriver); d.Ready || d.NodesReady != 1 {
				t.Errorf("driver with a crashing plugin: ready=%v nodesReady=%d", d.Ready, d.NodesReady)
			}
			drvWaitEvent(ctx, t, c, "CrashLoopBackOff", node)
			// Recover for the next steps.
			if err := c.Client.CoreV1().Pods(drvOpsNS).Delete(ctx, drvPluginPods(ctx, t, c, drvOpsNS, drvDriver)[node].Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			drvWaitStack(ctx, t, s.crc, "the driver Ready again", func(st *v1alpha1.DRAStack) bool {
				d := drvStatus(st, drvDriver)
				return d != nil && d.Ready
			})
			return ctx
		}).
		Assess("a field another manager took over is reported as a conflict, not fought", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), drvFrom(ctx, t)
			setMinReady := func(v int32) {
				t.Helper()
				err := wait.PollUntilContextTimeout(ctx, pollInterval, drvTimeout, true, func(ctx context.Context) (bool, error) {
					ds, err := drvDaemonSet(ctx, c, drvOpsNS, dsName)
					if err != nil {
						return false, err
					}
					ds.Spec.MinReadySeconds = v
					_, err = c.Client.AppsV1().DaemonSets(drvOpsNS).Update(ctx, ds, metav1.UpdateOptions{FieldManager: "e2e-intruder"})
					return err == nil, nil
				})
				if err != nil {
					t.Fatalf("set minReadySeconds as another manager: %v", err)
				}
			}
			setMinReady(3)
			drvWaitStack(ctx, t, s.crc, "Degraded ApplyConflict naming the other manager", func(st *v1alpha1.DRAStack) bool {
				status, reason, msg := drvCondition(st, v1alpha1.ConditionDegraded)
				return status == metav1.ConditionTrue && reason == driver.ReasonApplyConflict && strings.Contains(msg, "e2e-intruder") && strings.Contains(msg, dsName)
			})
			if ds, err := drvDaemonSet(ctx, c, drvOpsNS, dsName); err != nil || ds.Spec.MinReadySeconds != 3 {
				t.Errorf("the operator forced its value over the other manager's: %v", err)
			}
			drvWaitEvent(ctx, t, c, driver.ReasonApplyConflict, "e2e-intruder")
			// Agreeing on the value ends the conflict (the field is shared).
			setMinReady(drvMinReadyS)
			drvWaitStack(ctx, t, s.crc, "the conflict gone", func(st *v1alpha1.DRAStack) bool {
				d := drvStatus(st, drvDriver)
				return d != nil && d.Ready
			})
			return ctx
		}).
		Assess("removing the driver stops allocations, waits for the claim that uses it, then removes everything", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), drvFrom(ctx, t)
			if _, err := c.Client.ResourceV1().ResourceClaimTemplates(drvNamespace).Create(ctx, drvClaimTemplate(drvNamespace, drvTemplate, drvClassName), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
			pod := claimPod(drvNamespace, drvHoldingPod, drvTemplate)
			if _, err := c.Client.CoreV1().Pods(drvNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			pod = waitPodRunning(ctx, t, c, drvNamespace, drvHoldingPod)
			results := allocatedDevices(ctx, t, c.Client, pod)
			if len(results) != 1 || results[0].Driver != drvDriver {
				t.Fatalf("pod allocated %+v, want one device of %s", results, drvDriver)
			}
			claim := drvNamespace + "/" + *pod.Status.ResourceClaimStatuses[0].ResourceClaimName

			begin := time.Now()
			drvSetDrivers(ctx, t, s.crc, nil)
			st := drvWaitStack(ctx, t, s.crc, "the removal Draining, blocked by "+claim, func(st *v1alpha1.DRAStack) bool {
				d := drvStatus(st, drvDriver)
				return d != nil && d.Removal != nil && d.Removal.Phase == driver.PhaseDraining && slices.Contains(d.Removal.BlockingClaims, claim)
			})
			d := drvStatus(st, drvDriver)
			t.Logf("removal: %s", d.Message)
			if d.Removal.Policy != v1alpha1.RemovalPolicyDrain || d.Removal.BlockingClaimCount != 1 || d.Removal.Since.IsZero() || !strings.Contains(d.Message, claim) {
				t.Errorf("removal status %+v: %s", d.Removal, d.Message)
			}
			rules := drvTaintRules(ctx, t, c)
			if len(rules) != 1 {
				t.Fatalf("%d DeviceTaintRules of the driver, want 1 stopping its allocations", len(rules))
			}

			// New allocations are stopped: a second pod finds no usable device
			// although both nodes have free ones.
			second := claimPod(drvNamespace, "wants-a-gpu", drvTemplate)
			if _, err := c.Client.CoreV1().Pods(drvNamespace).Create(ctx, second, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Second)
			if p, err := c.Client.CoreV1().Pods(drvNamespace).Get(ctx, second.Name, metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
				t.Errorf("a pod got a device of a driver being removed (node %q, %v)", p.Spec.NodeName, err)
			}
			drvDeletePods(ctx, t, c, second.Name)

			// Nothing was deleted early.
			if _, err := drvDaemonSet(ctx, c, drvOpsNS, dsName); err != nil {
				t.Errorf("the plugin DaemonSet is gone while a claim still uses the driver: %v", err)
			}
			if n := len(drvSlices(ctx, t, c, drvDriver)); n != 2 {
				t.Errorf("%d slices left while draining, want both", n)
			}
			st = drvWaitStack(ctx, t, s.crc, "still Draining", func(st *v1alpha1.DRAStack) bool {
				d := drvStatus(st, drvDriver)
				return d != nil && d.Removal != nil && d.Removal.Phase == driver.PhaseDraining
			})
			if !slices.Contains(st.Finalizers, driverctrl.Finalizer) {
				t.Error("the finalizer went before the driver")
			}
			t.Logf("timing: removal started -> still draining after %s", since(begin))

			begin = time.Now()
			drvDeletePods(ctx, t, c, drvHoldingPod)
			drvWaitStack(ctx, t, s.crc, "the driver gone from status and the finalizer released", func(st *v1alpha1.DRAStack) bool {
				return drvStatus(st, drvDriver) == nil && !slices.Contains(st.Finalizers, driverctrl.Finalizer)
			})
			t.Logf("timing: claim released -> driver removed in %s", since(begin))
			drvCheckNothingLeft(ctx, t, c, s.crc)
			return ctx
		}).
		Assess("deleting the DRAStack removes its drivers (Force does not wait) and leaves nothing behind", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), drvFrom(ctx, t)
			drvSetDrivers(ctx, t, s.crc, drvSpec(func(d *v1alpha1.DriverSpec) { d.RemovalPolicy = v1alpha1.RemovalPolicyForce }))
			drvWaitStack(ctx, t, s.crc, "the driver running again", func(st *v1alpha1.DRAStack) bool {
				d := drvStatus(st, drvDriver)
				return d != nil && d.NodesReady == 2
			})
			drvPublish(ctx, t, c, drvOpsNS, drvDriver, drvNodes...)
			drvWaitStack(ctx, t, s.crc, "the driver Ready", func(st *v1alpha1.DRAStack) bool {
				d := drvStatus(st, drvDriver)
				return d != nil && d.Ready
			})
			pod := claimPod(drvNamespace, drvHoldingPod, drvTemplate)
			if _, err := c.Client.CoreV1().Pods(drvNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitPodRunning(ctx, t, c, drvNamespace, drvHoldingPod)

			begin := time.Now()
			if err := s.crc.Delete(ctx, &v1alpha1.DRAStack{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DRAStackName}}); err != nil {
				t.Fatal(err)
			}
			drvWaitGone(ctx, t, "DRAStack default", func(ctx context.Context) error {
				return s.crc.Get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, &v1alpha1.DRAStack{})
			})
			t.Logf("timing: DRAStack deleted -> drivers removed and DRAStack gone in %s", since(begin))
			drvCheckNothingLeft(ctx, t, c, s.crc)
			drvDeletePods(ctx, t, c, drvHoldingPod)
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			if s, _ := ctx.Value(drvKey{}).(*drvState); s != nil {
				// After a failure, let the operator remove what is left.
				var st v1alpha1.DRAStack
				if err := s.crc.Get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, &st); err == nil {
					drvSetDrivers(ctx, t, s.crc, drvSpec(func(d *v1alpha1.DriverSpec) { d.RemovalPolicy = v1alpha1.RemovalPolicyForce }))
					_ = s.crc.Delete(ctx, &st)
					_ = wait.PollUntilContextTimeout(ctx, pollInterval, drvTimeout, true, func(ctx context.Context) (bool, error) {
						err := s.crc.Get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, &v1alpha1.DRAStack{})
						return apierrors.IsNotFound(err), nil
					})
				}
				s.stopOperator()
			}
			_ = c.Client.CoreV1().Namespaces().Delete(ctx, drvNamespace, metav1.DeleteOptions{})
			for _, n := range drvNodes {
				if err := c.DeleteNode(ctx, n); err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("%v", err)
				}
			}
			return ctx
		}).
		Feature()
	testenv.Test(t, feature)
}

// checkInstalled checks the objects of the example driver: the privileged
// namespace, the plugin's identity, permissions and admission policy, its
// DeviceClass and DaemonSet.
func drvCheckInstalled(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	ns, err := c.Client.CoreV1().Namespaces().Get(ctx, drvOpsNS, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("driver namespace labels %v: plugins need the privileged level", ns.Labels)
	}
	if _, err := c.Client.RbacV1().ClusterRoles().Get(ctx, driver.ObjectName(drvDriver, "kubelet-plugin"), metav1.GetOptions{}); err != nil {
		t.Errorf("plugin ClusterRole: %v", err)
	}
	vap, err := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, driver.ObjectName(drvDriver, "resourceslices-own-node"), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("admission policy: %v", err)
	}
	if vap.Status.TypeChecking != nil {
		for _, w := range vap.Status.TypeChecking.ExpressionWarnings {
			t.Errorf("admission policy type warning at %s: %s", w.FieldRef, w.Warning)
		}
	}
	dc, err := c.Client.ResourceV1().DeviceClasses().Get(ctx, drvClassName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("DeviceClass: %v", err)
	}
	if dc.Labels[driver.LabelDriver] != drvDriver {
		t.Errorf("DeviceClass labels %v", dc.Labels)
	}
	ds, err := drvDaemonSet(ctx, c, drvOpsNS, dsName)
	if err != nil {
		t.Fatal(err)
	}
	if ds.Spec.MinReadySeconds != drvMinReadyS {
		t.Errorf("DaemonSet minReadySeconds %d, want %d from the user's patch", ds.Spec.MinReadySeconds, drvMinReadyS)
	}
	if ds.Spec.Template.Spec.NodeSelector[drvNodeLabel] != "true" {
		t.Errorf("plugin node selector %v", ds.Spec.Template.Spec.NodeSelector)
	}
	for _, mf := range ds.ManagedFields {
		if mf.Operation == metav1.ManagedFieldsOperationApply && mf.Manager != driver.FieldManager {
			t.Errorf("DaemonSet applied by %q, want %q", mf.Manager, driver.FieldManager)
		}
	}
}

// checkNothingLeft checks that no object labelled for the stack, no slice
// and no taint of the driver, and no driver namespace remain.
func drvCheckNothingLeft(ctx context.Context, t *testing.T, c *cluster.Cluster, crc client.Client) {
	t.Helper()
	sel := client.MatchingLabels{driver.LabelStack: v1alpha1.DRAStackName}
	for _, gvk := range driver.ManagedKinds {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		err := wait.PollUntilContextTimeout(ctx, pollInterval, drvTimeout, true, func(ctx context.Context) (bool, error) {
			if err := crc.List(ctx, list, sel); err != nil {
				return false, err
			}
			for _, item := range list.Items {
				// A namespace being deleted has only its contents left to go.
				if gvk.Kind == "Namespace" && item.DeletionTimestamp != nil {
					continue
				}
				return false, nil
			}
			return true, nil
		})
		if err != nil {
			names := []string{}
			for _, item := range list.Items {
				names = append(names, item.Namespace+"/"+item.Name)
			}
			t.Errorf("%s left behind: %v (%v)", gvk.Kind, names, err)
		}
	}
	if n := len(drvSlices(ctx, t, c, drvDriver)); n != 0 {
		t.Errorf("%d ResourceSlices of %s left behind", n, drvDriver)
	}
	if n := len(drvTaintRules(ctx, t, c)); n != 0 {
		t.Errorf("%d DeviceTaintRules left behind", n)
	}
}

// taintRules lists the DeviceTaintRules of the driver (v1beta2 in 1.36).
func drvTaintRules(ctx context.Context, t *testing.T, c *cluster.Cluster) []string {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1beta2", Resource: "devicetaintrules"}
	list, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{LabelSelector: driver.LabelDriver + "=" + drvDriver})
	if err != nil {
		t.Fatalf("list DeviceTaintRules: %v", err)
	}
	var out []string
	for _, u := range list.Items {
		out = append(out, u.GetName())
	}
	return out
}

// waitDriverEvent waits for an Event on the DRAStack with the reason that
// mentions text.
func drvWaitEvent(ctx context.Context, t *testing.T, c *cluster.Cluster, reason, mention string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, pollInterval, drvTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := c.Client.EventsV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // retried
		}
		for _, e := range list.Items {
			if e.Regarding.Kind == "DRAStack" && e.Reason == reason && strings.Contains(e.Note, mention) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("no %s Event on the DRAStack mentioning %q: %v", reason, mention, err)
	}
}
