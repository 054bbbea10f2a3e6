//go:build e2e

package realnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/bundle"
	"github.com/drastack/drastack/internal/claimpolicy"
	claimsctrl "github.com/drastack/drastack/internal/controller/claims"
	"github.com/drastack/drastack/internal/images"
	"github.com/drastack/drastack/internal/ociimage"
	"github.com/drastack/drastack/internal/webhookcert"
	"github.com/drastack/drastack/test/cluster"
)

const (
	opNS         = "realnode-operator"
	kwokDriver   = "nic.kwok.example.com"
	operatorPods = "control-plane=controller-manager"
)

// TestOperatorAsDeployed runs the operator exactly as `make deploy`
// installs it: every object of config/default applied as the installing
// administrator, its Deployment's image (built from this tree, imported
// into the real node) running on the real node with the ServiceAccount
// token the kubelet mounts, its webhooks reached by the API server through
// their Service. It then does its jobs: a driver on the real node, a pool
// on the kwok node, a claim it gates, allocates and places on the real
// node, whose container sees the devices.
func TestOperatorAsDeployed(t *testing.T) {
	c, n := realNode(t)
	ctx := context.Background()
	crc := crClient(t, c)

	objs, err := bundle.Build(deployDir)
	if err != nil {
		t.Fatal(err)
	}
	image, operatorNS := deploymentImage(t, objs)
	bin := filepath.Join(binDir, "manager")
	if err := cluster.GoBuild(ctx, bin, "./cmd/manager"); err != nil {
		t.Fatal(err)
	}
	img, err := images.Operator(bin, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Import(ctx, ociimage.Tagged{Ref: image, Image: img}); err != nil {
		t.Fatal(err)
	}

	// The kwok node takes no pods meanwhile, so that the operator's pod
	// runs for real.
	cordon(ctx, t, c, "kwok-node-0", true)
	defer cordon(ctx, t, c, "kwok-node-0", false)
	begin := time.Now()
	apply(ctx, t, c, objs)
	defer undeploy(ctx, t, c, objs, operatorNS)
	op := waitOperatorPod(ctx, t, c, operatorNS)
	t.Logf("timing: operator pod Ready on %s %s after the apply", op.Spec.NodeName, time.Since(begin).Round(100*time.Millisecond))
	if op.Spec.NodeName != n.Name {
		t.Fatalf("the operator runs on %s, want the real node %s", op.Spec.NodeName, n.Name)
	}
	cordon(ctx, t, c, "kwok-node-0", false)
	if op.Spec.ServiceAccountName != "drastack-controller-manager" || op.Spec.Containers[0].Image != image {
		t.Errorf("operator pod: ServiceAccount %s, image %s", op.Spec.ServiceAccountName, op.Spec.Containers[0].Image)
	}

	namespace(ctx, t, c, opNS)
	defer deleteStack(ctx, t, crc)
	writeStack(ctx, t, crc, func(s *v1alpha1.DRAStackSpec) {
		s.Drivers = []v1alpha1.DriverSpec{driverSpec(centralDriver, v1alpha1.RemovalPolicyDrain)}
		s.Claims = v1alpha1.ClaimsSpec{GatePods: ptr.To(true), Central: []v1alpha1.CentralDevices{{Driver: centralDriver, Classes: []string{centralClass}}}}
	})

	t.Run("its driver is Ready on the real node", func(t *testing.T) {
		waitDriver(ctx, t, crc, centralDriver, "Ready at "+exampleVersion, readyAt(exampleVersion))
	})

	t.Run("it validates a pool of the kwok node", func(t *testing.T) {
		slice := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: "kwok-nics"},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:   kwokDriver,
				NodeName: ptr.To("kwok-node-0"),
				Pool:     resourceapi.ResourcePool{Name: "kwok-node-0", Generation: 1, ResourceSliceCount: 1},
				Devices:  []resourceapi.Device{{Name: "nic-0"}, {Name: "nic-1"}},
			},
		}
		if _, err := c.Client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = c.Client.ResourceV1().ResourceSlices().Delete(context.WithoutCancel(ctx), slice.Name, metav1.DeleteOptions{})
		}()
		eventually(ctx, t, "a Healthy DevicePool of the kwok node", func(ctx context.Context) error {
			var pools v1alpha1.DevicePoolList
			if err := crc.List(ctx, &pools); err != nil {
				return err
			}
			for _, p := range pools.Items {
				if p.Status.Driver == kwokDriver {
					if p.Status.Node != "kwok-node-0" || p.Status.Health != v1alpha1.PoolHealthy || p.Status.Devices.Total != 2 {
						return fmt.Errorf("pool %s: node %s, health %s, %d devices", p.Name, p.Status.Node, p.Status.Health, p.Status.Devices.Total)
					}
					return nil
				}
			}
			return errors.New("no pool of the kwok node yet")
		})
	})

	t.Run("its webhooks answer through their Service", func(t *testing.T) {
		cfg, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, webhookcert.DefaultWebhookConfigName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range cfg.Webhooks {
			if h.ClientConfig.Service == nil || h.ClientConfig.URL != nil {
				t.Errorf("webhook %s is not called through a Service: %+v", h.Name, h.ClientConfig)
			}
		}
		template(ctx, t, c, opNS, "adjacent-migs", centralClass, 2, fmt.Sprintf(mig1g5gb, centralDriver),
			map[string]string{allocator.CELConstraintsAnnotation: adjacentPair(centralDriver)})
		eventually(ctx, t, "the pod webhook gating a dry-run pod", func(ctx context.Context) error {
			got, err := c.Client.CoreV1().Pods(opNS).Create(ctx, podWithClaim(opNS, "probe", "adjacent-migs", 0), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				return err
			}
			if !claimpolicy.HasGate(got) {
				return errors.New("not gated")
			}
			return nil
		})
		claim := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: opNS, Name: "finalized", Annotations: map[string]string{allocator.CELConstraintsAnnotation: adjacentPair(centralDriver)}},
		}
		claim.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "dev", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: centralClass, Count: 2,
			AllocationMode: resourceapi.DeviceAllocationModeExactCount,
			Selectors:      []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf(mig1g5gb, centralDriver)}}}}}}
		got, err := c.Client.ResourceV1().ResourceClaims(opNS).Create(ctx, claim, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Fatal(err)
		}
		if !claimpolicy.HasFinalizer(got) {
			t.Errorf("the claim webhook did not put the delete-protection finalizer on the operator's claim: %v", got.Finalizers)
		}
	})

	t.Run("a pod it placed on the real node sees its devices", func(t *testing.T) {
		pod, err := c.Client.CoreV1().Pods(opNS).Create(ctx, podWithClaim(opNS, "reader", "adjacent-migs", 3600), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !claimpolicy.HasGate(pod) {
			t.Error("the pod was created without the operator's scheduling gate")
		}
		pod = waitPod(ctx, t, c, opNS, pod.Name, "running on the real node", running)
		claim := podClaim(ctx, t, c, pod)
		waitEvent(ctx, t, c, opNS, claim.Name, claimsctrl.EventAllocated)
		checkSawExactly(t, containerSaw(ctx, t, c, pod), claim, centralDriver)
		deletePod(ctx, t, c, opNS, pod.Name)
	})

	t.Run("it was never refused a request", func(t *testing.T) {
		logs, err := c.Client.CoreV1().Pods(operatorNS).GetLogs(op.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(logs), "\n") {
			if strings.Contains(line, "is forbidden: User") {
				t.Errorf("the operator was refused: %s", line)
			}
		}
		now, err := c.Client.CoreV1().Pods(operatorNS).Get(ctx, op.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rc := now.Status.ContainerStatuses[0].RestartCount; rc != 0 {
			t.Errorf("the operator restarted %d times", rc)
		}
	})
}

// deploymentImage is the image and namespace of config/default's
// Deployment.
func deploymentImage(t *testing.T, objs []*unstructured.Unstructured) (string, string) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		if len(containers) == 1 {
			if img, ok := containers[0].(map[string]any)["image"].(string); ok {
				return img, o.GetNamespace()
			}
		}
	}
	t.Fatal("config/default renders no Deployment with one container")
	return "", ""
}

// apply applies the objects as the installing administrator, namespaces
// first.
func apply(ctx context.Context, t *testing.T, c *cluster.Cluster, objs []*unstructured.Unstructured) {
	t.Helper()
	var nsDocs, docs []string
	for _, o := range objs {
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		if o.GetKind() == "Namespace" {
			nsDocs = append(nsDocs, string(data))
		} else {
			docs = append(docs, string(data))
		}
	}
	for i, part := range [][]string{nsDocs, docs} {
		file := filepath.Join(binDir, fmt.Sprintf("deploy-%d.yaml", i))
		if err := os.WriteFile(file, []byte(strings.Join(part, "---\n")), 0o600); err != nil {
			t.Fatal(err)
		}
		eventually(ctx, t, "apply config/default", func(ctx context.Context) error {
			_, err := c.Kubectl(ctx, "apply", "--server-side", "--force-conflicts", "--field-manager=drastack-install", "-f", file)
			return err
		})
	}
}

// undeploy deletes the operator's Deployment (and waits for its pod to
// go); the identity, RBAC and webhook stay, as other suites install them
// again anyway.
func undeploy(ctx context.Context, t *testing.T, c *cluster.Cluster, objs []*unstructured.Unstructured, ns string) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "Deployment" {
			_ = c.Client.AppsV1().Deployments(ns).Delete(ctx, o.GetName(), metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
		}
	}
	eventually(ctx, t, "the operator's pods gone", func(ctx context.Context) error {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: operatorPods})
		if err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d left", len(pods.Items))
		}
		return nil
	})
}

// waitOperatorPod waits until the operator's one pod is Ready.
func waitOperatorPod(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	eventually(ctx, t, "the operator's pod Ready", func(ctx context.Context) error {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: operatorPods})
		if err != nil {
			return err
		}
		if len(pods.Items) != 1 {
			return fmt.Errorf("%d pods", len(pods.Items))
		}
		pod = &pods.Items[0]
		if !running(pod) {
			return fmt.Errorf("phase %s, conditions %v, statuses %v", pod.Status.Phase, pod.Status.Conditions, pod.Status.ContainerStatuses)
		}
		return nil
	})
	return pod
}

// cordon marks a node (un)schedulable.
func cordon(ctx context.Context, t *testing.T, c *cluster.Cluster, node string, on bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}
