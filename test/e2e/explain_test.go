//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/cli"
	"github.com/drastack/drastack/internal/operator"
	"github.com/drastack/drastack/test/cluster"
)

// The explain suite (issue 13): kubectl dra explain, run in-process
// against the cluster's kubeconfig, names the obstacle of a pod
// kube-scheduler leaves pending because a shared counter is exhausted, and
// of an operator claim whose CEL constraint no set of devices meets; the
// operator's Unsatisfiable Event on that claim carries the same verdict.
const (
	exNamespace = "explain"
	exNode      = "explain-0"
	// exOpenDriver's partitions are kube-scheduler's: a counter set of
	// 8Gi, a "whole" partition of 8Gi and two "half" ones of 4Gi.
	exOpenDriver = "open.explain.e2e.drastack.io"
	exOpenClass  = "explain-open"
	// exCELDriver's devices are central: only the operator allocates them.
	exCELDriver = "cel.explain.e2e.drastack.io"
	exCELClass  = "explain-cel"
)

func TestExplain(t *testing.T) {
	feature := features.New("kubectl dra explain names the obstacle, live").
		Assess("a counter exhausted for a kube-scheduler pod, a CEL constraint for an operator claim", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			createNamespace(ctx, t, c.Client, exNamespace)
			defer clDeleteNamespace(ctx, t, c, exNamespace)
			if err := c.InstallCRDs(CRDDir); err != nil {
				t.Fatal(err)
			}
			if err := c.AddNodes(ctx, cluster.NodeSpec{Name: exNode}); err != nil {
				t.Fatal(err)
			}
			for _, dc := range []*resourceapi.DeviceClass{deviceClass(exOpenClass, exOpenDriver, ""), deviceClass(exCELClass, exCELDriver, "")} {
				if _, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					t.Fatal(err)
				}
			}
			clCreateSlices(ctx, t, c, exPartitionSlices()...)
			clCreateSlices(ctx, t, c, clNodeSlice(exCELDriver, exNode, 1, []resourceapi.Device{
				{Name: "dev-0", Attributes: clIntAttrs(map[string]int64{"index": 0})},
				{Name: "dev-1", Attributes: clIntAttrs(map[string]int64{"index": 1})},
				{Name: "dev-2", Attributes: clIntAttrs(map[string]int64{"index": 2})},
			}))
			defer func() {
				for _, d := range []string{exOpenDriver, exCELDriver} {
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
				Central: []v1alpha1.CentralDevices{{Driver: exCELDriver, Classes: []string{exCELClass}, AllowImmediate: true}}})
			op := clStartOperator(ctx, t, c, exNamespace)
			defer op.stop()
			defer restore() // before the operator stops: its finalizer holds the DRAStack
			defer clRemoveWebhook(ctx, t, c)
			clWaitCentral(ctx, t, c, exCELDriver)
			begin := time.Now()

			// kube-scheduler gives "whole" (all 8Gi of the counter set) to
			// the first pod; the second pod's "half" finds no memory left.
			profile := func(p string) string { return "device.attributes['" + exOpenDriver + "'].profile == '" + p + "'" }
			clCreateTemplate(ctx, t, c, exNamespace, "whole", nil, nil, clClaimSpec(exOpenClass, 1, profile("whole")))
			clCreateTemplate(ctx, t, c, exNamespace, "half", nil, nil, clClaimSpec(exOpenClass, 1, profile("half")))
			first := clCreatePod(ctx, t, c, claimPod(exNamespace, "first", "whole"))
			if claimpolicy.HasGate(first) {
				t.Fatalf("pod %s with only kube-scheduler claims was gated", first.Name)
			}
			clWaitClaim(ctx, t, c, exNamespace, clPodClaimName(ctx, t, c, exNamespace, "first"), "allocated", clAllocated)
			clCreatePod(ctx, t, c, claimPod(exNamespace, "second", "half"))
			exWaitUnschedulable(ctx, t, c, "second")

			// The operator cannot meet the CEL constraint: 3 devices for a
			// claim of 2.
			clCreateClaim(ctx, t, c, exNamespace, "cel", map[string]string{claimpolicy.AllocationLabel: claimpolicy.AllocationImmediate},
				clCEL("size(devices) == 3"), clClaimSpec(exCELClass, 2, ""))
			const celObstacle = "no combination of devices satisfies the CEL constraints"
			ev := clWaitEvent(ctx, t, c, exNamespace, "ResourceClaim", "cel", "Unsatisfiable", "enough devices for every request")
			if !strings.Contains(ev.Note, celObstacle) {
				t.Errorf("Unsatisfiable Event %q: want the verdict naming the CEL constraint", ev.Note)
			}

			pod := exExplain(ctx, t, c, "pod/second")
			if pod.Pod != exNamespace+"/second" || len(pod.Explanations) != 1 || pod.Explanations[0].Fits {
				t.Fatalf("explain pod/second: %+v", pod)
			}
			for _, want := range []string{"request devices:", "on " + exNode, "counters (" + exOpenDriver + "/" + exNode + " counter set mem counter memory needs 4Gi, 0 left)"} {
				if v := pod.Explanations[0].Verdict; !strings.Contains(v, want) {
					t.Errorf("explain pod/second: verdict %q does not name %q", v, want)
				}
			}
			claim := exExplain(ctx, t, c, "claim/cel")
			if len(claim.Explanations) != 1 || claim.Explanations[0].Fits || !strings.Contains(claim.Explanations[0].Verdict, celObstacle) {
				t.Errorf("explain claim/cel: %+v; want the verdict naming the CEL constraint", claim)
			}
			if claim.Features != "the DRAStack's cluster probe" {
				t.Errorf("explain claim/cel: feature gates from %q, want the DRAStack's cluster probe", claim.Features)
			}
			t.Logf("timing: objects created -> both explained in %s", since(begin))
			return ctx
		}).Feature()
	testenv.Test(t, feature)
}

// exPartitionSlices is exOpenDriver's pool on exNode: a counter slice and
// a device slice with the partitions.
func exPartitionSlices() []*resourceapi.ResourceSlice {
	q := func(s string) map[string]resourceapi.Counter {
		return map[string]resourceapi.Counter{"memory": {Value: resource.MustParse(s)}}
	}
	pool := resourceapi.ResourcePool{Name: exNode, Generation: 1, ResourceSliceCount: 2}
	counters := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: exNode + "-open-counters"},
		Spec: resourceapi.ResourceSliceSpec{Driver: exOpenDriver, Pool: pool, NodeName: ptr.To(exNode),
			SharedCounters: []resourceapi.CounterSet{{Name: "mem", Counters: q("8Gi")}}},
	}
	part := func(name, profile, size string) resourceapi.Device {
		return resourceapi.Device{
			Name:             name,
			Attributes:       map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"profile": {StringValue: ptr.To(profile)}},
			ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: "mem", Counters: q(size)}},
		}
	}
	devices := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: exNode + "-open-partitions"},
		Spec: resourceapi.ResourceSliceSpec{Driver: exOpenDriver, Pool: pool, NodeName: ptr.To(exNode),
			Devices: []resourceapi.Device{part("whole", "whole", "8Gi"), part("half-0", "half", "4Gi"), part("half-1", "half", "4Gi")}},
	}
	return []*resourceapi.ResourceSlice{counters, devices}
}

// exWaitUnschedulable waits until kube-scheduler has tried the pod and
// left it pending.
func exWaitUnschedulable(ctx context.Context, t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, pollInterval, clTimeout, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(exNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // retried
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				t.Logf("pod %s pending: %s", name, cond.Message)
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s was not left pending by kube-scheduler: %v", exNamespace, name, err)
	}
}

// exExplain runs kubectl dra explain in-process with the cluster's
// kubeconfig, logs its table and returns its JSON output.
func exExplain(ctx context.Context, t *testing.T, c *cluster.Cluster, what string) cli.ExplainOutput {
	t.Helper()
	args := []string{"explain", what, "-n", exNamespace, "--kubeconfig", c.KubeconfigPath}
	var table, stderr bytes.Buffer
	if code := cli.Run(args, strings.NewReader(""), &table, &stderr); code != cli.ExitOK {
		t.Fatalf("kubectl dra %s: exit %d: %s", strings.Join(args, " "), code, stderr.String())
	}
	t.Logf("kubectl dra explain %s:\n%s%s", what, table.String(), stderr.String())
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
