//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/cli"
	claimsctrl "github.com/drastack/drastack/internal/controller/claims"
	"github.com/drastack/drastack/internal/gang"
	"github.com/drastack/drastack/internal/operator"
	"github.com/drastack/drastack/internal/simdriver"
	"github.com/drastack/drastack/test/cluster"
)

// The gang suite (issue 27) on the real control plane: the same shapes of
// work given to kube-scheduler (its own devices) and to the operator
// (central devices of the same kind, on the same node), one after the
// other, as kubernetes#138765 and a churn of MIG partitions show them:
//
//   - a gang whose first member, placed alone first fit, takes a device
//     the second needs: kube-scheduler leaves the second pending; the
//     operator places the gang in one search and both pods run. The
//     operator's first member waits, gated, until the second exists, and
//     is reported after spec.claims.gangTimeout;
//   - a gang that cannot fit stays gated, unallocated, with an
//     Unsatisfiable Event on each member that kubectl dra explain repeats,
//     and is placed when devices are released;
//   - after the same churn of MIG claims on two A100s each, kube-scheduler
//     (first fit) leaves no 7g.40gb partition while the operator (Pack)
//     places one.
const (
	gnNamespace  = "claims-gang"
	gnNode       = "claims-gang-0"
	gnMIGNode    = "claims-gang-mig"
	gnDriver     = "gang.claims.e2e.drastack.io"     // central
	gnOpenDriver = "gangopen.claims.e2e.drastack.io" // kube-scheduler's
	gnClass      = "claims-gang"
	gnOpenClass  = "claims-gang-open"
	gnMIGDriver  = "mig.claims.e2e.drastack.io"     // central
	gnMIGOpen    = "migopen.claims.e2e.drastack.io" // kube-scheduler's
	gnMIGClass   = "claims-gang-mig"
	gnMIGOpenCls = "claims-gang-mig-open"
	gnTimeout    = 3 * time.Second
)

func TestClaimsGangs(t *testing.T) {
	feature := features.New("gangs placed all or nothing, and placement that keeps partitions whole").
		Assess("gangs and MIG churn, operator against kube-scheduler", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			createNamespace(ctx, t, c.Client, gnNamespace)
			if err := c.InstallCRDs(CRDDir); err != nil {
				t.Fatal(err)
			}
			if err := c.AddNodes(ctx, cluster.NodeSpec{Name: gnNode}, cluster.NodeSpec{Name: gnMIGNode}); err != nil {
				t.Fatal(err)
			}
			for _, dc := range []*resourceapi.DeviceClass{
				deviceClass(gnClass, gnDriver, ""), deviceClass(gnOpenClass, gnOpenDriver, ""),
				deviceClass(gnMIGClass, gnMIGDriver, ""), deviceClass(gnMIGOpenCls, gnMIGOpen, ""),
			} {
				if _, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					t.Fatal(err)
				}
			}
			// Four devices per driver on gnNode, of types x, x, y, x.
			typed := func(driver string) []resourceapi.Device {
				var devs []resourceapi.Device
				for i, typ := range []string{"x", "x", "y", "x"} {
					devs = append(devs, resourceapi.Device{Name: fmt.Sprintf("dev-%d", i), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
						"type": {StringValue: ptr.To(typ)},
					}})
				}
				return devs
			}
			clCreateSlices(ctx, t, c, clNodeSlice(gnDriver, gnNode, 1, typed(gnDriver)), clNodeSlice(gnOpenDriver, gnNode, 1, typed(gnOpenDriver)))
			clCreateSlices(ctx, t, c, gnMIGSlices(t, gnMIGDriver)...)
			clCreateSlices(ctx, t, c, gnMIGSlices(t, gnMIGOpen)...)
			defer func() {
				for _, d := range []string{gnDriver, gnOpenDriver, gnMIGDriver, gnMIGOpen} {
					if err := c.Client.ResourceV1().ResourceSlices().DeleteCollection(context.WithoutCancel(ctx), metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "spec.driver=" + d}); err != nil {
						t.Errorf("delete slices of %s: %v", d, err)
					}
				}
			}()
			crc, err := client.New(c.Config, client.Options{Scheme: operator.Scheme()})
			if err != nil {
				t.Fatal(err)
			}
			restore := clApplyClaimsSpec(ctx, t, crc, v1alpha1.ClaimsSpec{Engine: v1alpha1.EngineNative, GatePods: ptr.To(true),
				GangTimeout: &metav1.Duration{Duration: gnTimeout},
				Central: []v1alpha1.CentralDevices{
					{Driver: gnDriver, Classes: []string{gnClass}},
					{Driver: gnMIGDriver, Classes: []string{gnMIGClass}},
				}})
			op := clStartOperator(ctx, t, c, gnNamespace)
			defer op.stop()
			defer restore() // before the operator stops: its finalizer holds the DRAStack
			defer clRemoveWebhook(ctx, t, c)
			// First of all, while the operator runs: the pods go and their
			// claims release the central devices, which otherwise keep the
			// DRAStack (its deletion waits for held devices).
			defer clDeleteNamespace(ctx, t, c, gnNamespace)
			clWaitCentral(ctx, t, c, gnDriver, gnMIGDriver)
			clCreateTemplate(ctx, t, c, gnNamespace, "gang-any", nil, nil, clClaimSpec(gnClass, 1, ""))
			clWaitWebhook(ctx, t, c, gnNamespace, "gang-any")

			isX := func(driver string) string { return "device.attributes['" + driver + "'].type == 'x'" }
			clCreateTemplate(ctx, t, c, gnNamespace, "gang-x3", nil, nil, clClaimSpec(gnClass, 3, isX(gnDriver)))
			clCreateTemplate(ctx, t, c, gnNamespace, "gang-2", nil, nil, clClaimSpec(gnClass, 2, ""))
			clCreateTemplate(ctx, t, c, gnNamespace, "open-any", nil, nil, clClaimSpec(gnOpenClass, 1, ""))
			clCreateTemplate(ctx, t, c, gnNamespace, "open-x3", nil, nil, clClaimSpec(gnOpenClass, 3, isX(gnOpenDriver)))

			// kubernetes#138765 with kube-scheduler: a first, then b.
			begin := time.Now()
			ksA := waitPodRunning(ctx, t, c, gnNamespace, clCreatePod(ctx, t, c, gnPod("ks-a", "open-any", "", 0)).Name)
			if devs := gnDevices(ctx, t, c, ksA); len(devs) != 1 || devs[0] == "dev-2" {
				t.Fatalf("kube-scheduler gave pod ks-a %v; the comparison needs first fit to take a type-x device", devs)
			}
			clCreatePod(ctx, t, c, gnPod("ks-b", "open-x3", "", 0))
			gnWaitUnschedulable(ctx, t, c, "ks-b")
			t.Logf("timing: kube-scheduler's pair placed one at a time, the second left pending, in %s", since(begin))

			// The same pair as a gang for the operator, arriving over time:
			// a alone waits, gated and unallocated, and is reported after
			// the gang timeout; b brings the placement of both.
			begin = time.Now()
			opA := clCreatePod(ctx, t, c, gnPod("op-a", "gang-any", "train", 2))
			if !claimpolicy.HasGate(opA) {
				t.Fatalf("pod %s admitted without the gate", opA.Name)
			}
			ev := clWaitEvent(ctx, t, c, gnNamespace, "Pod", "op-a", claimsctrl.EventGangIncomplete, "gang claims-gang/train has 1 of its 2 pods")
			t.Logf("GangIncomplete after %s: %s", since(begin), ev.Note)
			if p := gnGetPod(ctx, t, c, "op-a"); !claimpolicy.HasGate(p) || gnCondition(p) == nil || gnCondition(p).Status != corev1.ConditionFalse {
				t.Errorf("pod op-a of an incomplete gang: gated %v, condition %+v; want gated with %s False", claimpolicy.HasGate(p), gnCondition(p), claimsctrl.GangCondition)
			}
			if cl := clWaitClaim(ctx, t, c, gnNamespace, clPodClaimName(ctx, t, c, gnNamespace, "op-a"), "created", func(*resourceapi.ResourceClaim) bool { return true }); clAllocated(cl) {
				t.Errorf("claim of op-a allocated before its gang is complete")
			}
			begin = time.Now()
			clCreatePod(ctx, t, c, gnPod("op-b", "gang-x3", "train", 2))
			opA = waitPodRunning(ctx, t, c, gnNamespace, "op-a")
			opB := waitPodRunning(ctx, t, c, gnNamespace, "op-b")
			t.Logf("timing: last member created -> gang placed, both pods Running in %s", since(begin))
			if devs := gnDevices(ctx, t, c, opA); len(devs) != 1 || devs[0] != "dev-2" {
				t.Errorf("the gang gave op-a %v, want the type-y device dev-2", devs)
			}
			if devs := gnDevices(ctx, t, c, opB); len(devs) != 3 {
				t.Errorf("the gang gave op-b %v, want three devices", devs)
			}
			if c := gnCondition(opA); c == nil || c.Status != corev1.ConditionTrue {
				t.Errorf("pod op-a placed: condition %+v, want True", c)
			}

			// A gang that cannot fit: all four central devices are held.
			for i := range 2 {
				clCreatePod(ctx, t, c, gnPod(fmt.Sprintf("big-%d", i), "gang-2", "big", 2))
			}
			for i := range 2 {
				ev := clWaitEvent(ctx, t, c, gnNamespace, "Pod", fmt.Sprintf("big-%d", i), string(claimpolicy.OutcomeUnsatisfiable), "gang claims-gang/big")
				if !strings.Contains(ev.Note, "cannot be placed even alone") && !strings.Contains(ev.Note, "every member fits alone") {
					t.Errorf("Unsatisfiable Event %q: want the gang's verdict", ev.Note)
				}
			}
			for i := range 2 {
				p := gnGetPod(ctx, t, c, fmt.Sprintf("big-%d", i))
				if !claimpolicy.HasGate(p) {
					t.Errorf("pod %s of a gang that cannot fit lost its gate", p.Name)
				}
				if cl := clWaitClaim(ctx, t, c, gnNamespace, clPodClaimName(ctx, t, c, gnNamespace, p.Name), "created", func(*resourceapi.ResourceClaim) bool { return true }); clAllocated(cl) {
					t.Errorf("claim %s of a gang that cannot fit is allocated: the gang is placed in part", cl.Name)
				}
			}
			ex := gnExplain(ctx, t, c, "pod/big-1")
			if ex.Gang == nil || ex.Gang.Explanation == nil || ex.Gang.Explanation.Fits || !strings.Contains(ex.Gang.Verdict, "gang claims-gang/big") {
				t.Errorf("kubectl dra explain pod/big-1: gang %+v; want the gang explained as not fitting", ex.Gang)
			}
			// Released devices bring the gang in.
			begin = time.Now()
			for _, p := range []string{"op-a", "op-b"} {
				if err := c.Client.CoreV1().Pods(gnNamespace).Delete(ctx, p, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 2 {
				waitPodRunning(ctx, t, c, gnNamespace, fmt.Sprintf("big-%d", i))
			}
			t.Logf("timing: devices released -> gang placed, both pods Running in %s", since(begin))

			// MIG churn: the same sequence for kube-scheduler and for the
			// operator, each on its own two A100s.
			gnMIGChurn(ctx, t, c)
			if n := clCheckNoRaces(ctx, t, c); n == 0 {
				t.Error("no allocated claims at the end")
			}
			return ctx
		}).Feature()
	testenv.Test(t, feature)
}

// gnMIGChurn runs the churn on both sides: a 4g and a 3g fill the first
// GPU, a 1g goes to the second, the 4g and the 3g leave, and another 1g
// arrives. First fit puts it on the first GPU (first in device order),
// breaking the only whole GPU; Pack puts it next to the other 1g. Then a
// 7g.40gb: kube-scheduler leaves it pending, the operator places it.
func gnMIGChurn(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	profile := func(driver, p string) string {
		return "device.attributes['" + driver + "'].?profile.orValue('') == '" + p + "'"
	}
	for _, side := range []struct{ prefix, class, driver string }{{"ks", gnMIGOpenCls, gnMIGOpen}, {"op", gnMIGClass, gnMIGDriver}} {
		for _, p := range []string{"4g.20gb", "3g.20gb", "1g.5gb", "7g.40gb"} {
			clCreateTemplate(ctx, t, c, gnNamespace, side.prefix+"-"+strings.ReplaceAll(p, ".", "-"), nil, nil, clClaimSpec(side.class, 1, profile(side.driver, p)))
		}
	}
	begin := time.Now()
	for _, side := range []string{"ks", "op"} {
		tmpl := func(p string) string { return side + "-" + strings.ReplaceAll(p, ".", "-") }
		arrive := func(name, p string) {
			waitPodRunning(ctx, t, c, gnNamespace, clCreatePod(ctx, t, c, gnPod(side+"-"+name, tmpl(p), "", 0)).Name)
		}
		leave := func(name string) {
			pod := gnGetPod(ctx, t, c, side+"-"+name)
			claim := clPodClaimName(ctx, t, c, gnNamespace, pod.Name)
			if err := c.Client.CoreV1().Pods(gnNamespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
				t.Fatal(err)
			}
			gnWaitClaimGone(ctx, t, c, claim)
		}
		arrive("m1", "4g.20gb")
		arrive("m2", "3g.20gb")
		arrive("m3", "1g.5gb")
		leave("m1")
		leave("m2")
		arrive("m4", "1g.5gb")
		clCreatePod(ctx, t, c, gnPod(side+"-whole", tmpl("7g.40gb"), "", 0))
	}
	gnWaitUnschedulable(ctx, t, c, "ks-whole")
	op := waitPodRunning(ctx, t, c, gnNamespace, "op-whole")
	t.Logf("timing: both churn sequences and the 7g pods in %s", since(begin))
	ks3, ks4 := gnDevices(ctx, t, c, gnGetPod(ctx, t, c, "ks-m3")), gnDevices(ctx, t, c, gnGetPod(ctx, t, c, "ks-m4"))
	op3, op4 := gnDevices(ctx, t, c, gnGetPod(ctx, t, c, "op-m3")), gnDevices(ctx, t, c, gnGetPod(ctx, t, c, "op-m4"))
	t.Logf("1g.5gb partitions: kube-scheduler %v %v, operator %v %v; the operator's 7g.40gb: %v", ks3, ks4, op3, op4, gnDevices(ctx, t, c, op))
	if len(op3) != 1 || len(op4) != 1 || strings.SplitN(op3[0], "-mig-", 2)[0] != strings.SplitN(op4[0], "-mig-", 2)[0] {
		t.Errorf("the operator's two 1g partitions %v %v are on different GPUs: Pack keeps them together", op3, op4)
	}
}

// gnMIGSlices renders two A100 40GB GPUs with MIG partitions (the
// simulated driver's KEP-4815 table) as node-local slices of gnMIGNode.
func gnMIGSlices(t *testing.T, driver string) []*resourceapi.ResourceSlice {
	t.Helper()
	inv := &simdriver.Inventory{Drivers: []simdriver.DriverSpec{{Name: driver, Devices: []simdriver.DeviceGroup{{Kind: simdriver.KindGPU, Count: 2, Partitions: simdriver.ProfileA100_40GB}}}}}
	pools, err := simdriver.Render(inv, gnMIGNode, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []*resourceapi.ResourceSlice
	for _, p := range pools {
		for i, sl := range p.Slices {
			out = append(out, &resourceapi.ResourceSlice{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", gnMIGNode, strings.Split(driver, ".")[0], i)},
				Spec: resourceapi.ResourceSliceSpec{
					Driver: p.Driver, NodeName: ptr.To(gnMIGNode),
					Pool:    resourceapi.ResourcePool{Name: p.Name, Generation: 1, ResourceSliceCount: int64(len(p.Slices))},
					Devices: sl.Devices, SharedCounters: sl.SharedCounters, PartitionTypeAttribute: sl.PartitionTypeAttribute,
				},
			})
		}
	}
	return out
}

// gnPod is a pod with one claim from a template, in the label gang g (of
// min pods) unless g is empty.
func gnPod(name, template, g string, min int) *corev1.Pod {
	p := claimPod(gnNamespace, name, template)
	if g != "" {
		p.Labels = map[string]string{gang.LabelName: g}
		p.Annotations = map[string]string{gang.AnnotationMinCount: fmt.Sprint(min)}
	}
	return p
}

func gnGetPod(ctx context.Context, t *testing.T, c *cluster.Cluster, name string) *corev1.Pod {
	t.Helper()
	p, err := c.Client.CoreV1().Pods(gnNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s: %v", name, err)
	}
	return p
}

func gnCondition(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == claimsctrl.GangCondition {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// gnDevices names the devices allocated to the pod's claims.
func gnDevices(ctx context.Context, t *testing.T, c *cluster.Cluster, pod *corev1.Pod) []string {
	t.Helper()
	var out []string
	for _, r := range allocatedDevices(ctx, t, c.Client, pod) {
		out = append(out, r.Device)
	}
	return out
}

// gnWaitUnschedulable waits until kube-scheduler has tried the pod and
// left it pending.
func gnWaitUnschedulable(ctx context.Context, t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, pollInterval, clTimeout, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(gnNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // retried
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				t.Logf("kube-scheduler left pod %s pending: %s", name, cond.Message)
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s was not left pending by kube-scheduler: %v", gnNamespace, name, err)
	}
}

// gnWaitClaimGone waits until kube-controller-manager deleted a pod's
// claim (its devices are free).
func gnWaitClaimGone(ctx context.Context, t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, pollInterval, clTimeout, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.ResourceV1().ResourceClaims(gnNamespace).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("claim %s/%s not deleted after its pod: %v", gnNamespace, name, err)
	}
}

// gnExplain runs kubectl dra explain in-process and returns its JSON.
func gnExplain(ctx context.Context, t *testing.T, c *cluster.Cluster, what string) cli.ExplainOutput {
	t.Helper()
	args := []string{"explain", what, "-n", gnNamespace, "--kubeconfig", c.KubeconfigPath}
	var table, stderr bytes.Buffer
	if code := cli.Run(args, strings.NewReader(""), &table, &stderr); code != cli.ExitOK {
		t.Fatalf("kubectl dra %s: exit %d: %s", strings.Join(args, " "), code, stderr.String())
	}
	t.Logf("kubectl dra explain %s:\n%s", what, table.String())
	var js bytes.Buffer
	stderr.Reset()
	if code := cli.Run(append(args, "-o", "json"), strings.NewReader(""), &js, &stderr); code != cli.ExitOK {
		t.Fatalf("kubectl dra %s -o json: exit %d: %s", strings.Join(args, " "), code, stderr.String())
	}
	var out cli.ExplainOutput
	if err := json.Unmarshal(js.Bytes(), &out); err != nil {
		t.Fatalf("kubectl dra explain %s -o json: %v\n%s", what, err, js.String())
	}
	return out
}
