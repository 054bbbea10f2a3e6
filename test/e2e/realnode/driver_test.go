//go:build e2e

package realnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/allocator"
	claimsctrl "github.com/drastack/drastack/internal/controller/claims"
	driverctrl "github.com/drastack/drastack/internal/controller/driver"
	"github.com/drastack/drastack/internal/driver"
	"github.com/drastack/drastack/test/cluster"
)

// Two example drivers run on the real node, both drastack's plugin: one
// kube-scheduler allocates from, removed with Drain; one whose devices
// are central (only the operator allocates them), removed with Force.
const (
	schedDriver   = "gpu.example.com"
	centralDriver = "gpu.central.example.com"
	// centralClass is the DeviceClass of the central entry: the operator
	// creates it, and claims with CEL constraints must name it.
	centralClass = "central-gpu.example.com"
	driverNS     = "realnode-driver"
	// mig1g5gb selects the smallest MIG-like partitions of a driver.
	mig1g5gb = `device.attributes["%s"].?profile.orValue("") == "1g.5gb"`
)

// exampleVersion is the tag of driver.ExampleImage.
var exampleVersion = driver.ExampleImage[strings.LastIndex(driver.ExampleImage, ":")+1:]

// upgradeVersion is the tag of upgradeImage.
var upgradeVersion = upgradeImage[strings.LastIndex(upgradeImage, ":")+1:]

func driverSpec(name string, policy v1alpha1.RemovalPolicy) v1alpha1.DriverSpec {
	return v1alpha1.DriverSpec{
		Name:          name,
		Profile:       v1alpha1.DriverProfileExample,
		NodeSelector:  map[string]string{cluster.KwokTypeLabel: cluster.RealNodeTypeValue},
		RemovalPolicy: policy,
	}
}

// adjacentPair is the CEL constraint of the operator's claim: two MIG
// partitions of one GPU on neighbouring memory slices (KEP-5254), which
// kube-scheduler cannot express.
func adjacentPair(d string) string {
	a := func(i int, attr string) string { return fmt.Sprintf("devices[%d].attributes['%s'].%s", i, d, attr) }
	return fmt.Sprintf(`[{"requests": ["dev"], "expression": "size(devices) == 2 && %s == %s && (%s - %s == 1 || %s - %s == 1)"}]`,
		a(0, "parentUUID"), a(1, "parentUUID"), a(0, "placementStart"), a(1, "placementStart"), a(1, "placementStart"), a(0, "placementStart"))
}

// TestDriverOnTheRealNode installs the example driver from the DRAStack
// onto the real node and follows it: Ready as the operator defines it,
// pods of kube-scheduler and of the operator that see exactly their
// devices, unprepare when pods end, an upgrade under a prepared claim,
// a Drain removal that waits for the claim, and a Force removal that says
// what it left.
func TestDriverOnTheRealNode(t *testing.T) {
	c, n := realNode(t)
	ctx := context.Background()
	crc := crClient(t, c)
	namespace(ctx, t, c, driverNS)
	stop := startOperator(ctx, t, c, driverNS)
	defer stop()
	defer deleteStack(ctx, t, crc)

	writeStack(ctx, t, crc, func(s *v1alpha1.DRAStackSpec) {
		s.Drivers = []v1alpha1.DriverSpec{driverSpec(schedDriver, v1alpha1.RemovalPolicyDrain), driverSpec(centralDriver, v1alpha1.RemovalPolicyForce)}
		s.Claims = v1alpha1.ClaimsSpec{GatePods: ptr.To(true), Central: []v1alpha1.CentralDevices{{Driver: centralDriver, Classes: []string{centralClass}}}}
	})

	var holder *corev1.Pod // kube-scheduler's pod that holds a claim through the upgrade and the Drain
	var holderClaim *resourceapi.ResourceClaim
	var centralHolder *corev1.Pod // the operator's pod that holds a claim through the Force removal
	var centralClaim *resourceapi.ResourceClaim

	t.Run("install: plugins registered and publishing on the real node", func(t *testing.T) {
		begin := time.Now()
		for _, d := range []string{schedDriver, centralDriver} {
			waitDriver(ctx, t, crc, d, "Ready on the real node at "+exampleVersion, readyAt(exampleVersion))
		}
		t.Logf("timing: both drivers Ready %s after the DRAStack", time.Since(begin).Round(100*time.Millisecond))
		for _, d := range []string{schedDriver, centralDriver} {
			slices := nodeSlices(ctx, t, c, d)
			devices := 0
			for _, s := range slices {
				if s.Spec.NodeName == nil || *s.Spec.NodeName != n.Name || s.Spec.Pool.Name != n.Name {
					t.Errorf("slice %s of %s is not the real node's pool", s.Name, d)
				}
				devices += len(s.Spec.Devices)
			}
			// The profile's 8 GPUs, each whole and in 25 MIG-like placements.
			if devices != 8*26 {
				t.Errorf("%s publishes %d devices on %s, want %d", d, devices, n.Name, 8*26)
			}
		}
		// The kubelet registered both plugins through its registry.
		regs, err := os.ReadDir(filepath.Join(n.KubeletDir, "plugins_registry"))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range regs {
			names = append(names, r.Name())
		}
		for _, d := range []string{schedDriver, centralDriver} {
			if !slices.ContainsFunc(names, func(s string) bool { return strings.HasPrefix(s, d+"-") }) {
				t.Errorf("no registration socket of %s in the kubelet's plugin registry: %v", d, names)
			}
		}
	})

	t.Run("a pod kube-scheduler placed sees exactly its devices", func(t *testing.T) {
		template(ctx, t, c, driverNS, "two-migs", schedDriver, 2, fmt.Sprintf(mig1g5gb, schedDriver), nil)
		pod, err := c.Client.CoreV1().Pods(driverNS).Create(ctx, podWithClaim(driverNS, "sched-reader", "two-migs", 3600), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod = waitPod(ctx, t, c, driverNS, pod.Name, "running on the real node", running)
		if pod.Spec.NodeName != n.Name {
			t.Fatalf("pod on %s, want %s", pod.Spec.NodeName, n.Name)
		}
		claim := podClaim(ctx, t, c, pod)
		checkSawExactly(t, containerSaw(ctx, t, c, pod), claim, schedDriver)
		if !cdiSpecExists(n, schedDriver, claim.UID) {
			t.Error("no CDI spec of the running pod's claim on the node")
		}
		// kubectl exec reaches the container too, and sees the same.
		device := strings.TrimPrefix(allocatedDevices(claim, schedDriver)[0], schedDriver+"/"+n.Name+"/")
		out, err := c.Kubectl(ctx, "exec", "-n", driverNS, pod.Name, "--", "cat", "/var/run/drastack/"+schedDriver+"/"+device+".json")
		if err != nil || !strings.Contains(string(out), string(claim.UID)) {
			t.Errorf("kubectl exec: %v: %s", err, out)
		}
		// The plugin reports the health of each prepared device, which the
		// kubelet shows in the pod's status.
		waitPod(ctx, t, c, driverNS, pod.Name, "showing its devices Healthy", func(p *corev1.Pod) bool {
			var healthy int
			for _, st := range p.Status.ContainerStatuses {
				for _, r := range st.AllocatedResourcesStatus {
					for _, h := range r.Resources {
						if h.Health == corev1.ResourceHealthStatusHealthy && strings.Contains(string(h.ResourceID), string(claim.UID)) {
							healthy++
						}
					}
				}
			}
			return healthy == len(allocatedDevices(claim, schedDriver))
		})
		holder, holderClaim = pod, claim
	})

	t.Run("a pod the operator placed for its CEL constraint sees exactly its devices", func(t *testing.T) {
		template(ctx, t, c, driverNS, "adjacent-migs", centralClass, 2, fmt.Sprintf(mig1g5gb, centralDriver),
			map[string]string{allocator.CELConstraintsAnnotation: adjacentPair(centralDriver)})
		pod, err := c.Client.CoreV1().Pods(driverNS).Create(ctx, podWithClaim(driverNS, "central-reader", "adjacent-migs", 3600), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod = waitPod(ctx, t, c, driverNS, pod.Name, "running on the real node", running)
		claim := podClaim(ctx, t, c, pod)
		// The operator allocated it (kube-scheduler cannot: the devices
		// are tainted for it).
		t.Logf("operator: %s", waitEvent(ctx, t, c, driverNS, claim.Name, claimsctrl.EventAllocated))
		checkSawExactly(t, containerSaw(ctx, t, c, pod), claim, centralDriver)
		// The allocation satisfies the constraint: one GPU, neighbouring slices.
		attrs := deviceAttrs(ctx, t, c, centralDriver, allocatedDevices(claim, centralDriver))
		if len(attrs) != 2 || attrs[0]["parentUUID"] != attrs[1]["parentUUID"] ||
			absDiff(attrs[0]["placementStart"], attrs[1]["placementStart"]) != "1" {
			t.Errorf("the operator's allocation breaks the constraint: %v", attrs)
		}
		centralHolder, centralClaim = pod, claim
	})

	t.Run("unprepare when pods end", func(t *testing.T) {
		// A pod that ends on its own: the kubelet unprepares its claim.
		pod, err := c.Client.CoreV1().Pods(driverNS).Create(ctx, podWithClaim(driverNS, "sched-once", "two-migs", 0), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waitPod(ctx, t, c, driverNS, pod.Name, "Succeeded", succeeded)
		s := containerSaw(ctx, t, c, pod)
		if len(s.Records) != 2 {
			t.Fatalf("the pod saw %d device records, want 2", len(s.Records))
		}
		uid := s.Records[0].ClaimUID
		eventually(ctx, t, "the finished pod's CDI spec removed", func(context.Context) error {
			if cdiSpecExists(n, schedDriver, uid) {
				return errors.New("still on the node")
			}
			return nil
		})
		// A deleted pod: the same.
		deletePod(ctx, t, c, driverNS, "sched-once")
		deletePod(ctx, t, c, driverNS, holder.Name)
		eventually(ctx, t, "the deleted pod's CDI spec removed", func(context.Context) error {
			if cdiSpecExists(n, schedDriver, holderClaim.UID) {
				return errors.New("still on the node")
			}
			return nil
		})
		if recs, _ := os.ReadDir(filepath.Join(n.KubeletDir, "plugins", schedDriver, "claims")); len(recs) != 0 {
			t.Errorf("device records left for claims %v", recs)
		}
	})

	t.Run("upgrade while a pod holds a prepared claim", func(t *testing.T) {
		pod, err := c.Client.CoreV1().Pods(driverNS).Create(ctx, podWithClaim(driverNS, "sched-holder", "two-migs", 3600), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		holder = waitPod(ctx, t, c, driverNS, pod.Name, "running", running)
		holderClaim = podClaim(ctx, t, c, holder)
		oldPlugin := pluginPod(ctx, t, c, schedDriver)

		writeStack(ctx, t, crc, func(s *v1alpha1.DRAStackSpec) { s.Drivers[0].Image = upgradeImage })
		begin := time.Now()
		reasons := map[string]bool{}
		waitDriver(ctx, t, crc, schedDriver, "Ready at "+upgradeVersion, func(d *v1alpha1.DriverStatus) bool {
			if d != nil {
				reasons[d.Reason] = true
			}
			return readyAt(upgradeVersion)(d)
		})
		t.Logf("timing: upgrade rolled out in %s; reasons seen %v", time.Since(begin).Round(100*time.Millisecond), reasons)
		newPlugin := pluginPod(ctx, t, c, schedDriver)
		if newPlugin.UID == oldPlugin.UID || newPlugin.Spec.Containers[0].Image != upgradeImage {
			t.Errorf("the plugin pod was not replaced: %s %s", newPlugin.Name, newPlugin.Spec.Containers[0].Image)
		}
		now, err := c.Client.CoreV1().Pods(driverNS).Get(ctx, holder.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if now.UID != holder.UID || !running(now) || now.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("the pod holding a claim did not keep running through the upgrade: %s, restarts %d", now.Status.Phase, now.Status.ContainerStatuses[0].RestartCount)
		}
		if !cdiSpecExists(n, schedDriver, holderClaim.UID) {
			t.Error("the upgrade unprepared the held claim")
		}
		// New pods get devices from the new plugin.
		after, err := c.Client.CoreV1().Pods(driverNS).Create(ctx, podWithClaim(driverNS, "after-upgrade", "two-migs", 3600), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		after = waitPod(ctx, t, c, driverNS, after.Name, "running after the upgrade", running)
		checkSawExactly(t, containerSaw(ctx, t, c, after), podClaim(ctx, t, c, after), schedDriver)
		deletePod(ctx, t, c, driverNS, after.Name)
	})

	t.Run("Drain removal waits for the claim, then removes everything", func(t *testing.T) {
		writeStack(ctx, t, crc, func(s *v1alpha1.DRAStackSpec) {
			s.Drivers = slices.DeleteFunc(s.Drivers, func(d v1alpha1.DriverSpec) bool { return d.Name == schedDriver })
		})
		blocking := driverNS + "/" + holderClaim.Name
		waitDriver(ctx, t, crc, schedDriver, "Draining, blocked by "+blocking, func(d *v1alpha1.DriverStatus) bool {
			return d != nil && d.Removal != nil && d.Removal.Phase == "Draining" && slices.Contains(d.Removal.BlockingClaims, blocking)
		})
		// It keeps waiting: the plugin stays to unprepare the claim.
		for range 3 {
			time.Sleep(2 * time.Second)
			st := waitDriver(ctx, t, crc, schedDriver, "still Draining", func(d *v1alpha1.DriverStatus) bool { return d != nil && d.Removal != nil })
			if st.Removal.Phase != "Draining" {
				t.Fatalf("removal went on to %s while %s was allocated", st.Removal.Phase, blocking)
			}
		}
		if p := pluginPod(ctx, t, c, schedDriver); !running(p) {
			t.Errorf("the plugin is not running while the removal waits: %s", p.Status.Phase)
		}
		deletePod(ctx, t, c, driverNS, holder.Name)
		waitDriver(ctx, t, crc, schedDriver, "removed", func(d *v1alpha1.DriverStatus) bool { return d == nil })
		checkNothingLeft(ctx, t, c, schedDriver)
		if cdiSpecExists(n, schedDriver, holderClaim.UID) {
			t.Error("the drained claim's CDI spec is still on the node: the plugin went before unpreparing it")
		}
		eventually(ctx, t, "the plugin's registration gone from the kubelet", func(context.Context) error {
			regs, _ := filepath.Glob(filepath.Join(n.KubeletDir, "plugins_registry", schedDriver+"-*"))
			if len(regs) > 0 {
				return fmt.Errorf("left: %v", regs)
			}
			return nil
		})
	})

	t.Run("Force removal with a running pod reports what it left", func(t *testing.T) {
		if centralClaim == nil {
			t.Fatal("no central claim to hold through the removal: the CEL pod's subtest failed")
		}
		writeStack(ctx, t, crc, func(s *v1alpha1.DRAStackSpec) { s.Drivers = nil })
		claimRef := driverNS + "/" + centralClaim.Name
		eventually(ctx, t, "a ForceRemovalWithClaims Warning naming "+claimRef, func(ctx context.Context) error {
			evs, err := c.Client.EventsV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for _, e := range evs.Items {
				if e.Reason == driverctrl.ReasonForceRemovalWithClaims && e.Type == corev1.EventTypeWarning && strings.Contains(e.Note, claimRef) {
					t.Logf("event: %s", e.Note)
					return nil
				}
			}
			return errors.New("no such event yet")
		})
		waitDriver(ctx, t, crc, centralDriver, "removed", func(d *v1alpha1.DriverStatus) bool { return d == nil })
		checkNothingLeft(ctx, t, c, centralDriver)
		// What was left: the pod runs on, its claim stays allocated and
		// prepared, with no plugin left to unprepare it.
		now, err := c.Client.CoreV1().Pods(driverNS).Get(ctx, centralHolder.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if now.UID != centralHolder.UID || !running(now) {
			t.Errorf("the pod was not left running: %s", now.Status.Phase)
		}
		claim, err := c.Client.ResourceV1().ResourceClaims(driverNS).Get(ctx, centralClaim.Name, metav1.GetOptions{})
		if err != nil || claim.Status.Allocation == nil {
			t.Errorf("the claim was not left allocated: %v", err)
		}
		if !cdiSpecExists(n, centralDriver, centralClaim.UID) {
			t.Error("the claim's CDI spec is gone, though no plugin was left to unprepare it")
		}
		// The kubelet cannot unprepare it any more: delete the pod at once.
		_ = c.Client.CoreV1().Pods(driverNS).Delete(ctx, centralHolder.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
}

// nodeSlices lists the ResourceSlices of a driver.
func nodeSlices(ctx context.Context, t *testing.T, c *cluster.Cluster, driverName string) []resourceapi.ResourceSlice {
	t.Helper()
	list, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + driverName})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// deviceAttrs returns the driver-domain attributes of devices
// (driver/pool/device) as strings, in order.
func deviceAttrs(ctx context.Context, t *testing.T, c *cluster.Cluster, driverName string, devices []string) []map[string]string {
	t.Helper()
	byName := map[string]map[string]string{}
	for _, s := range nodeSlices(ctx, t, c, driverName) {
		for _, d := range s.Spec.Devices {
			attrs := map[string]string{}
			for k, v := range d.Attributes {
				switch {
				case v.StringValue != nil:
					attrs[string(k)] = *v.StringValue
				case v.IntValue != nil:
					attrs[string(k)] = fmt.Sprint(*v.IntValue)
				}
			}
			byName[driverName+"/"+s.Spec.Pool.Name+"/"+d.Name] = attrs
		}
	}
	out := make([]map[string]string, 0, len(devices))
	for _, d := range devices {
		out = append(out, byName[d])
	}
	return out
}

func absDiff(a, b string) string {
	var x, y int
	_, _ = fmt.Sscan(a, &x)
	_, _ = fmt.Sscan(b, &y)
	if x > y {
		return fmt.Sprint(x - y)
	}
	return fmt.Sprint(y - x)
}

// pluginPod returns the driver's kubelet-plugin pod once it is running
// and ready.
func pluginPod(ctx context.Context, t *testing.T, c *cluster.Cluster, driverName string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	eventually(ctx, t, "the kubelet plugin of "+driverName+" running", func(ctx context.Context) error {
		pods, err := c.Client.CoreV1().Pods(driverctrl.DefaultNamespace).List(ctx, metav1.ListOptions{
			LabelSelector: driver.LabelDriver + "=" + driverName + "," + driver.LabelComponent + "=" + driver.ComponentKubeletPlugin,
		})
		if err != nil {
			return err
		}
		for i := range pods.Items {
			if p := &pods.Items[i]; p.DeletionTimestamp == nil && running(p) {
				pod = p
				return nil
			}
		}
		return fmt.Errorf("%d pods, none running and ready", len(pods.Items))
	})
	return pod
}

// checkNothingLeft fails if any object of the driver is left: its
// workloads, identity, RBAC, admission policy, DeviceClasses, slices and
// the removal's DeviceTaintRule.
func checkNothingLeft(ctx context.Context, t *testing.T, c *cluster.Cluster, driverName string) {
	t.Helper()
	sel := metav1.ListOptions{LabelSelector: driver.LabelDriver + "=" + driverName}
	var left []string
	add := func(kind string, n int, err error) {
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("list %s: %v", kind, err)
		}
		if n > 0 {
			left = append(left, fmt.Sprintf("%d %s", n, kind))
		}
	}
	ds, err := c.Client.AppsV1().DaemonSets(metav1.NamespaceAll).List(ctx, sel)
	add("DaemonSets", lenOf(ds, func(l *appsv1.DaemonSetList) int { return len(l.Items) }), err)
	sas, err := c.Client.CoreV1().ServiceAccounts(metav1.NamespaceAll).List(ctx, sel)
	add("ServiceAccounts", lenOf(sas, func(l *corev1.ServiceAccountList) int { return len(l.Items) }), err)
	crs, err := c.Client.RbacV1().ClusterRoles().List(ctx, sel)
	if err == nil {
		add("ClusterRoles", len(crs.Items), nil)
	}
	crbs, err := c.Client.RbacV1().ClusterRoleBindings().List(ctx, sel)
	if err == nil {
		add("ClusterRoleBindings", len(crbs.Items), nil)
	}
	vaps, err := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, sel)
	if err == nil {
		add("ValidatingAdmissionPolicies", len(vaps.Items), nil)
	}
	vapbs, err := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().List(ctx, sel)
	if err == nil {
		add("ValidatingAdmissionPolicyBindings", len(vapbs.Items), nil)
	}
	dcs, err := c.Client.ResourceV1().DeviceClasses().List(ctx, sel)
	if err == nil {
		add("DeviceClasses", len(dcs.Items), nil)
	}
	add("ResourceSlices", len(nodeSlices(ctx, t, c, driverName)), nil)
	rules, err := c.Client.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{})
	if err == nil {
		n := 0
		for _, r := range rules.Items {
			if r.Spec.DeviceSelector != nil && ptr.Deref(r.Spec.DeviceSelector.Driver, "") == driverName && r.Spec.Taint.Key != "resource.drastack.io/central" {
				n++
			}
		}
		add("DeviceTaintRules of the removal", n, nil)
	}
	pods, err := c.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, sel)
	if err == nil {
		add("plugin pods", len(pods.Items), nil)
	}
	if len(left) > 0 {
		t.Errorf("left of driver %s after its removal: %s", driverName, strings.Join(left, ", "))
	}
}

func lenOf[L any](l *L, n func(*L) int) int {
	if l == nil {
		return 0
	}
	return n(l)
}
