//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/operator"
	"github.com/drastack/drastack/test/cluster"
)

const stackTimeout = 2 * time.Minute

type stackKey struct{}

type stackState struct {
	crc  client.Client
	stop func()
}

// TestStack is the foundation's end-to-end story: the operator probes the
// real API server and reports what it supports, keeps Ready and
// observedGeneration, and turns bad input into a rejection at admission or
// a condition that names the field.
func TestStack(t *testing.T) {
	feature := features.New("DRAStack status").
		Setup(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			if err := c.InstallCRDs(CRDDir); err != nil {
				t.Fatal(err)
			}
			crc, err := client.New(c.Config, client.Options{Scheme: operator.Scheme()})
			if err != nil {
				t.Fatal(err)
			}
			// Another suite may have left a DRAStack behind; start clean.
			deleteStack(ctx, t, crc)
			st := &v1alpha1.DRAStack{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DRAStackName}}
			if err := crc.Create(ctx, st); err != nil {
				t.Fatalf("create DRAStack: %v", err)
			}
			return context.WithValue(ctx, stackKey{}, &stackState{crc: crc, stop: runOperator(ctx, t, c, "default")})
		}).
		Assess("admission defaults every field", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := ctx.Value(stackKey{}).(*stackState)
			var st v1alpha1.DRAStack
			if err := s.crc.Get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, &st); err != nil {
				t.Fatal(err)
			}
			if st.Spec.Namespace == "" || st.Spec.Claims.Engine != v1alpha1.EngineNative ||
				st.Spec.Claims.GatePods == nil || !*st.Spec.Claims.GatePods ||
				st.Spec.Pools.ResyncPeriod == nil || st.Spec.Pools.ResyncPeriod.Duration != 5*time.Minute ||
				st.Spec.Pools.IncompleteGracePeriod == nil || st.Spec.Pools.IncompleteGracePeriod.Duration != 2*time.Minute ||
				st.Spec.Pools.MaxProblems != 20 {
				t.Fatalf("defaults not applied: %+v", st.Spec)
			}
			return ctx
		}).
		Assess("status.cluster reports v1 served and the DRA features kept", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := ctx.Value(stackKey{}).(*stackState)
			st := waitStack(ctx, t, s.crc, "Ready=True with a cluster probe", func(st *v1alpha1.DRAStack) bool {
				return st.Status.Cluster != nil && meta.IsStatusConditionTrue(st.Status.Conditions, v1alpha1.ConditionReady)
			})
			cs := st.Status.Cluster
			if cs.KubernetesVersion != cluster.KubernetesVersion {
				t.Errorf("kubernetesVersion = %q, want %s", cs.KubernetesVersion, cluster.KubernetesVersion)
			}
			if len(cs.ResourceAPIVersions) == 0 || cs.ResourceAPIVersions[0] != "v1" || !slices.Contains(cs.ResourceAPIVersions, "v1beta2") {
				t.Errorf("resourceAPIVersions = %v, want v1 first and v1beta2 served", cs.ResourceAPIVersions)
			}
			f := cs.Features
			// Every DRA gate of the release is on in the local cluster, so
			// every feature the probe knows must be found.
			if !f.PartitionableDevices || !f.ListTypeAttributes || !f.DeviceTaints || !f.PrioritizedList || !f.DeviceTaintRules ||
				!f.ConsumableCapacity || !f.BindingConditions || !f.CompatibilityGroups || !f.DerivedAttributes || !f.OptionalNodeOperations ||
				!f.PartitionType || !f.ResourcePoolStatusRequests || !f.AdminAccess || !f.ExtendedResources || !f.GranularStatusAuthorization ||
				f.DeviceTaintRulesVersion != "v1" {
				t.Errorf("features = %+v, want all on with DeviceTaintRule in v1 (the local cluster enables every DRA gate of %s)", f, cluster.KubernetesVersion)
			}
			if st.Status.ObservedGeneration != st.Generation {
				t.Errorf("observedGeneration = %d, generation %d", st.Status.ObservedGeneration, st.Generation)
			}
			for _, ct := range []string{v1alpha1.ConditionSpecValid, v1alpha1.ConditionClusterCompatible} {
				if !meta.IsStatusConditionTrue(st.Status.Conditions, ct) {
					t.Errorf("%s not True: %+v", ct, meta.FindStatusCondition(st.Status.Conditions, ct))
				}
			}
			// The dry-run probes must not have left anything behind.
			c := mustCluster(ctx, t)
			slicesLeft, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, sl := range slicesLeft.Items {
				if strings.HasPrefix(sl.Name, "drastack-probe-") {
					t.Errorf("probe slice %s was persisted", sl.Name)
				}
			}
			return ctx
		}).
		Assess("admission rejects a second DRAStack and invalid values", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := ctx.Value(stackKey{}).(*stackState)
			tests := []struct {
				name    string
				obj     *v1alpha1.DRAStack
				wantMsg string
			}{
				{"second stack", &v1alpha1.DRAStack{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, "must be named 'default'"},
				{"unknown engine", &v1alpha1.DRAStack{ObjectMeta: metav1.ObjectMeta{Name: "default"},
					Spec: v1alpha1.DRAStackSpec{Claims: v1alpha1.ClaimsSpec{Engine: "magic"}}}, "spec.claims.engine"},
				{"custom driver without image", &v1alpha1.DRAStack{ObjectMeta: metav1.ObjectMeta{Name: "default"},
					Spec: v1alpha1.DRAStackSpec{Drivers: []v1alpha1.DriverSpec{{Name: "x.example.com", Profile: v1alpha1.DriverProfileCustom}}}}, "image is required when profile is custom"},
				{"resync too short", &v1alpha1.DRAStack{ObjectMeta: metav1.ObjectMeta{Name: "default"},
					Spec: v1alpha1.DRAStackSpec{Pools: v1alpha1.PoolsSpec{ResyncPeriod: &metav1.Duration{Duration: time.Second}}}}, "resyncPeriod must be at least 10s"},
			}
			for _, tc := range tests {
				err := s.crc.Create(ctx, tc.obj, client.DryRunAll)
				if err == nil || !strings.Contains(err.Error(), tc.wantMsg) {
					t.Errorf("%s: err = %v, want a rejection mentioning %q", tc.name, err, tc.wantMsg)
				}
			}
			return ctx
		}).
		Assess("a value admission cannot check becomes SpecValid=False naming the field", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := ctx.Value(stackKey{}).(*stackState)
			st := updateStack(ctx, t, s.crc, func(st *v1alpha1.DRAStack) {
				st.Spec.Pools.IncompleteGracePeriod = &metav1.Duration{Duration: 48 * time.Hour}
			})
			got := waitStack(ctx, t, s.crc, "SpecValid=False", func(got *v1alpha1.DRAStack) bool {
				return got.Status.ObservedGeneration == st.Generation && meta.IsStatusConditionFalse(got.Status.Conditions, v1alpha1.ConditionSpecValid)
			})
			cond := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionSpecValid)
			if cond.Reason != "InvalidSpec" || !strings.Contains(cond.Message, "spec.pools.incompleteGracePeriod") {
				t.Errorf("SpecValid = %s %q, want InvalidSpec naming spec.pools.incompleteGracePeriod", cond.Reason, cond.Message)
			}
			ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
			if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != "InvalidSpec" {
				t.Errorf("Ready = %+v, want False/InvalidSpec", ready)
			}
			waitStackEvent(ctx, t, "InvalidSpec")

			// Fixing the value makes it Ready again.
			updateStack(ctx, t, s.crc, func(st *v1alpha1.DRAStack) {
				st.Spec.Pools.IncompleteGracePeriod = &metav1.Duration{Duration: time.Minute}
			})
			waitStack(ctx, t, s.crc, "Ready=True after the fix", func(st *v1alpha1.DRAStack) bool {
				return meta.IsStatusConditionTrue(st.Status.Conditions, v1alpha1.ConditionReady) &&
					meta.IsStatusConditionTrue(st.Status.Conditions, v1alpha1.ConditionSpecValid)
			})
			return ctx
		}).
		Assess("kubectl get and explain show the documented columns and fields", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			out, err := c.Kubectl(ctx, "get", "drastack")
			if err != nil {
				t.Fatal(err)
			}
			header := strings.Fields(strings.SplitN(string(out), "\n", 2)[0])
			if !slices.Equal(header, []string{"NAME", "READY", "DRIVERS", "POOLS", "AGE"}) {
				t.Errorf("kubectl get drastack header = %v", header)
			}
			out, err = c.Kubectl(ctx, "explain", "drastack.spec", "--recursive")
			if err != nil {
				t.Fatal(err)
			}
			for _, field := range []string{"namespace", "drivers", "multiHost", "claims", "pools", "immediateClasses", "incompleteGracePeriod", "removalPolicy", "partitions"} {
				if !strings.Contains(string(out), field) {
					t.Errorf("kubectl explain drastack.spec --recursive lacks %s", field)
				}
			}
			out, err = c.Kubectl(ctx, "explain", "drastack.spec.pools.incompleteGracePeriod")
			if err != nil || !strings.Contains(string(out), "how long a pool may miss slices") {
				t.Errorf("explain incompleteGracePeriod: %v\n%s", err, out)
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := ctx.Value(stackKey{}).(*stackState)
			s.stop()
			deleteStack(ctx, t, s.crc)
			return ctx
		}).
		Feature()
	testenv.Test(t, feature)
}

// updateStack changes the DRAStack spec, retrying on conflicts with the
// operator's own status writes, and returns the updated object.
func updateStack(ctx context.Context, t *testing.T, crc client.Client, change func(*v1alpha1.DRAStack)) *v1alpha1.DRAStack {
	t.Helper()
	var st v1alpha1.DRAStack
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := crc.Get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, &st); err != nil {
			return err
		}
		change(&st)
		return crc.Update(ctx, &st)
	})
	if err != nil {
		t.Fatalf("update DRAStack: %v", err)
	}
	return &st
}

// waitStackEvent waits for an Event about the DRAStack with the reason.
func waitStackEvent(ctx context.Context, t *testing.T, reason string) {
	t.Helper()
	c := mustCluster(ctx, t)
	err := wait.PollUntilContextTimeout(ctx, pollInterval, stackTimeout, true, func(ctx context.Context) (bool, error) {
		evs, err := c.Client.EventsV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // retried until the timeout
		}
		return slices.ContainsFunc(evs.Items, func(e eventsv1.Event) bool {
			return e.Regarding.Kind == "DRAStack" && e.Reason == reason
		}), nil
	})
	if err != nil {
		t.Fatalf("no DRAStack Event with reason %s: %v", reason, err)
	}
}

// deleteStack deletes the DRAStack and waits until it is gone.
func deleteStack(ctx context.Context, t *testing.T, crc client.Client) {
	t.Helper()
	st := &v1alpha1.DRAStack{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DRAStackName}}
	if err := crc.Delete(ctx, st); client.IgnoreNotFound(err) != nil {
		t.Fatalf("delete DRAStack: %v", err)
	}
	err := wait.PollUntilContextTimeout(ctx, pollInterval, stackTimeout, true, func(ctx context.Context) (bool, error) {
		err := crc.Get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, st)
		return client.IgnoreNotFound(err) == nil && err != nil, nil
	})
	if err != nil {
		t.Fatalf("DRAStack still present: %v", err)
	}
}
