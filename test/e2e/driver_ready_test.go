//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/driver"
	"github.com/drastack/drastack/internal/operator"
	"github.com/drastack/drastack/test/cluster"
)

// The readiness suite checks that Ready tells the truth about a driver: it
// is never True before the kubelet plugin runs on every node and those
// nodes publish ResourceSlices, a rollout stuck on the scheduler is
// reported with the scheduler's words and, past the driver's own stall
// limit, as RolloutStalled with one Event, and a node selector, or a
// profile's own node affinity, that leaves no node is not Ready. The operator runs with its default stall
// limit (5 minutes): the 10 s the test sees come from the spec.
const (
	rdyDriver    = "ready.example.com"
	rdyNodeLabel = "e2e.drastack.io/ready-node"
	rdyProbeNS   = "ready-e2e"
	rdyDeadline  = 10
)

var rdyNodes = []string{"rdy-node-a", "rdy-node-b"}

// rdySpec is the example driver on the suite's two nodes.
func rdySpec(mutate ...func(*v1alpha1.DriverSpec)) []v1alpha1.DriverSpec {
	d := v1alpha1.DriverSpec{
		Name:         rdyDriver,
		Profile:      v1alpha1.DriverProfileExample,
		NodeSelector: map[string]string{rdyNodeLabel: "true"},
		UpdateStrategy: v1alpha1.DriverUpdateStrategy{
			MaxUnavailable:          ptr.To(intstr.FromInt32(1)),
			ProgressDeadlineSeconds: ptr.To(int32(rdyDeadline)),
		},
		RemovalPolicy: v1alpha1.RemovalPolicyForce,
	}
	for _, m := range mutate {
		m(&d)
	}
	return []v1alpha1.DriverSpec{d}
}

// rdySeen is one look at the DRAStack by the watch.
type rdySeen struct {
	at                          time.Time
	ready                       metav1.ConditionStatus
	reason                      string
	nodesReady, nodesPublishing int32
	driverReady, progressing    bool
}

// rdyWatch records every version of the DRAStack the API server sends.
type rdyWatch struct {
	mu   sync.Mutex
	seen []rdySeen
	stop func()
}

func (w *rdyWatch) all() []rdySeen {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]rdySeen(nil), w.seen...)
}

// rdyStartWatch watches the DRAStack continuously: polling could miss a
// Ready that is True for a moment.
func rdyStartWatch(ctx context.Context, t *testing.T, c *cluster.Cluster) *rdyWatch {
	t.Helper()
	wc, err := client.NewWithWatch(c.Config, client.Options{Scheme: operator.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &rdyWatch{stop: cancel}
	go func() {
		for wctx.Err() == nil {
			wi, err := wc.Watch(wctx, &v1alpha1.DRAStackList{})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range wi.ResultChan() {
				st, ok := ev.Object.(*v1alpha1.DRAStack)
				if !ok || st.Name != v1alpha1.DRAStackName {
					continue
				}
				s := rdySeen{at: time.Now()}
				if c := meta.FindStatusCondition(st.Status.Conditions, v1alpha1.ConditionReady); c != nil {
					s.ready, s.reason = c.Status, c.Reason
				}
				s.progressing = meta.IsStatusConditionTrue(st.Status.Conditions, v1alpha1.ConditionProgressing)
				if d := drvStatus(st, rdyDriver); d != nil {
					s.nodesReady, s.nodesPublishing, s.driverReady = d.NodesReady, d.NodesPublishing, d.Ready
				}
				w.mu.Lock()
				w.seen = append(w.seen, s)
				w.mu.Unlock()
			}
			wi.Stop()
		}
	}()
	return w
}

// rdyEventCount counts the Events on the DRAStack with the reason whose
// note starts with prefix, with the repetitions an event series folds in.
// Only Events about the DRAStack of this test count (by UID): the suites
// before it left Events about theirs, of the same name.
func rdyEventCount(ctx context.Context, t *testing.T, c *cluster.Cluster, crc client.Client, reason, prefix string) (int, []string) {
	t.Helper()
	var st v1alpha1.DRAStack
	if err := crc.Get(ctx, client.ObjectKey{Name: v1alpha1.DRAStackName}, &st); err != nil {
		t.Fatalf("read the DRAStack: %v", err)
	}
	list, err := c.Client.EventsV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list Events: %v", err)
	}
	n := 0
	var notes []string
	for _, e := range list.Items {
		if e.Regarding.Kind != "DRAStack" || e.Regarding.UID != st.UID || e.Reason != reason || !strings.HasPrefix(e.Note, prefix) {
			continue
		}
		n += rdySeriesCount(e)
		notes = append(notes, fmt.Sprintf("%s x%d: %s", e.EventTime.Format(time.RFC3339Nano), rdySeriesCount(e), e.Note))
	}
	return n, notes
}

func rdySeriesCount(e eventsv1.Event) int {
	if e.Series != nil && e.Series.Count > 1 {
		return int(e.Series.Count)
	}
	return 1
}

// TestDriverReadiness runs the driver lifecycle controller on the real
// control plane, under the operator's own RBAC.
func TestDriverReadiness(t *testing.T) {
	var (
		crc   client.Client
		stop  func()
		watch *rdyWatch
	)
	feature := features.New("driver readiness: Ready follows the world").
		Setup(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			var specs []cluster.NodeSpec
			for _, n := range rdyNodes {
				specs = append(specs, cluster.NodeSpec{Name: n, Labels: map[string]string{rdyNodeLabel: "true"}})
			}
			crc = prepareFeature(ctx, t, c, rdyProbeNS, specs...)
			stop = startOperator(ctx, t, c, operator.Options{MetricsAddr: "0", ProbeAddr: "0", ProbeNamespace: rdyProbeNS})
			watch = rdyStartWatch(ctx, t, c)
			return ctx
		}).
		Assess("Ready is never True before the plugin runs on every node and the nodes publish; then it is True once", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			begin := time.Now()
			drvSetDrivers(ctx, t, crc, rdySpec())
			st := drvWaitStack(ctx, t, crc, "the plugin ready on both nodes, waiting for slices, Ready not True", func(st *v1alpha1.DRAStack) bool {
				d := drvStatus(st, rdyDriver)
				return d != nil && d.NodesReady == 2 && d.Reason == driver.ReasonWaitingForSlices
			})
			if meta.IsStatusConditionTrue(st.Status.Conditions, v1alpha1.ConditionReady) {
				t.Errorf("Ready is True while no node publishes:\n%s", drvDescribeStack(st))
			}
			t.Logf("timing: spec written -> plugin ready on 2 nodes in %s", since(begin))
			published := time.Now()
			drvPublish(ctx, t, c, drvOpsNS, rdyDriver, rdyNodes...)
			drvWaitStack(ctx, t, crc, "Ready True", func(st *v1alpha1.DRAStack) bool {
				return meta.IsStatusConditionTrue(st.Status.Conditions, v1alpha1.ConditionReady)
			})
			t.Logf("timing: slices published -> Ready in %s", since(published))
			time.Sleep(2 * time.Second) // a flip back would show now
			seen := watch.all()
			trueAt := -1
			for i, s := range seen {
				if s.ready != metav1.ConditionTrue {
					if trueAt >= 0 {
						t.Errorf("Ready flipped back to %s (%s) after it was True", s.ready, s.reason)
					}
					continue
				}
				if trueAt < 0 {
					trueAt = i
				}
				if s.at.Before(published) || s.nodesReady != 2 || s.nodesPublishing != 2 || !s.driverReady {
					t.Errorf("Ready True at %s with %d nodes ready, %d publishing, driver ready %v (slices published from %s)",
						s.at.Format(time.RFC3339Nano), s.nodesReady, s.nodesPublishing, s.driverReady, published.Format(time.RFC3339Nano))
				}
			}
			if trueAt < 0 {
				t.Fatal("the watch never saw Ready True")
			}
			t.Logf("the watch saw %d versions of the DRAStack, Ready True from the %dth", len(seen), trueAt+1)
			if n, notes := rdyEventCount(ctx, t, c, crc, "StackReady", "Ready is True"); n != 1 {
				t.Errorf("%d Ready-is-True Events for one transition, want 1:\n%s", n, strings.Join(notes, "\n"))
			}
			return ctx
		}).
		Assess("a routine upgrade that keeps every node publishing is Progressing, never un-Ready", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			begin := time.Now()
			env := corev1.EnvVar{Name: "E2E_ROUTINE_UPGRADE", Value: "1"}
			drvSetDrivers(ctx, t, crc, rdySpec(func(d *v1alpha1.DriverSpec) { d.Env = []corev1.EnvVar{env} }))
			err := wait.PollUntilContextTimeout(ctx, pollInterval, drvTimeout, true, func(ctx context.Context) (bool, error) {
				pods := drvPluginPods(ctx, t, c, drvOpsNS, rdyDriver)
				if len(pods) != 2 {
					return false, nil
				}
				for _, p := range pods {
					if p.Status.Phase != corev1.PodRunning || !slices.Contains(p.Spec.Containers[0].Env, env) {
						return false, nil
					}
				}
				return true, nil
			})
			if err != nil {
				t.Fatalf("the new plugin never ran on both nodes: %v", err)
			}
			drvWaitStack(ctx, t, crc, "the upgrade complete: not Progressing, 2 nodes updated", func(st *v1alpha1.DRAStack) bool {
				d := drvStatus(st, rdyDriver)
				prog, _, _ := drvCondition(st, v1alpha1.ConditionProgressing)
				return d != nil && d.Ready && d.NodesUpdated == 2 && prog == metav1.ConditionFalse
			})
			end := time.Now()
			progressing := 0
			for _, s := range watch.all() {
				if s.at.Before(begin) {
					continue
				}
				if s.progressing {
					progressing++
				}
				if s.ready != metav1.ConditionTrue || !s.driverReady {
					t.Errorf("during the upgrade Ready was %s (%s), the driver ready=%v, at %s", s.ready, s.reason, s.driverReady, s.at.Format(time.RFC3339Nano))
				}
			}
			t.Logf("timing: upgrade took %s; the watch saw %d versions with Progressing True", end.Sub(begin).Round(10*time.Millisecond), progressing)
			return ctx
		}).
		Assess("a plugin no node has room for: the scheduler's reason per node, then RolloutStalled after the spec's limit, one Event", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			begin := time.Now()
			drvSetDrivers(ctx, t, crc, rdySpec(func(d *v1alpha1.DriverSpec) {
				d.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")}}
			}))
			st := drvWaitStack(ctx, t, crc, "the rollout waiting on a node, with the scheduler's reason", func(st *v1alpha1.DRAStack) bool {
				d := drvStatus(st, rdyDriver)
				prog, _, _ := drvCondition(st, v1alpha1.ConditionProgressing)
				return d != nil && strings.Contains(d.Message, "Insufficient cpu") && strings.Contains(d.Message, "waiting on node rdy-node-") &&
					prog == metav1.ConditionTrue
			})
			if d := drvStatus(st, rdyDriver); d.NodesUpdated != 0 {
				t.Errorf("nodesUpdated %d with the only new pod pending, want 0", d.NodesUpdated)
			}
			t.Logf("timing: resources changed -> scheduler's reason reported in %s", since(begin))
			st = drvWaitStack(ctx, t, crc, "RolloutStalled: driver reason, Degraded, Progressing still True and saying stalled, not Ready", func(st *v1alpha1.DRAStack) bool {
				d := drvStatus(st, rdyDriver)
				deg, degReason, _ := drvCondition(st, v1alpha1.ConditionDegraded)
				prog, _, progMsg := drvCondition(st, v1alpha1.ConditionProgressing)
				ready, _, _ := drvCondition(st, v1alpha1.ConditionReady)
				return d != nil && d.Reason == driver.ReasonRolloutStalled && !d.Ready &&
					deg == metav1.ConditionTrue && degReason == driver.ReasonRolloutStalled &&
					prog == metav1.ConditionTrue && strings.Contains(progMsg, "stalled") && ready == metav1.ConditionFalse
			})
			stalledAfter := since(begin)
			t.Logf("timing: resources changed -> RolloutStalled in %s (limit %ds): %s", stalledAfter, rdyDeadline, drvStatus(st, rdyDriver).Message)
			if msg := drvStatus(st, rdyDriver).Message; !strings.Contains(msg, fmt.Sprintf("%ds limit", rdyDeadline)) || !strings.Contains(msg, "Insufficient cpu") {
				t.Errorf("stalled message lacks the limit or the scheduler's reason: %s", msg)
			}
			drvWaitEvent(ctx, t, c, driver.ReasonRolloutStalled, rdyDriver)
			// The stall is reconciled again (busy requeue, slice and status
			// changes); it must not be reported again.
			time.Sleep(20 * time.Second)
			if n, notes := rdyEventCount(ctx, t, c, crc, driver.ReasonRolloutStalled, "driver "+rdyDriver); n != 1 {
				t.Errorf("%d RolloutStalled Events, want 1:\n%s", n, strings.Join(notes, "\n"))
			}
			return ctx
		}).
		Assess("undoing the change completes the rollout: Ready again", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			begin := time.Now()
			drvSetDrivers(ctx, t, crc, rdySpec())
			drvWaitStack(ctx, t, crc, "Ready, not Degraded, not Progressing", func(st *v1alpha1.DRAStack) bool {
				d := drvStatus(st, rdyDriver)
				deg, _, _ := drvCondition(st, v1alpha1.ConditionDegraded)
				prog, _, _ := drvCondition(st, v1alpha1.ConditionProgressing)
				return d != nil && d.Ready && d.NodesUpdated == 2 && deg == metav1.ConditionFalse && prog == metav1.ConditionFalse &&
					meta.IsStatusConditionTrue(st.Status.Conditions, v1alpha1.ConditionReady)
			})
			t.Logf("timing: change undone -> Ready in %s", since(begin))
			return ctx
		}).
		Assess("a node selector that matches no node is not Ready, although the nodes still publish", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			begin := time.Now()
			drvSetDrivers(ctx, t, crc, rdySpec(func(d *v1alpha1.DriverSpec) { d.NodeSelector = map[string]string{rdyNodeLabel: "nowhere"} }))
			st := drvWaitStack(ctx, t, crc, "DriversReady False NoMatchingNodes naming the selector, Ready False", func(st *v1alpha1.DRAStack) bool {
				dr, drReason, drMsg := drvCondition(st, v1alpha1.ConditionDriversReady)
				ready, readyReason, _ := drvCondition(st, v1alpha1.ConditionReady)
				return dr == metav1.ConditionFalse && drReason == driver.ReasonNoMatchingNodes &&
					strings.Contains(drMsg, "{"+rdyNodeLabel+"=nowhere}") && strings.Contains(drMsg, "still publish ResourceSlices") &&
					ready == metav1.ConditionFalse && readyReason == driver.ReasonNoMatchingNodes
			})
			_, _, msg := drvCondition(st, v1alpha1.ConditionDriversReady)
			t.Logf("timing: selector changed -> NoMatchingNodes in %s: %s", since(begin), msg)
			return ctx
		}).
		Assess("the nvidia-gpu profile's own node affinity excluding every selected node is named", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			begin := time.Now()
			drvSetDrivers(ctx, t, crc, []v1alpha1.DriverSpec{{
				Name:          driver.NVIDIAGPUDriver,
				Profile:       v1alpha1.DriverProfileNVIDIAGPU,
				NodeSelector:  map[string]string{rdyNodeLabel: "true"},
				RemovalPolicy: v1alpha1.RemovalPolicyForce,
			}})
			st := drvWaitStack(ctx, t, crc, "DriversReady False NoMatchingNodes naming the profile's affinity, Ready False", func(st *v1alpha1.DRAStack) bool {
				d := drvStatus(st, driver.NVIDIAGPUDriver)
				dr, drReason, drMsg := drvCondition(st, v1alpha1.ConditionDriversReady)
				ready, _, _ := drvCondition(st, v1alpha1.ConditionReady)
				return d != nil && d.Reason == driver.ReasonNoMatchingNodes && dr == metav1.ConditionFalse && drReason == driver.ReasonNoMatchingNodes &&
					strings.Contains(drMsg, "none of the 2 nodes the node selector {"+rdyNodeLabel+"=true} picks satisfies the profile's required node affinity") &&
					strings.Contains(drMsg, "feature.node.kubernetes.io/pci-10de.present In (true) or ") &&
					strings.Contains(drMsg, " or nvidia.com/gpu.present In (true)") &&
					ready == metav1.ConditionFalse
			})
			_, _, msg := drvCondition(st, v1alpha1.ConditionDriversReady)
			t.Logf("timing: nvidia-gpu declared -> NoMatchingNodes in %s: %s", since(begin), msg)
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			if watch != nil {
				watch.stop()
			}
			if crc != nil {
				deleteStack(ctx, t, crc)
			}
			if stop != nil {
				stop()
			}
			for _, n := range rdyNodes {
				if err := c.Client.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("delete node %s: %v", n, err)
				}
			}
			_ = wait.PollUntilContextTimeout(ctx, pollInterval, drvTimeout, true, func(ctx context.Context) (bool, error) {
				return len(drvSlices(ctx, t, c, rdyDriver)) == 0 && len(drvSlices(ctx, t, c, driver.NVIDIAGPUDriver)) == 0, nil
			})
			return ctx
		}).
		Feature()
	testenv.Test(t, feature)
}
