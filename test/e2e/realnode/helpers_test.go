//go:build e2e

package realnode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/exampleplugin"
	"github.com/drastack/drastack/internal/operator"
	"github.com/drastack/drastack/test/cluster"
	"github.com/drastack/drastack/test/operatorrun"
)

const (
	poll    = 250 * time.Millisecond
	timeout = 2 * time.Minute
)

// crClient is a controller-runtime client of the cluster as
// administrator, for the DRAStack.
func crClient(t *testing.T, c *cluster.Cluster) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	crc, err := client.New(c.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return crc
}

// eventually polls cond until it holds or timeout passes, then fails the
// test with what, and the last error cond returned.
func eventually(ctx context.Context, t *testing.T, what string, cond func(ctx context.Context) error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(ctx, poll, timeout, true, func(ctx context.Context) (bool, error) {
		last = cond(ctx)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("%s: %v (last: %v)", what, err, last)
	}
}

// startOperator runs the operator in this process as deployed: the
// ServiceAccount and RBAC of config/default, through a token, never as an
// administrator; its pod and claim webhooks registered by URL on a free
// port of 127.0.0.1. The returned stop fails the test if the API server
// refused any request of the operator.
func startOperator(ctx context.Context, t *testing.T, c *cluster.Cluster, probeNS string) func() {
	t.Helper()
	id, err := c.DeployOperatorIdentity(ctx, deployDir)
	if err != nil {
		t.Fatal(err)
	}
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeployWebhookByURL(ctx, deployDir, fmt.Sprintf("https://127.0.0.1:%d", port)); err != nil {
		t.Fatal(err)
	}
	stop, err := operatorrun.Start(ctx, id, operator.Options{
		MetricsAddr: "0", ProbeAddr: "0", ProbeNamespace: probeNS,
		WebhookPort: port, WebhookHost: "127.0.0.1",
		ClaimStatusInterval: 500 * time.Millisecond,
		ShutdownTimeout:     10 * time.Second,
		SkipNameValidation:  true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}
}

// namespace creates a namespace and waits for its default ServiceAccount
// (the cluster of this suite runs the ServiceAccount admission plugin,
// which refuses pods until it exists); cleanup deletes it.
func namespace(ctx context.Context, t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
	})
	eventually(ctx, t, "default ServiceAccount of "+name, func(ctx context.Context) error {
		_, err := c.Client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// writeStack changes the DRAStack spec, creating the DRAStack if needed.
func writeStack(ctx context.Context, t *testing.T, crc client.Client, change func(*v1alpha1.DRAStackSpec)) {
	t.Helper()
	eventually(ctx, t, "write the DRAStack", func(ctx context.Context) error {
		var st v1alpha1.DRAStack
		err := crc.Get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, &st)
		if apierrors.IsNotFound(err) {
			st = v1alpha1.DRAStack{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DRAStackName}}
			change(&st.Spec)
			return crc.Create(ctx, &st)
		}
		if err != nil {
			return err
		}
		change(&st.Spec)
		return crc.Update(ctx, &st)
	})
}

// deleteStack deletes the DRAStack and waits until it is gone (its
// finalizers remove the drivers first).
func deleteStack(ctx context.Context, t *testing.T, crc client.Client) {
	t.Helper()
	st := &v1alpha1.DRAStack{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DRAStackName}}
	if err := crc.Delete(ctx, st); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	eventually(ctx, t, "the DRAStack gone", func(ctx context.Context) error {
		err := crc.Get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, st)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("still there: drivers %s", driverSummary(st.Status.Drivers))
	})
}

func driverSummary(ds []v1alpha1.DriverStatus) string {
	var parts []string
	for _, d := range ds {
		s := fmt.Sprintf("%s %s %q", d.Name, d.Reason, d.Message)
		if d.Removal != nil {
			s += fmt.Sprintf(" removal %s blocking %v", d.Removal.Phase, d.Removal.BlockingClaims)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// waitDriver waits until the status of a driver satisfies ok (it is nil
// when the driver has no status entry), and returns it.
func waitDriver(ctx context.Context, t *testing.T, crc client.Client, name, what string, ok func(*v1alpha1.DriverStatus) bool) *v1alpha1.DriverStatus {
	t.Helper()
	var got *v1alpha1.DriverStatus
	eventually(ctx, t, "driver "+name+": "+what, func(ctx context.Context) error {
		var st v1alpha1.DRAStack
		if err := crc.Get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, &st); err != nil {
			return err
		}
		got = nil
		for i := range st.Status.Drivers {
			if st.Status.Drivers[i].Name == name {
				got = &st.Status.Drivers[i]
			}
		}
		if !ok(got) {
			return fmt.Errorf("drivers: %s", driverSummary(st.Status.Drivers))
		}
		return nil
	})
	return got
}

// readyAt reports a driver Ready with its plugin on the real node and
// publishing, at version.
func readyAt(version string) func(*v1alpha1.DriverStatus) bool {
	return func(d *v1alpha1.DriverStatus) bool {
		return d != nil && d.Ready && d.Reason == "Ready" && d.Version == version && d.NodesDesired == 1 &&
			d.NodesUpdated == 1 && d.NodesPublishing == 1 && d.Removal == nil
	}
}

// printDevices is the command of a test container: one line per
// DRASTACK_DEVICE_ variable, a marker, then every device record mounted
// into it; then it sleeps for the given seconds (0: it exits).
func printDevices(sleep int) []string {
	return []string{"sh", "-c", fmt.Sprintf("env | grep ^DRASTACK_DEVICE_ | sort; echo %s; cat /var/run/drastack/*/*.json; sleep %d", recordsMarker, sleep)}
}

const recordsMarker = "--- device records ---"

// podWithClaim is a pod on the real node with one claim from a template,
// printing its devices.
func podWithClaim(ns, name, template string, sleep int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			NodeSelector:                  map[string]string{cluster.KwokTypeLabel: cluster.RealNodeTypeValue},
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			ResourceClaims:                []corev1.PodResourceClaim{{Name: "devices", ResourceClaimTemplateName: &template}},
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           cluster.BusyboxImage,
				ImagePullPolicy: corev1.PullNever,
				Command:         printDevices(sleep),
				Resources:       corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "devices"}}},
			}},
		},
	}
}

// template creates a ResourceClaimTemplate asking for count devices of a
// class that satisfy a CEL selector, with annotations on its claims.
func template(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name, class string, count int64, selector string, annotations map[string]string) {
	t.Helper()
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Annotations: annotations},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "dev",
				Exactly: &resourceapi.ExactDeviceRequest{
					DeviceClassName: class,
					AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
					Count:           count,
					Selectors:       []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}},
				},
			}}}},
		},
	}
	if _, err := c.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitPod waits until the pod satisfies ok and returns it.
func waitPod(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	eventually(ctx, t, "pod "+ns+"/"+name+" "+what, func(ctx context.Context) error {
		var err error
		pod, err = c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !ok(pod) {
			return fmt.Errorf("phase %s on %q, conditions %v, container statuses %v", pod.Status.Phase, pod.Spec.NodeName, pod.Status.Conditions, pod.Status.ContainerStatuses)
		}
		return nil
	})
	return pod
}

func running(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].Ready
}

func succeeded(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded }

// podClaim returns the claim the pod's "devices" entry got.
func podClaim(ctx context.Context, t *testing.T, c *cluster.Cluster, pod *corev1.Pod) *resourceapi.ResourceClaim {
	t.Helper()
	var name string
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.Name == "devices" && s.ResourceClaimName != nil {
			name = *s.ResourceClaimName
		}
	}
	if name == "" {
		t.Fatalf("pod %s/%s has no claim yet: %+v", pod.Namespace, pod.Name, pod.Status.ResourceClaimStatuses)
	}
	claim, err := c.Client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if claim.Status.Allocation == nil {
		t.Fatalf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
	}
	return claim
}

// seen is what a container printed about its devices.
type seen struct {
	// Env are the values of its DRASTACK_DEVICE_ variables
	// (driver/pool/device), sorted.
	Env []string
	// Records are the device records mounted into it.
	Records []exampleplugin.DeviceRecord
}

// containerSaw reads the log of a container that ran printDevices.
func containerSaw(ctx context.Context, t *testing.T, c *cluster.Cluster, pod *corev1.Pod) seen {
	t.Helper()
	var out seen
	eventually(ctx, t, "the device report of pod "+pod.Name, func(ctx context.Context) error {
		raw, err := c.Client.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return err
		}
		envPart, recPart, ok := strings.Cut(string(raw), recordsMarker+"\n")
		if !ok {
			return fmt.Errorf("no %q in the log yet: %q", recordsMarker, raw)
		}
		out = seen{}
		for _, line := range strings.Split(strings.TrimSpace(envPart), "\n") {
			if _, v, ok := strings.Cut(line, "="); ok {
				out.Env = append(out.Env, v)
			}
		}
		sort.Strings(out.Env)
		dec := json.NewDecoder(bytes.NewReader([]byte(recPart)))
		for {
			var r exampleplugin.DeviceRecord
			if err := dec.Decode(&r); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return fmt.Errorf("device records: %w in %q", err, recPart)
			}
			out.Records = append(out.Records, r)
		}
		return nil
	})
	return out
}

// allocatedDevices are the claim's devices of a driver, as
// driver/pool/device, sorted.
func allocatedDevices(claim *resourceapi.ResourceClaim, driverName string) []string {
	var out []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver == driverName {
			out = append(out, r.Driver+"/"+r.Pool+"/"+r.Device)
		}
	}
	sort.Strings(out)
	return out
}

// checkSawExactly fails unless the container saw exactly the claim's
// devices of driverName, each through its variable and its record, and
// every record names this claim.
func checkSawExactly(t *testing.T, s seen, claim *resourceapi.ResourceClaim, driverName string) {
	t.Helper()
	want := allocatedDevices(claim, driverName)
	if len(want) == 0 {
		t.Fatalf("claim %s has no device of %s: %+v", claim.Name, driverName, claim.Status.Allocation.Devices.Results)
	}
	if !slices.Equal(s.Env, want) {
		t.Errorf("the container's variables name %v, the claim's allocation %v", s.Env, want)
	}
	var fromRecords []string
	for _, r := range s.Records {
		fromRecords = append(fromRecords, r.Driver+"/"+r.Pool+"/"+r.Device)
		if r.ClaimUID != claim.UID || r.Claim != claim.Name || r.Namespace != claim.Namespace {
			t.Errorf("record of %s names claim %s/%s (%s), want %s/%s (%s)", r.Device, r.Namespace, r.Claim, r.ClaimUID, claim.Namespace, claim.Name, claim.UID)
		}
	}
	sort.Strings(fromRecords)
	if !slices.Equal(fromRecords, want) {
		t.Errorf("the container's device records name %v, the claim's allocation %v", fromRecords, want)
	}
}

// cdiSpecExists reports whether the node holds the CDI spec of a claim.
func cdiSpecExists(n *cluster.RealNode, driverName string, claim types.UID) bool {
	_, err := os.Stat(filepath.Join(n.CDIDir, exampleplugin.CDISpecFile(driverName, claim)))
	return err == nil
}

// deletePod deletes a pod and waits until it is gone.
func deletePod(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name string) {
	t.Helper()
	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	eventually(ctx, t, "pod "+ns+"/"+name+" gone", func(ctx context.Context) error {
		_, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return errors.New("still there")
	})
}

// waitEvent waits for an Event with reason about the named object of a
// namespace, and returns its note.
func waitEvent(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, regarding, reason string) string {
	t.Helper()
	var note string
	eventually(ctx, t, fmt.Sprintf("a %s Event about %s/%s", reason, ns, regarding), func(ctx context.Context) error {
		evs, err := c.Client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Reason == reason && e.Regarding.Name == regarding {
				note = e.Note
				return nil
			}
		}
		return errors.New("none yet")
	})
	return note
}
