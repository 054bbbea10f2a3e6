//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/driver"
	"github.com/drastack/drastack/internal/operator"
	"github.com/drastack/drastack/test/cluster"
)

// drvTimeout bounds each wait of the driver suite. Removal and rollouts
// take seconds here; the rest absorbs a busy 2-core machine.
const drvTimeout = 2 * time.Minute

// startDriverOperator runs the operator with short publish grace and
// rollout timeout, so "not publishing" and "stalled" show within seconds.
func drvStartOperator(ctx context.Context, t *testing.T, c *cluster.Cluster, probeNamespace string) func() {
	t.Helper()
	return startOperator(ctx, t, c, operator.Options{
		MetricsAddr: "0", ProbeAddr: "0", ProbeNamespace: probeNamespace,
		DriverPublishGrace:   3 * time.Second,
		DriverRolloutTimeout: 8 * time.Second,
	})
}

// setDrivers writes DRAStack spec.drivers, creating the DRAStack when there
// is none.
func drvSetDrivers(ctx context.Context, t *testing.T, crc client.Client, drivers []v1alpha1.DriverSpec) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, pollInterval, drvTimeout, true, func(ctx context.Context) (bool, error) {
		var st v1alpha1.DRAStack
		err := crc.Get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, &st)
		if apierrors.IsNotFound(err) {
			st = v1alpha1.DRAStack{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DRAStackName}, Spec: v1alpha1.DRAStackSpec{Drivers: drivers}}
			if err := crc.Create(ctx, &st); err != nil {
				t.Logf("create DRAStack: %v", err)
				return false, nil
			}
			return true, nil
		}
		if err != nil {
			return false, nil //nolint:nilerr // retried
		}
		if st.DeletionTimestamp != nil {
			return false, nil
		}
		st.Spec.Drivers = drivers
		if err := crc.Update(ctx, &st); err != nil {
			t.Logf("update DRAStack: %v", err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("write DRAStack spec.drivers: %v", err)
	}
}

// waitStack polls the DRAStack until ok accepts it and returns it; on
// timeout it fails with the last status seen.
func drvWaitStack(ctx context.Context, t *testing.T, crc client.Client, what string, ok func(*v1alpha1.DRAStack) bool) *v1alpha1.DRAStack {
	t.Helper()
	var last *v1alpha1.DRAStack
	seen := ""
	err := wait.PollUntilContextTimeout(ctx, pollInterval, drvTimeout, true, func(ctx context.Context) (bool, error) {
		var st v1alpha1.DRAStack
		if err := crc.Get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, &st); err != nil {
			return false, nil //nolint:nilerr // retried
		}
		last = &st
		// Log each driver state on the way, to tell the story of a wait.
		for _, d := range st.Status.Drivers {
			line := fmt.Sprintf("%s: %s (%d/%d ready, %d updated, %d publishing): %s", d.Name, d.Reason, d.NodesReady, d.NodesDesired, d.NodesUpdated, d.NodesPublishing, d.Message)
			if !strings.Contains(seen, line+"\n") {
				seen += line + "\n"
				t.Logf("status: %s", line)
			}
		}
		return ok(&st), nil
	})
	if err != nil {
		t.Fatalf("DRAStack never showed %s: %v\n%s", what, err, drvDescribeStack(last))
	}
	return last
}

// describeStack prints the driver part of a DRAStack status for failures.
func drvDescribeStack(st *v1alpha1.DRAStack) string {
	if st == nil {
		return "no DRAStack"
	}
	var b strings.Builder
	for _, c := range st.Status.Conditions {
		fmt.Fprintf(&b, "condition %s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	for _, d := range st.Status.Drivers {
		fmt.Fprintf(&b, "driver %s ready=%v reason=%s desired=%d ready=%d updated=%d publishing=%d image=%s removal=%+v: %s\n",
			d.Name, d.Ready, d.Reason, d.NodesDesired, d.NodesReady, d.NodesUpdated, d.NodesPublishing, d.Image, d.Removal, d.Message)
	}
	return b.String()
}

// driverStatus returns a driver's entry of the status, or nil.
func drvStatus(st *v1alpha1.DRAStack, name string) *v1alpha1.DriverStatus {
	for i := range st.Status.Drivers {
		if st.Status.Drivers[i].Name == name {
			return &st.Status.Drivers[i]
		}
	}
	return nil
}

// condition returns the status, reason and message of a condition.
func drvCondition(st *v1alpha1.DRAStack, typ string) (metav1.ConditionStatus, string, string) {
	c := meta.FindStatusCondition(st.Status.Conditions, typ)
	if c == nil {
		return "", "", ""
	}
	return c.Status, c.Reason, c.Message
}

// pluginClient acts as the kubelet plugin of a driver on node, as its
// service account token would: user system:serviceaccount:<ns>:<sa> with
// the node name the token binds. An empty node acts without one.
func drvPluginClient(t *testing.T, c *cluster.Cluster, namespace, driverName, node string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + namespace + ":" + driver.ObjectName(driverName, "kubelet-plugin"),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
	if node != "" {
		cfg.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {node}}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// garbageCollectorClient acts as kube-controller-manager's garbage
// collector, the one identity besides the operator that the operator's
// admission policy lets delete a central DeviceTaintRule (an administrator
// is refused): tests that take a rule away do it as the collector does.
func garbageCollectorClient(t *testing.T, c *cluster.Cluster) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:kube-system:generic-garbage-collector",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"},
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// nodeSlice is the ResourceSlice a kubelet plugin publishes for its node:
// one pool named after the node with the given number of GPUs.
func drvNodeSlice(driverName, node string, gpus int) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + driver.NamePrefix(driverName)},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   driverName,
			NodeName: ptr.To(node),
			Pool:     resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
		},
	}
	for i := 0; i < gpus; i++ {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: fmt.Sprintf("gpu-%d", i)})
	}
	return s
}

// publishAsPlugin creates a node's slice the way its kubelet plugin would,
// through the admission policy. kwok pods run no code, so the test plays
// the plugin's part.
func drvPublish(ctx context.Context, t *testing.T, c *cluster.Cluster, namespace, driverName string, nodes ...string) {
	t.Helper()
	for _, node := range nodes {
		pc := drvPluginClient(t, c, namespace, driverName, node)
		err := wait.PollUntilContextTimeout(ctx, pollInterval, drvTimeout, true, func(ctx context.Context) (bool, error) {
			_, err := pc.ResourceV1().ResourceSlices().Create(ctx, drvNodeSlice(driverName, node, 4), metav1.CreateOptions{})
			if err == nil || apierrors.IsAlreadyExists(err) {
				return true, nil
			}
			// RBAC and the policy arrive with the driver; until then the
			// plugin would retry too.
			t.Logf("publish for %s as its plugin: %v", node, err)
			return false, nil
		})
		if err != nil {
			t.Fatalf("publish the slice of %s as the plugin: %v", node, err)
		}
	}
}

// driverSlices lists the slices of a driver name.
func drvSlices(ctx context.Context, t *testing.T, c *cluster.Cluster, driverName string) []resourceapi.ResourceSlice {
	t.Helper()
	sel := fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorDriver, driverName).String()
	list, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatalf("list slices: %v", err)
	}
	return list.Items
}

// pluginPods returns the running plugin pods of a driver by node.
func drvPluginPods(ctx context.Context, t *testing.T, c *cluster.Cluster, namespace, driverName string) map[string]corev1.Pod {
	t.Helper()
	sel := fmt.Sprintf("%s=%s,%s=%s", driver.LabelDriver, driverName, driver.LabelComponent, driver.ComponentKubeletPlugin)
	list, err := c.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatalf("list plugin pods: %v", err)
	}
	out := map[string]corev1.Pod{}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
			out[p.Spec.NodeName] = p
		}
	}
	return out
}

// failPod makes a running pod's container fail the way a kubelet reports
// it: not ready, waiting with reason. kwok only moves Pending pods to
// Running, so it leaves the failure in place.
func drvFailPod(ctx context.Context, t *testing.T, c *cluster.Cluster, pod corev1.Pod, reason string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, pollInterval, drvTimeout, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Status.Phase != corev1.PodRunning {
			return false, nil // kwok has not started it yet
		}
		now := metav1.Now()
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == corev1.PodReady || p.Status.Conditions[i].Type == corev1.ContainersReady {
				p.Status.Conditions[i].Status = corev1.ConditionFalse
				p.Status.Conditions[i].LastTransitionTime = now
			}
		}
		for i := range p.Status.ContainerStatuses {
			cs := &p.Status.ContainerStatuses[i]
			cs.Ready, cs.Started = false, ptr.To(false)
			cs.RestartCount = 3
			cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "e2e: " + reason}}
		}
		if _, err := c.Client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Logf("fail pod %s: %v", p.Name, err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("make pod %s fail: %v", pod.Name, err)
	}
}

// waitGone waits until get reports NotFound.
func drvWaitGone(ctx context.Context, t *testing.T, what string, get func(context.Context) error) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, pollInterval, drvTimeout, true, func(ctx context.Context) (bool, error) {
		err := get(ctx)
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("%s still exists: %v", what, err)
	}
}

// daemonSet gets a DaemonSet.
func drvDaemonSet(ctx context.Context, c *cluster.Cluster, namespace, name string) (*appsv1.DaemonSet, error) {
	return c.Client.AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
}

// claimTemplate is a template for one device of a class.
func drvClaimTemplate(ns, name, class string) *resourceapi.ResourceClaimTemplate {
	return &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}},
		}}},
	}
}

// deleteDriverPods deletes pods of the suite's namespace and waits until
// they and their claims are gone.
func drvDeletePods(ctx context.Context, t *testing.T, c *cluster.Cluster, names ...string) {
	t.Helper()
	var claims []string
	for _, name := range names {
		if p, err := c.Client.CoreV1().Pods(drvNamespace).Get(ctx, name, metav1.GetOptions{}); err == nil {
			for _, st := range p.Status.ResourceClaimStatuses {
				if st.ResourceClaimName != nil {
					claims = append(claims, *st.ResourceClaimName)
				}
			}
		}
		if err := c.Client.CoreV1().Pods(drvNamespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("delete pod %s: %v", name, err)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, pollInterval, drvTimeout, true, func(ctx context.Context) (bool, error) {
		for _, name := range names {
			if _, err := c.Client.CoreV1().Pods(drvNamespace).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		for _, name := range claims {
			if _, err := c.Client.ResourceV1().ResourceClaims(drvNamespace).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("pods %v or their claims %v still there: %v", names, claims, err)
	}
}
