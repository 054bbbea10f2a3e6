//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	poolctrl "github.com/drastack/drastack/internal/controller/pool"
	"github.com/drastack/drastack/internal/operator"
	poolpkg "github.com/drastack/drastack/internal/pool"
	"github.com/drastack/drastack/test/cluster"
)

// The DevicePool suite publishes its own slices (under drivers of its own,
// so other suites' pools do not matter) and runs the operator in-process.
const (
	poolsNamespace   = "pools"
	poolsGPUDriver   = "gpu.pools.e2e.drastack.io"
	poolsMIGDriver   = "mig.pools.e2e.drastack.io"
	poolsScaleDriver = "scale.pools.e2e.drastack.io"
	poolsClass       = "mig.pools.e2e.drastack.io"
	poolsNode0       = "kwok-node-0"
	poolsNode1       = "kwok-node-1"
	// poolsGrace is the suite's spec.pools.incompleteGracePeriod: short,
	// so that the grace period can be waited out, long enough that a busy
	// machine still sees a pool inside it.
	poolsGrace   = 8 * time.Second
	poolsTimeout = 2 * time.Minute
	// poolsScale is how many pools the scale step publishes at once.
	poolsScale = 300
)

type poolsKey struct{}

type poolsState struct {
	crc          client.Client
	stopOperator func()
	createdStack bool
	prevPools    v1alpha1.PoolsSpec
}

func poolsFrom(ctx context.Context, t *testing.T) *poolsState {
	t.Helper()
	s, ok := ctx.Value(poolsKey{}).(*poolsState)
	if !ok {
		t.Fatal("DevicePool suite state missing: Setup failed")
	}
	return s
}

// TestPools runs the DevicePool controller against the real API server,
// kube-scheduler and kwok nodes.
func TestPools(t *testing.T) {
	feature := features.New("DevicePool validation").
		Setup(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			if err := c.InstallCRDs(CRDDir); err != nil {
				t.Fatal(err)
			}
			createNamespace(ctx, t, c.Client, poolsNamespace)
			for _, n := range []string{poolsNode0, poolsNode1} {
				if _, err := c.Client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{}); err != nil {
					t.Fatalf("suite node %s: %v", n, err)
				}
			}
			s := &poolsState{}
			var err error
			if s.crc, err = client.New(c.Config, client.Options{Scheme: operator.Scheme()}); err != nil {
				t.Fatal(err)
			}
			s.createdStack, s.prevPools = setPoolsSpec(ctx, t, s.crc, v1alpha1.PoolsSpec{
				IncompleteGracePeriod: &metav1.Duration{Duration: poolsGrace},
				ResyncPeriod:          &metav1.Duration{Duration: time.Minute},
				MaxProblems:           20,
			})
			s.stopOperator = runOperator(ctx, t, c, poolsNamespace)
			return context.WithValue(ctx, poolsKey{}, s)
		}).
		Assess("healthy pools are Healthy, with their devices and counters", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), poolsFrom(ctx, t)
			begin := time.Now()
			createSlices(ctx, t, c, gpuPoolSlice(poolsGPUDriver, poolsNode0, poolsNode0, 1, 1, "s0", 4))
			createSlices(ctx, t, c, migPoolSlices(poolsNode0, poolsNode0, "memory")...)
			gpu := waitDevicePool(ctx, t, s.crc, poolpkg.ID{Driver: poolsGPUDriver, Pool: poolsNode0}, "Healthy with 4 free GPUs", func(st *v1alpha1.DevicePoolStatus) bool {
				return st.Health == v1alpha1.PoolHealthy && st.Devices.Total == 4 && st.Devices.Free == 4 && st.Devices.Available == 4 && st.Devices.Allocated == 0
			})
			mig := waitDevicePool(ctx, t, s.crc, poolpkg.ID{Driver: poolsMIGDriver, Pool: poolsNode0}, "Healthy with 5 partitions", func(st *v1alpha1.DevicePoolStatus) bool {
				return st.Health == v1alpha1.PoolHealthy && st.Devices.Total == 5
			})
			t.Logf("timing: slices created -> both DevicePools Healthy in %s", since(begin))
			if gpu.Status.Node != poolsNode0 || gpu.Status.Slices != (v1alpha1.SliceCounts{Current: 1, Expected: 1}) {
				t.Errorf("GPU pool status: node %q, slices %+v", gpu.Status.Node, gpu.Status.Slices)
			}
			if got := gpu.Labels[poolctrl.LabelDriver]; got != poolsGPUDriver {
				t.Errorf("driver label = %q", got)
			}
			for _, typ := range []string{poolctrl.ConditionValid, poolctrl.ConditionComplete, poolctrl.ConditionConsistent, poolctrl.ConditionNodePresent} {
				if !meta.IsStatusConditionTrue(gpu.Status.Conditions, typ) {
					t.Errorf("GPU pool condition %s is not True: %+v", typ, gpu.Status.Conditions)
				}
			}
			if got := counterOf(mig, "gpu-0", "memory"); got == nil || got.Capacity.String() != "40Gi" || !got.Consumed.IsZero() {
				t.Errorf("MIG pool counter gpu-0/memory = %+v, want 40Gi with nothing consumed", got)
			}
			out, err := c.Kubectl(ctx, "get", "pool", "-l", poolctrl.LabelDriver+"="+poolsMIGDriver)
			if err != nil {
				t.Fatalf("kubectl get pool: %v\n%s", err, out)
			}
			t.Logf("kubectl get pool:\n%s", out)
			for _, col := range []string{"DRIVER", "POOL", "NODE", "DEVICES", "ALLOCATED", "HEALTH", "REASON", poolsMIGDriver, "Healthy"} {
				if !strings.Contains(string(out), col) {
					t.Errorf("kubectl get pool lacks %q", col)
				}
			}
			return ctx
		}).
		Assess("a claim allocated by kube-scheduler shows up as an allocated device and counter consumption", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), poolsFrom(ctx, t)
			if _, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, deviceClass(poolsClass, poolsMIGDriver, ""), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
			tmpl := &resourceapi.ResourceClaimTemplate{
				ObjectMeta: metav1.ObjectMeta{Namespace: poolsNamespace, Name: "quarter"},
				Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
					Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
						DeviceClassName: poolsClass,
						Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
							Expression: fmt.Sprintf("device.attributes[%q].profile == 'quarter'", poolsMIGDriver),
						}}},
					}}},
				}}},
			}
			if _, err := c.Client.ResourceV1().ResourceClaimTemplates(poolsNamespace).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			begin := time.Now()
			if _, err := c.Client.CoreV1().Pods(poolsNamespace).Create(ctx, claimPod(poolsNamespace, "quarter", "quarter"), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			pod := waitPodRunning(ctx, t, c, poolsNamespace, "quarter")
			results := allocatedDevices(ctx, t, c.Client, pod)
			if len(results) != 1 || results[0].Driver != poolsMIGDriver || results[0].Pool != poolsNode0 {
				t.Fatalf("allocation = %+v, want one partition of the MIG pool", results)
			}
			mig := waitDevicePool(ctx, t, s.crc, poolpkg.ID{Driver: poolsMIGDriver, Pool: poolsNode0}, "one allocated partition consuming 10Gi", func(st *v1alpha1.DevicePoolStatus) bool {
				m := counterOfStatus(st, "gpu-0", "memory")
				return st.Devices.Allocated == 1 && m != nil && m.Consumed.Cmp(resource.MustParse("10Gi")) == 0
			})
			t.Logf("timing: pod created -> scheduled, running and its partition reported allocated in %s", since(begin))
			// 40Gi minus 10Gi leaves room for the other three quarters but
			// not for the whole GPU, which consumes 40Gi.
			if mig.Status.Health != v1alpha1.PoolHealthy || mig.Status.Devices.Free != 3 {
				t.Errorf("MIG pool after the allocation: %s, devices %+v; want Healthy with 3 free", mig.Status.Health, mig.Status.Devices)
			}
			if got := counterOf(mig, "gpu-0", "memory-slices"); got == nil || got.Consumed.Cmp(resource.MustParse("2")) != 0 {
				t.Errorf("memory-slices consumed = %+v, want 2", got)
			}
			return ctx
		}).
		Assess("a device consuming a missing counter makes its pool Invalid with MissingCounter", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), poolsFrom(ctx, t)
			id := poolpkg.ID{Driver: poolsMIGDriver, Pool: poolsNode1}
			createSlices(ctx, t, c, migPoolSlices(poolsNode1, poolsNode1, "no-such-counter")...)
			dp := waitDevicePool(ctx, t, s.crc, id, "Invalid with MissingCounter", func(st *v1alpha1.DevicePoolStatus) bool {
				return st.Health == v1alpha1.PoolInvalid && st.Reason == string(poolpkg.ReasonMissingCounter)
			})
			if len(dp.Status.Problems) == 0 || dp.Status.Problems[0].Device == "" || dp.Status.Devices.Free != 0 {
				t.Errorf("problems %+v, devices %+v; want the device named and nothing free", dp.Status.Problems, dp.Status.Devices)
			}
			if c := meta.FindStatusCondition(dp.Status.Conditions, poolctrl.ConditionValid); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "MissingCounter" {
				t.Errorf("Valid condition = %+v", c)
			}
			waitPoolEvent(ctx, t, c, dp.Name, corev1.EventTypeWarning, "MissingCounter")
			stack := waitStack(ctx, t, s.crc, "PoolsHealthy False with PoolsInvalid", func(st *v1alpha1.DRAStack) bool {
				cond := meta.FindStatusCondition(st.Status.Conditions, v1alpha1.ConditionPoolsHealthy)
				return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == poolctrl.ReasonPoolsInvalid &&
					st.Status.Pools != nil && st.Status.Pools.Invalid >= 1 && st.Status.Summary != nil && st.Status.Summary.Pools != ""
			})
			t.Logf("DRAStack: pools %+v, summary %q, PoolsHealthy: %s", *stack.Status.Pools, stack.Status.Summary.Pools,
				meta.FindStatusCondition(stack.Status.Conditions, v1alpha1.ConditionPoolsHealthy).Message)
			if v := gaugeValue(t, "drastack_pool_health", map[string]string{"driver": poolsMIGDriver, "pool": poolsNode1, "health": "Invalid", "reason": "MissingCounter"}); v != 1 {
				t.Errorf("drastack_pool_health for the invalid pool = %v, want 1", v)
			}
			if v := gaugeValue(t, "drastack_pool_problems", map[string]string{"driver": poolsMIGDriver, "pool": poolsNode1, "reason": "MissingCounter", "severity": "Error"}); v < 1 {
				t.Errorf("drastack_pool_problems{reason=MissingCounter} = %v, want at least 1", v)
			}
			return ctx
		}).
		Assess("a half-published generation is Incomplete, IncompletePool only after the grace period, then recovers", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), poolsFrom(ctx, t)
			id := poolpkg.ID{Driver: poolsGPUDriver, Pool: "rolling"}
			createSlices(ctx, t, c, gpuPoolSlice(poolsGPUDriver, "rolling", poolsNode1, 1, 2, "s0", 2))
			first := waitDevicePool(ctx, t, s.crc, id, "Incomplete", func(st *v1alpha1.DevicePoolStatus) bool {
				return st.Health == v1alpha1.PoolIncomplete && st.IncompleteSince != nil
			})
			if first.Status.Slices != (v1alpha1.SliceCounts{Current: 1, Expected: 2}) {
				t.Errorf("slices = %+v, want 1 of 2", first.Status.Slices)
			}
			since := first.Status.IncompleteSince.Time
			overdue := waitDevicePool(ctx, t, s.crc, id, "IncompletePool after the grace period", func(st *v1alpha1.DevicePoolStatus) bool {
				return st.Reason == string(poolpkg.ReasonIncompletePool)
			})
			// Times in status have second precision.
			if seen := time.Now(); seen.Sub(since) < poolsGrace-time.Second {
				t.Errorf("IncompletePool reported %s after the pool became incomplete, before the grace period of %s", seen.Sub(since), poolsGrace)
			}
			if overdue.Status.Health != v1alpha1.PoolIncomplete || len(overdue.Status.Problems) == 0 {
				t.Errorf("overdue pool: %s, problems %+v", overdue.Status.Health, overdue.Status.Problems)
			}
			waitPoolEvent(ctx, t, c, overdue.Name, corev1.EventTypeWarning, "IncompletePool")
			if v := gaugeValue(t, "drastack_pool_problems", map[string]string{"driver": poolsGPUDriver, "pool": "rolling", "reason": "IncompletePool", "severity": "Error"}); v != 1 {
				t.Errorf("drastack_pool_problems{reason=IncompletePool} = %v, want 1 (the metric the alert uses)", v)
			}

			createSlices(ctx, t, c, gpuPoolSlice(poolsGPUDriver, "rolling", poolsNode1, 1, 2, "s1", 2))
			healed := waitDevicePool(ctx, t, s.crc, id, "Healthy once the rest is published", func(st *v1alpha1.DevicePoolStatus) bool {
				return st.Health == v1alpha1.PoolHealthy
			})
			if healed.Status.IncompleteSince != nil || healed.Status.Devices.Total != 4 || healed.Name != overdue.Name {
				t.Errorf("healed pool %s: incompleteSince %v, devices %+v", healed.Name, healed.Status.IncompleteSince, healed.Status.Devices)
			}
			waitPoolEvent(ctx, t, c, healed.Name, corev1.EventTypeNormal, poolctrl.EventReasonHealthy)
			return ctx
		}).
		Assess("removing a driver's slices removes its DevicePool after the grace period", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), poolsFrom(ctx, t)
			id := poolpkg.ID{Driver: poolsGPUDriver, Pool: poolsNode0}
			begin := time.Now()
			deleteDriverSlices(ctx, t, c, poolsGPUDriver)
			gone := waitDevicePool(ctx, t, s.crc, id, "Incomplete without slices", func(st *v1alpha1.DevicePoolStatus) bool {
				return st.Slices.Current == 0 && st.Health == v1alpha1.PoolIncomplete
			})
			if c := meta.FindStatusCondition(gone.Status.Conditions, poolctrl.ConditionComplete); c == nil || c.Reason != poolctrl.ReasonNoSlices {
				t.Errorf("Complete condition of a gone pool = %+v", c)
			}
			waitDevicePoolGone(ctx, t, s.crc, poolctrl.Name(id))
			waitDevicePoolGone(ctx, t, s.crc, poolctrl.Name(poolpkg.ID{Driver: poolsGPUDriver, Pool: "rolling"}))
			took := time.Since(begin)
			t.Logf("timing: slices deleted -> DevicePools deleted in %s (grace period %s)", took.Round(10*time.Millisecond), poolsGrace)
			if took < poolsGrace-time.Second {
				t.Errorf("DevicePool deleted after %s, before the grace period of %s", took, poolsGrace)
			}
			return ctx
		}).
		Assess(fmt.Sprintf("%d pools on the real API server all reach Healthy", poolsScale), func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), poolsFrom(ctx, t)
			begin := time.Now()
			var slices []*resourceapi.ResourceSlice
			for i := range poolsScale {
				slices = append(slices, gpuPoolSlice(poolsScaleDriver, fmt.Sprintf("scale-%03d", i), poolsNode1, 1, 1, "s0", 8))
			}
			createSlices(ctx, t, c, slices...)
			published := time.Since(begin)
			healthy := 0
			err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, poolsTimeout, true, func(ctx context.Context) (bool, error) {
				var list v1alpha1.DevicePoolList
				if err := s.crc.List(ctx, &list, client.MatchingLabels{poolctrl.LabelDriver: poolsScaleDriver}); err != nil {
					return false, nil //nolint:nilerr // retried
				}
				healthy = 0
				for _, dp := range list.Items {
					if dp.Status.Health == v1alpha1.PoolHealthy && dp.Status.Devices.Total == 8 {
						healthy++
					}
				}
				return healthy == poolsScale, nil
			})
			if err != nil {
				t.Fatalf("%d of %d pools Healthy after %s: %v", healthy, poolsScale, poolsTimeout, err)
			}
			t.Logf("timing: %d pools: slices created in %s, all %d DevicePools Healthy %s after the first slice",
				poolsScale, published.Round(10*time.Millisecond), poolsScale, since(begin))
			stack := waitStack(ctx, t, s.crc, "the DRAStack counts the new pools", func(st *v1alpha1.DRAStack) bool {
				return st.Status.Pools != nil && st.Status.Pools.Total >= poolsScale
			})
			t.Logf("DRAStack pools %+v", *stack.Status.Pools)
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), poolsFrom(ctx, t)
			// Stop the operator first, so that it does not report the
			// cleanup pool by pool.
			s.stopOperator()
			_ = c.Client.CoreV1().Pods(poolsNamespace).Delete(ctx, "quarter", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
			_ = c.Client.ResourceV1().ResourceClaimTemplates(poolsNamespace).Delete(ctx, "quarter", metav1.DeleteOptions{})
			_ = c.Client.ResourceV1().DeviceClasses().Delete(ctx, poolsClass, metav1.DeleteOptions{})
			for _, d := range []string{poolsGPUDriver, poolsMIGDriver, poolsScaleDriver} {
				deleteDriverSlices(ctx, t, c, d)
			}
			// Remove what the operator wrote for this suite.
			for _, d := range []string{poolsGPUDriver, poolsMIGDriver, poolsScaleDriver} {
				if err := s.crc.DeleteAllOf(ctx, &v1alpha1.DevicePool{}, client.MatchingLabels{poolctrl.LabelDriver: d}); err != nil {
					t.Errorf("delete DevicePools of %s: %v", d, err)
				}
			}
			restorePoolsSpec(ctx, t, s.crc, s.createdStack, s.prevPools)
			return ctx
		}).
		Feature()
	testenv.Test(t, feature)
}

// setPoolsSpec sets DRAStack spec.pools, creating the DRAStack when there
// is none; it returns whether it created it and the previous spec.pools.
func setPoolsSpec(ctx context.Context, t *testing.T, crc client.Client, spec v1alpha1.PoolsSpec) (bool, v1alpha1.PoolsSpec) {
	t.Helper()
	created, prev := writeStackSpec(ctx, t, crc, poolsTimeout, func(s *v1alpha1.DRAStackSpec) { s.Pools = spec })
	return created, prev.Pools
}

func restorePoolsSpec(ctx context.Context, t *testing.T, crc client.Client, created bool, prev v1alpha1.PoolsSpec) {
	t.Helper()
	st := &v1alpha1.DRAStack{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DRAStackName}}
	if created {
		if err := crc.Delete(ctx, st); client.IgnoreNotFound(err) != nil {
			t.Errorf("delete DRAStack: %v", err)
		}
		return
	}
	setPoolsSpec(ctx, t, crc, prev)
}

// gpuPoolSlice is one node-local slice of whole GPUs.
func gpuPoolSlice(driver, pool, node string, gen, count int64, name string, devices int) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%s", strings.Split(driver, ".")[0], pool, name)},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   driver,
			Pool:     resourceapi.ResourcePool{Name: pool, Generation: gen, ResourceSliceCount: count},
			NodeName: ptr.To(node),
		},
	}
	for i := range devices {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: fmt.Sprintf("%s-gpu-%d", name, i)})
	}
	return s
}

// migPoolSlices is a MIG-like pool of one GPU: a counter slice (counter
// set gpu-0: memory 40Gi, memory-slices 8) and a device slice with four
// "quarter" partitions (10Gi and 2 memory slices each) and the "whole" GPU
// (all of it). counter is the name the quarters consume memory under:
// "memory" for a valid pool, anything else breaks it (MissingCounter).
func migPoolSlices(pool, node, counter string) []*resourceapi.ResourceSlice {
	q := func(s string) resourceapi.Counter { return resourceapi.Counter{Value: resource.MustParse(s)} }
	counters := gpuPoolSlice(poolsMIGDriver, pool, node, 1, 2, "counters", 0)
	counters.Spec.SharedCounters = []resourceapi.CounterSet{{Name: "gpu-0", Counters: map[string]resourceapi.Counter{
		"memory": q("40Gi"), "memory-slices": q("8"),
	}}}
	devices := gpuPoolSlice(poolsMIGDriver, pool, node, 1, 2, "partitions", 0)
	profile := func(p string) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
		return map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"profile": {StringValue: ptr.To(p)}}
	}
	quarterProfile := "quarter"
	if counter != "memory" {
		quarterProfile = "broken" // never matched by the suite's claim
	}
	for i := range 4 {
		devices.Spec.Devices = append(devices.Spec.Devices, resourceapi.Device{
			Name:       fmt.Sprintf("quarter-%d", i),
			Attributes: profile(quarterProfile),
			ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-0", Counters: map[string]resourceapi.Counter{
				counter: q("10Gi"), "memory-slices": q("2"),
			}}},
		})
	}
	devices.Spec.Devices = append(devices.Spec.Devices, resourceapi.Device{
		Name:       "whole",
		Attributes: profile("whole"),
		ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-0", Counters: map[string]resourceapi.Counter{
			"memory": q("40Gi"), "memory-slices": q("8"),
		}}},
	})
	return []*resourceapi.ResourceSlice{counters, devices}
}

func createSlices(ctx context.Context, t *testing.T, c *cluster.Cluster, slices ...*resourceapi.ResourceSlice) {
	t.Helper()
	for _, s := range slices {
		if _, err := c.Client.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create slice %s: %v", s.Name, err)
		}
	}
}

func deleteDriverSlices(ctx context.Context, t *testing.T, c *cluster.Cluster, driver string) {
	t.Helper()
	err := c.Client.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{FieldSelector: resourceapi.ResourceSliceSelectorDriver + "=" + driver})
	if err != nil {
		t.Errorf("delete slices of %s: %v", driver, err)
	}
}

// waitDevicePool polls the DevicePool of a pool until ok holds.
func waitDevicePool(ctx context.Context, t *testing.T, crc client.Client, id poolpkg.ID, what string, ok func(*v1alpha1.DevicePoolStatus) bool) *v1alpha1.DevicePool {
	t.Helper()
	var last *v1alpha1.DevicePool
	err := wait.PollUntilContextTimeout(ctx, pollInterval, poolsTimeout, true, func(ctx context.Context) (bool, error) {
		var dp v1alpha1.DevicePool
		if err := crc.Get(ctx, types.NamespacedName{Name: poolctrl.Name(id)}, &dp); err != nil {
			return false, nil //nolint:nilerr // not there yet
		}
		last = &dp
		return ok(&dp.Status), nil
	})
	if err != nil {
		if last == nil {
			t.Fatalf("DevicePool %s of %s never appeared (%s): %v", poolctrl.Name(id), id, what, err)
		}
		t.Fatalf("DevicePool %s of %s: waiting for %s: %v\nlast status: %+v", last.Name, id, what, err, last.Status)
	}
	return last
}

func waitDevicePoolGone(ctx context.Context, t *testing.T, crc client.Client, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, pollInterval, poolsTimeout, true, func(ctx context.Context) (bool, error) {
		err := crc.Get(ctx, types.NamespacedName{Name: name}, &v1alpha1.DevicePool{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("DevicePool %s still exists: %v", name, err)
	}
}

func waitStack(ctx context.Context, t *testing.T, crc client.Client, what string, ok func(*v1alpha1.DRAStack) bool) *v1alpha1.DRAStack {
	t.Helper()
	var last v1alpha1.DRAStack
	err := wait.PollUntilContextTimeout(ctx, pollInterval, poolsTimeout, true, func(ctx context.Context) (bool, error) {
		if err := crc.Get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, &last); err != nil {
			return false, nil //nolint:nilerr // retried
		}
		return ok(&last), nil
	})
	if err != nil {
		t.Fatalf("DRAStack: waiting for %s: %v\nlast status: %+v", what, err, last.Status)
	}
	return &last
}

// waitPoolEvent waits for an Event on a DevicePool. Events about
// cluster-scoped objects are kept in the default namespace.
func waitPoolEvent(ctx context.Context, t *testing.T, c *cluster.Cluster, dp, eventType, reason string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, pollInterval, poolsTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := c.Client.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // retried
		}
		for _, e := range list.Items {
			if e.Regarding.Kind == "DevicePool" && e.Regarding.Name == dp && e.Type == eventType && e.Reason == reason {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("no %s Event %s on DevicePool %s: %v", eventType, reason, dp, err)
	}
}

func counterOf(dp *v1alpha1.DevicePool, set, counter string) *v1alpha1.CounterStatus {
	return counterOfStatus(&dp.Status, set, counter)
}

func counterOfStatus(st *v1alpha1.DevicePoolStatus, set, counter string) *v1alpha1.CounterStatus {
	for i := range st.CounterSets {
		if st.CounterSets[i].Name != set {
			continue
		}
		for j := range st.CounterSets[i].Counters {
			if c := &st.CounterSets[i].Counters[j]; c.Name == counter {
				return c
			}
		}
	}
	return nil
}

// gaugeValue reads a gauge from controller-runtime's registry, which the
// in-process operator reports to; -1 when there is no such series.
func gaugeValue(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
					continue series
				}
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}
