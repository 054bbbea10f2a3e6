//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/central"
	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/clusterprobe"
	claimsctrl "github.com/drastack/drastack/internal/controller/claims"
	"github.com/drastack/drastack/internal/operator"
	"github.com/drastack/drastack/internal/pool"
	"github.com/drastack/drastack/test/cluster"
)

// The compatibility smoke: the operator, under its own RBAC, on the older
// supported release (cluster.CompatKubernetesVersion) with that release's
// DRA gates on, so that feature detection is proven on both releases the
// project supports. It starts a cluster of its own beside the suite's.
const (
	compatNamespace = "compat"
	compatDriver    = "tpu.compat.e2e.drastack.io"
	compatSelect    = "compat.e2e.drastack.io/tpu"
	compatDomain    = "compat.e2e.drastack.io/domain"
	compatCoords    = "compat.e2e.drastack.io/coords"
)

func TestCompatOlderRelease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	begin := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{
		Version:           cluster.CompatKubernetesVersion,
		CRDDirectoryPaths: []string{CRDDir},
		LogDir:            compatLogDir(),
		StartTimeout:      3 * time.Minute,
		Logf:              t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop the %s cluster: %v", cluster.CompatKubernetesVersion, err)
		}
	}()
	t.Logf("timing: %s control plane up in %s", cluster.CompatKubernetesVersion, since(begin))

	var specs []cluster.NodeSpec
	for x := range 2 {
		specs = append(specs, cluster.NodeSpec{Name: fmt.Sprintf("compat-%d", x), Labels: map[string]string{
			compatSelect: "true", compatDomain: "d", compatCoords: fmt.Sprintf("%d.0", x),
		}})
	}
	if err := c.AddNodes(ctx, specs...); err != nil {
		t.Fatal(err)
	}
	createNamespace(ctx, t, c.Client, compatNamespace)
	if _, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, deviceClass(compatDriver, compatDriver, ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crc, err := client.New(c.Config, client.Options{Scheme: operator.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	stop := runOperator(ctx, t, c, compatNamespace)
	defer stop()

	// The publisher: one multi-host domain of two hosts (4x2 chips).
	writeStackSpec(ctx, t, crc, time.Minute, func(s *v1alpha1.DRAStackSpec) {
		s.MultiHost = []v1alpha1.MultiHostSpec{{
			Name: "tpu", Driver: compatDriver,
			NodeSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{compatSelect: "true"}},
			DomainLabel:      compatDomain,
			CoordinatesLabel: compatCoords,
			HostGrid:         []int32{2, 1},
			ChipsPerHost:     []int32{2, 2},
			Partitions:       []string{"2x2", "4x2"},
		}}
		s.Claims = compatClaimsSpec()
	})

	// The cluster probe: the release and what it keeps.
	st := waitStack(ctx, t, crc, "the cluster probed on "+cluster.CompatKubernetesVersion, func(st *v1alpha1.DRAStack) bool {
		return st.Status.Cluster != nil && st.Status.Cluster.LastProbeTime != nil &&
			meta.IsStatusConditionTrue(st.Status.Conditions, "ClusterCompatible")
	})
	cs := st.Status.Cluster
	if cs.KubernetesVersion != cluster.CompatKubernetesVersion {
		t.Errorf("status.cluster.kubernetesVersion = %q, want %s", cs.KubernetesVersion, cluster.CompatKubernetesVersion)
	}
	f := cs.Features
	if !f.PartitionableDevices || !f.DeviceTaints || !f.DeviceTaintRules || !f.PrioritizedList {
		t.Errorf("features on %s with every DRA gate on: %+v", cluster.CompatKubernetesVersion, f)
	}
	t.Logf("status.cluster on %s: %+v", cluster.CompatKubernetesVersion, *cs)

	// One pool: the published domain is a Healthy DevicePool.
	var pools map[string]*pool.Pool
	if err := wait.PollUntilContextTimeout(ctx, pollInterval, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pools = clPoolsOf(ctx, t, c, compatDriver)
		return settled(pools["tpu-d"], 3), nil
	}); err != nil {
		t.Fatalf("the domain is not published: %v (pools %v)", err, pools)
	}
	for _, pr := range pools["tpu-d"].Problems {
		t.Errorf("pool tpu-d: %s %s: %s", pr.Severity, pr.Reason, pr.Message)
	}
	waitDevicePool(ctx, t, crc, pool.ID{Driver: compatDriver, Pool: "tpu-d"}, "Healthy", func(st *v1alpha1.DevicePoolStatus) bool {
		return st.Health == v1alpha1.PoolHealthy
	})

	// One central allocation: an immediate claim for the whole domain,
	// allocated by the operator before any pod exists.
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: compatNamespace, Name: "whole-domain"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "tpu", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: compatDriver, Count: 1,
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
					Expression: `device.attributes["` + compatDriver + `"].shape == "4x2"`}}},
			},
		}}}},
	}
	if _, err := c.Client.ResourceV1().ResourceClaims(compatNamespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := clWaitClaim(ctx, t, c, compatNamespace, claim.Name, "allocated by the operator", clAllocated)
	if n := len(got.Status.Allocation.Devices.Results); n != 1 {
		t.Errorf("allocation of %s has %d devices, want 1: %s", claim.Name, n, clClaimSummary(got))
	}
	if by := claimpolicy.AllocatedBy(got); by != claimsctrl.FieldManager {
		t.Errorf("claim %s allocated by %q, want %q", claim.Name, by, claimsctrl.FieldManager)
	}
	for _, p := range clPoolsOf(ctx, t, c, compatDriver) {
		for _, d := range p.Devices {
			if !slices.ContainsFunc(d.Device.Taints, func(tn resourceapi.DeviceTaint) bool { return tn.Key == central.TaintKey }) {
				t.Errorf("published device %s of pool %s lacks the central taint", d.Device.Name, p.ID.Pool)
			}
		}
	}
	t.Logf("on %s: %s", cluster.CompatKubernetesVersion, clClaimSummary(got))
}

// compatClaimsSpec makes the published driver's devices central (the
// publisher writes the taint into its slices, which needs no
// DeviceTaintRule: 1.36 serves that API in v1beta2 only) and serves its
// class immediately.
func compatClaimsSpec() v1alpha1.ClaimsSpec {
	return v1alpha1.ClaimsSpec{Engine: v1alpha1.EngineNative, ImmediateClasses: []string{compatDriver}, GatePods: ptr.To(true),
		Central: []v1alpha1.CentralDevices{{Driver: compatDriver, Classes: []string{compatDriver}}}}
}

// compatLogDir keeps the older cluster's logs beside the suite's when
// LogDirEnv asks for them.
func compatLogDir() string {
	if d := os.Getenv(LogDirEnv); d != "" {
		return d + "/compat"
	}
	return ""
}

// TestDefaultGates starts the default release with only its default
// feature gates, as a cluster whose admin changed nothing, and checks what
// the cluster probe (under the operator's identity) finds there: the
// features 1.37 turns on by default, and none of the alpha ones.
func TestDefaultGates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{DefaultGates: true, StartTimeout: 3 * time.Minute, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop the cluster: %v", err)
		}
	}()
	id, err := c.DeployOperatorIdentity(ctx, operatorDeployDir)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(id.Config)
	if err != nil {
		t.Fatal(err)
	}
	st, err := (&clusterprobe.Prober{Client: cs, Namespace: metav1.NamespaceDefault}).Probe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := st.Features
	t.Logf("%s with default gates: API versions %v, features %+v", st.KubernetesVersion, st.ResourceAPIVersions, f)
	on := map[string]bool{
		"partitionableDevices": f.PartitionableDevices, "deviceTaints": f.DeviceTaints, "deviceTaintRules": f.DeviceTaintRules,
		"prioritizedList": f.PrioritizedList, "consumableCapacity": f.ConsumableCapacity, "bindingConditions": f.BindingConditions,
		"adminAccess": f.AdminAccess, "extendedResources": f.ExtendedResources,
	}
	for name, got := range on {
		if !got {
			t.Errorf("%s is on by default in %s, the probe says off", name, cluster.KubernetesVersion)
		}
	}
	off := map[string]bool{
		"listTypeAttributes": f.ListTypeAttributes, "compatibilityGroups": f.CompatibilityGroups, "derivedAttributes": f.DerivedAttributes,
		"optionalNodeOperations": f.OptionalNodeOperations, "partitionType": f.PartitionType,
	}
	for name, got := range off {
		if got {
			t.Errorf("%s is alpha (off by default) in %s, the probe says on", name, cluster.KubernetesVersion)
		}
	}
	if f.DeviceTaintRulesVersion != "v1" || slices.Contains(st.ResourceAPIVersions, "v1alpha3") {
		t.Errorf("default API versions: DeviceTaintRule in %q (want v1), resource.k8s.io versions %v (v1alpha3 is not served by default)", f.DeviceTaintRulesVersion, st.ResourceAPIVersions)
	}
}
