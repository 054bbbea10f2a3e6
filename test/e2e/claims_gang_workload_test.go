//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/claimpolicy"
	claimsctrl "github.com/drastack/drastack/internal/controller/claims"
	"github.com/drastack/drastack/internal/operator"
	"github.com/drastack/drastack/test/cluster"
)

// TestClaimsGangWorkloadAPI: on a cluster that serves the Workload API
// (Kubernetes 1.37 with GenericWorkload and scheduling.k8s.io/v1beta1, a
// cluster of its own beside the suite's), pods that name a PodGroup with
// the gang policy are one gang for the operator (found with the
// RESTMapper, read under its own RBAC): the first waits, gated, for the
// second; both are placed in one search (kubernetes#138765: the first
// gets the device the second does not need) and run, kube-scheduler's own
// gang scheduling admitting them once their gates are lifted.
func TestClaimsGangWorkloadAPI(t *testing.T) {
	const (
		ns     = "claims-workload"
		node   = "claims-workload-0"
		driver = "wl.claims.e2e.drastack.io"
		class  = "claims-workload"
	)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	begin := time.Now()
	logDir := ""
	if d := os.Getenv(LogDirEnv); d != "" {
		logDir = filepath.Join(d, "workload-api")
	}
	c, err := cluster.Start(ctx, cluster.Options{
		CRDDirectoryPaths:  []string{CRDDir},
		ExtraFeatureGates:  []string{"GenericWorkload=true"},
		ExtraRuntimeConfig: []string{"scheduling.k8s.io/v1beta1=true"},
		LogDir:             logDir,
		StartTimeout:       3 * time.Minute,
		Logf:               t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop the Workload API cluster: %v", err)
		}
	}()
	t.Logf("timing: control plane with the Workload API up in %s", since(begin))
	if _, err := c.Client.SchedulingV1beta1().PodGroups("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("the cluster does not serve PodGroups: %v", err)
	}
	if err := c.AddNodes(ctx, cluster.NodeSpec{Name: node}); err != nil {
		t.Fatal(err)
	}
	createNamespace(ctx, t, c.Client, ns)
	if _, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, deviceClass(class, driver, ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var devs []resourceapi.Device
	for i, typ := range []string{"x", "x", "y", "x"} {
		devs = append(devs, resourceapi.Device{Name: fmt.Sprintf("dev-%d", i), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"type": {StringValue: ptr.To(typ)},
		}})
	}
	clCreateSlices(ctx, t, c, clNodeSlice(driver, node, 1, devs))
	crc, err := client.New(c.Config, client.Options{Scheme: operator.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	clApplyClaimsSpec(ctx, t, crc, v1alpha1.ClaimsSpec{Engine: v1alpha1.EngineNative, GatePods: ptr.To(true),
		GangTimeout: &metav1.Duration{Duration: time.Second},
		Central:     []v1alpha1.CentralDevices{{Driver: driver, Classes: []string{class}}}})
	op := clStartOperator(ctx, t, c, ns)
	defer op.stop()
	clWaitCentral(ctx, t, c, driver)
	clCreateTemplate(ctx, t, c, ns, "any", nil, nil, clClaimSpec(class, 1, ""))
	clCreateTemplate(ctx, t, c, ns, "x3", nil, nil, clClaimSpec(class, 3, "device.attributes['"+driver+"'].type == 'x'"))
	clWaitWebhook(ctx, t, c, ns, "any")

	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "train"},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 2}}}}
	if _, err := c.Client.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create PodGroup: %v", err)
	}
	member := func(name, template string) *corev1.Pod {
		p := claimPod(ns, name, template)
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("train")}
		return p
	}
	begin = time.Now()
	a := clCreatePod(ctx, t, c, member("a", "any"))
	if !claimpolicy.HasGate(a) {
		t.Fatalf("pod a admitted without the operator's gate: %v", a.Spec.SchedulingGates)
	}
	claimA := clPodClaimName(ctx, t, c, ns, "a")
	// Alone, the member waits, and is reported once gangTimeout passed;
	// its claim stays unallocated.
	clWaitEvent(ctx, t, c, ns, "Pod", "a", claimsctrl.EventGangIncomplete, "gang "+ns+"/train has 1 of its 2 pods")
	if cl := clWaitClaim(ctx, t, c, ns, claimA, "created", func(*resourceapi.ResourceClaim) bool { return true }); clAllocated(cl) {
		t.Fatalf("the claim of a lone member of a gang of 2 was allocated")
	}
	clCreatePod(ctx, t, c, member("b", "x3"))
	a = waitPodRunning(ctx, t, c, ns, "a")
	b := waitPodRunning(ctx, t, c, ns, "b")
	t.Logf("timing: PodGroup members created -> both Running in %s", since(begin))
	var gotA []string
	for _, r := range allocatedDevices(ctx, t, c.Client, a) {
		gotA = append(gotA, r.Device)
	}
	if len(gotA) != 1 || gotA[0] != "dev-2" {
		t.Errorf("pod a got %v, want the type-y device dev-2 (the gang's placement)", gotA)
	}
	if n := len(allocatedDevices(ctx, t, c.Client, b)); n != 3 {
		t.Errorf("pod b got %d devices, want 3", n)
	}
	clWaitEvent(ctx, t, c, ns, "Pod", "a", "AllocationGateRemoved", "gang "+ns+"/train placed")
}
