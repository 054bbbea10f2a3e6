//go:build e2e

package e2e

import (
	"context"
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
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/drastack/drastack/internal/operator"
	"github.com/drastack/drastack/test/cluster"
)

// pollInterval and podTimeout bound the waits of the suite. Scheduling a
// pod with a claim takes about a second here; the timeout only has to
// absorb a busy machine.
const (
	pollInterval = 250 * time.Millisecond
	podTimeout   = 90 * time.Second
)

// mustCluster returns the suite's cluster or stops the test.
func mustCluster(ctx context.Context, t *testing.T) *cluster.Cluster {
	t.Helper()
	c := cluster.FromContext(ctx)
	if c == nil {
		t.Fatal("no local cluster in the context: TestMain must use cluster.Setup")
	}
	return c
}

// createNamespace creates a namespace for one feature.
func createNamespace(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// prepareFeature installs the CRDs, creates the feature's namespace and
// nodes, and returns a client that knows the operator's types.
func prepareFeature(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string, nodes ...cluster.NodeSpec) client.Client {
	t.Helper()
	if err := c.InstallCRDs(CRDDir); err != nil {
		t.Fatal(err)
	}
	createNamespace(ctx, t, c.Client, ns)
	if len(nodes) > 0 {
		if err := c.AddNodes(ctx, nodes...); err != nil {
			t.Fatal(err)
		}
	}
	crc, err := client.New(c.Config, client.Options{Scheme: operator.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return crc
}

// createAllocatedClaim creates a claim for one device of class driver and
// writes its allocation to device driver/pool/device, as an allocator
// would (no pod runs: the pool and driver controllers only read
// allocations).
func createAllocatedClaim(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name, driver, pool, device string) *resourceapi.ResourceClaim {
	t.Helper()
	cl := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "r", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: driver},
		}}}},
	}
	cl, err := c.Client.ResourceV1().ResourceClaims(ns).Create(ctx, cl, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cl.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "r", Driver: driver, Pool: pool, Device: device,
	}}}}
	if cl, err = c.Client.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, cl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return cl
}

// waitPodRunning waits for a pod to run and returns it; on timeout it
// fails the test with the pod's conditions, its claims and the
// scheduler's last log lines.
func waitPodRunning(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, pollInterval, podTimeout, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // keep polling through transient errors
		}
		pod = p
		return p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s not Running: %v\n%s", ns, name, err, diagnose(ctx, c, ns, pod))
	}
	return pod
}

// diagnose gathers what explains a pod that does not run.
func diagnose(ctx context.Context, c *cluster.Cluster, ns string, pod *corev1.Pod) string {
	var b strings.Builder
	if pod != nil {
		fmt.Fprintf(&b, "pod phase %s, node %q\n", pod.Status.Phase, pod.Spec.NodeName)
		for _, cond := range pod.Status.Conditions {
			fmt.Fprintf(&b, "  condition %s=%s %s: %s\n", cond.Type, cond.Status, cond.Reason, cond.Message)
		}
	}
	if claims, err := c.Client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, cl := range claims.Items {
			fmt.Fprintf(&b, "claim %s allocated=%v reservedFor=%d\n", cl.Name, cl.Status.Allocation != nil, len(cl.Status.ReservedFor))
		}
	}
	if err := c.Healthy(); err != nil {
		fmt.Fprintf(&b, "unhealthy component: %v\n", err)
	}
	if data, err := os.ReadFile(filepath.Join(c.LogDir, "kube-scheduler.log")); err == nil {
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		fmt.Fprintf(&b, "kube-scheduler.log (last lines):\n%s\n", strings.Join(lines[max(0, len(lines)-20):], "\n"))
	}
	return b.String()
}

// allocatedDevices returns "driver/pool/device" of every device allocated
// to the pod's claims; it fails the test when a claim is not allocated to
// and reserved for the pod.
func allocatedDevices(ctx context.Context, t *testing.T, client kubernetes.Interface, pod *corev1.Pod) []resourceapi.DeviceRequestAllocationResult {
	t.Helper()
	var results []resourceapi.DeviceRequestAllocationResult
	if len(pod.Status.ResourceClaimStatuses) == 0 {
		t.Fatalf("pod %s has no resource claim statuses", pod.Name)
	}
	for _, st := range pod.Status.ResourceClaimStatuses {
		if st.ResourceClaimName == nil {
			t.Fatalf("pod %s: claim %s has no generated name", pod.Name, st.Name)
		}
		claim, err := client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *st.ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get claim %s: %v", *st.ResourceClaimName, err)
		}
		if claim.Status.Allocation == nil {
			t.Fatalf("claim %s is not allocated", claim.Name)
		}
		reserved := false
		for _, r := range claim.Status.ReservedFor {
			reserved = reserved || r.UID == pod.UID
		}
		if !reserved {
			t.Errorf("claim %s is not reserved for pod %s", claim.Name, pod.Name)
		}
		results = append(results, claim.Status.Allocation.Devices.Results...)
	}
	return results
}

// claimPod is a pod that uses one claim made from template.
func claimPod(ns, name, template string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:      "main",
				Image:     "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "devices"}}},
			}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "devices", ResourceClaimTemplateName: &template}},
		},
	}
}

// deviceClass selects the devices of one driver, optionally narrowed by a
// CEL expression.
func deviceClass(name, driver, extra string) *resourceapi.DeviceClass {
	expr := fmt.Sprintf("device.driver == %q", driver)
	if extra != "" {
		expr += " && " + extra
	}
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}},
	}
}
