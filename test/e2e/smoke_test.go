//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/drastack/drastack/internal/simdriver"
	"github.com/drastack/drastack/test/cluster"
)

const (
	smokeNamespace = "smoke"
	gpuDriver      = "gpu.sim.drastack.io"
	nicDriver      = "nic.sim.drastack.io"
	cpuDriver      = "cpu.sim.drastack.io"
	brokenDriver   = "broken-gpu.sim.drastack.io"
	brokenLabel    = "sim.drastack.io/broken"
	publishTimeout = time.Minute
)

type simKey struct{}

// TestSmoke checks the foundation the other suites stand on: the real
// control plane, kwok nodes, the simulated driver's slices, and the real
// kube-scheduler allocating claims from them.
func TestSmoke(t *testing.T) {
	feature := features.New("local control plane with the simulated driver").
		Setup(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			createNamespace(ctx, t, c.Client, smokeNamespace)
			inv, err := simdriver.LoadInventory("../../internal/simdriver/testdata/inventory.yaml")
			if err != nil {
				t.Fatal(err)
			}
			s, err := simdriver.Start(ctx, simdriver.Options{Client: c.Client, Inventory: inv})
			if err != nil {
				t.Fatal(err)
			}
			waitCtx, cancel := context.WithTimeout(ctx, publishTimeout)
			defer cancel()
			if err := s.WaitPublished(waitCtx); err != nil {
				t.Fatal(err)
			}
			return context.WithValue(ctx, simKey{}, s)
		}).
		Assess("the API server reports v1.36.3 and serves every resource.k8s.io version", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			dc, err := discovery.NewDiscoveryClientForConfig(c.Config)
			if err != nil {
				t.Fatal(err)
			}
			v, err := dc.ServerVersion()
			if err != nil {
				t.Fatal(err)
			}
			if v.GitVersion != cluster.KubernetesVersion {
				t.Errorf("server version %s, want %s", v.GitVersion, cluster.KubernetesVersion)
			}
			out, err := c.Kubectl(ctx, "version")
			if err != nil || !strings.Contains(string(out), "Server Version: "+cluster.KubernetesVersion) {
				t.Errorf("kubectl version = %q (%v), want the server at %s", out, err, cluster.KubernetesVersion)
			}
			groups, err := dc.ServerGroups()
			if err != nil {
				t.Fatal(err)
			}
			var served []string
			for _, g := range groups.Groups {
				if g.Name == resourceapi.GroupName {
					for _, gv := range g.Versions {
						served = append(served, gv.Version)
					}
				}
			}
			for _, want := range []string{"v1", "v1beta2", "v1alpha3"} {
				if !slices.Contains(served, want) {
					t.Errorf("resource.k8s.io/%s is not served (served: %v)", want, served)
				}
			}
			return ctx
		}).
		Assess("the suite's kwok nodes are Ready", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			// Other features add nodes of their own; only the suite's
			// nodes are known here.
			for i := range suiteNodes {
				name := fmt.Sprintf("kwok-node-%d", i)
				node, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if !cluster.NodeReady(node) {
					t.Errorf("node %s is not Ready", name)
				}
			}
			return ctx
		}).
		Assess("every node has exactly the pools the inventory renders for it", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			s := ctx.Value(simKey{}).(*simdriver.Sim)
			inv, err := simdriver.LoadInventory("../../internal/simdriver/testdata/inventory.yaml")
			if err != nil {
				t.Fatal(err)
			}
			nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			all, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, node := range nodes.Items {
				pools, err := simdriver.Render(inv, node.Name, node.Labels)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range pools {
					var gotSlices, gotDevices, wantDevices int
					for _, sl := range all.Items {
						if sl.Spec.Driver == p.Driver && sl.Spec.Pool.Name == p.Name && ptr.Deref(sl.Spec.NodeName, "") == node.Name {
							gotSlices++
							gotDevices += len(sl.Spec.Devices)
							if len(sl.OwnerReferences) != 1 || sl.OwnerReferences[0].UID != node.UID {
								t.Errorf("slice %s is not owned by node %s", sl.Name, node.Name)
							}
						}
					}
					for _, sl := range p.Slices {
						wantDevices += len(sl.Devices)
					}
					if gotSlices != len(p.Slices) || gotDevices != wantDevices {
						t.Errorf("%s/%s: %d slices with %d devices in the API server, want %d with %d",
							p.Driver, p.Name, gotSlices, gotDevices, len(p.Slices), wantDevices)
					}
				}
			}
			if errs := s.Errors(); len(errs) > 0 {
				t.Errorf("the sim reported publishing errors: %v", errs)
			}
			return ctx
		}).
		Assess("kube-scheduler allocates a MIG partition from shared counters and the pod runs", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			mustCreate(t, func() error {
				_, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, deviceClass("sim-mig", gpuDriver, `device.attributes["gpu.sim.drastack.io"].type == "mig"`), metav1.CreateOptions{})
				return err
			})
			mustCreate(t, func() error {
				_, err := c.Client.ResourceV1().ResourceClaimTemplates(smokeNamespace).Create(ctx, &resourceapi.ResourceClaimTemplate{
					ObjectMeta: metav1.ObjectMeta{Name: "mig-3g"},
					Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
						Requests: []resourceapi.DeviceRequest{{Name: "mig", Exactly: &resourceapi.ExactDeviceRequest{
							DeviceClassName: "sim-mig",
							Selectors:       []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.attributes["gpu.sim.drastack.io"].profile == "3g.20gb"`}}},
						}}},
					}}},
				}, metav1.CreateOptions{})
				return err
			})
			mustCreate(t, func() error {
				_, err := c.Client.CoreV1().Pods(smokeNamespace).Create(ctx, claimPod(smokeNamespace, "mig", "mig-3g"), metav1.CreateOptions{})
				return err
			})
			pod := waitPodRunning(ctx, t, c, smokeNamespace, "mig")
			results := allocatedDevices(ctx, t, c.Client, pod)
			if len(results) != 1 {
				t.Fatalf("allocated %d devices, want 1", len(results))
			}
			r := results[0]
			if r.Driver != gpuDriver || r.Pool != pod.Spec.NodeName || !strings.Contains(r.Device, "-mig-3g-20gb-") {
				t.Errorf("allocated %s/%s/%s on node %s, want a 3g.20gb partition of that node", r.Driver, r.Pool, r.Device, pod.Spec.NodeName)
			}
			return ctx
		}).
		Assess("kube-scheduler aligns a GPU and a NIC on one PCIe root", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			alignedClasses(ctx, t, c)
			alignedTemplate(ctx, t, c, "gpu-nic", []string{"gpu", "nic"})
			mustCreate(t, func() error {
				_, err := c.Client.CoreV1().Pods(smokeNamespace).Create(ctx, claimPod(smokeNamespace, "gpu-nic", "gpu-nic"), metav1.CreateOptions{})
				return err
			})
			pod := waitPodRunning(ctx, t, c, smokeNamespace, "gpu-nic")
			results := allocatedDevices(ctx, t, c.Client, pod)
			if len(results) != 2 {
				t.Fatalf("allocated %d devices, want 2", len(results))
			}
			roots := map[string][]string{}
			for _, r := range results {
				roots[r.Request] = pcieRoots(ctx, t, c, r)
				if r.Pool != pod.Spec.NodeName {
					t.Errorf("%s allocated from pool %s, pod runs on %s", r.Device, r.Pool, pod.Spec.NodeName)
				}
			}
			if gpu, nic := roots["gpu"], roots["nic"]; len(gpu) != 1 || len(nic) != 1 || gpu[0] != nic[0] {
				t.Errorf("PCIe roots: gpu %v, nic %v; want the same root", gpu, nic)
			}
			return ctx
		}).
		Assess("the API server keeps the CPUs' list-valued pcieRoot", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			list, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: resourceapi.ResourceSliceSelectorDriver + "=" + cpuDriver})
			if err != nil {
				t.Fatal(err)
			}
			cpus := 0
			for _, sl := range list.Items {
				for _, d := range sl.Spec.Devices {
					cpus++
					if a := d.Attributes[deviceattribute.StandardDeviceAttributePCIeRoot]; len(a.StringValues) == 0 {
						t.Errorf("%s/%s: pcieRoot %+v, want a list of strings (DRAListTypeAttributes dropped it?)", sl.Name, d.Name, a)
					}
				}
			}
			if cpus == 0 {
				t.Error("no CPU devices published")
			}
			return ctx
		}).
		// kube-scheduler 1.36.3 did not hand DRAListTypeAttributes to its
		// allocator, so a matchAttribute between a scalar and a list value
		// never matched there; 1.37.2 does (the gate is on in the local
		// cluster), so the pod runs with a GPU and a CPU of one PCIe root.
		Assess("kube-scheduler 1.37 matches a GPU's pcieRoot against a CPU's list", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			alignedClasses(ctx, t, c)
			alignedTemplate(ctx, t, c, "gpu-cpu", []string{"gpu", "cpu"})
			mustCreate(t, func() error {
				_, err := c.Client.CoreV1().Pods(smokeNamespace).Create(ctx, claimPod(smokeNamespace, "gpu-cpu", "gpu-cpu"), metav1.CreateOptions{})
				return err
			})
			pod := waitPodRunning(ctx, t, c, smokeNamespace, "gpu-cpu")
			results := allocatedDevices(ctx, t, c.Client, pod)
			if len(results) != 2 {
				t.Errorf("pod gpu-cpu got %d devices, want a GPU and a CPU: %v", len(results), results)
			}
			_ = c.Client.CoreV1().Pods(smokeNamespace).Delete(ctx, "gpu-cpu", metav1.DeleteOptions{})
			return ctx
		}).
		Assess("a new node gets its pools, a broken one included, and loses them when deleted", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			s := ctx.Value(simKey{}).(*simdriver.Sim)
			const extra = "kwok-node-extra"
			if err := c.AddNodes(ctx, cluster.NodeSpec{Name: extra, Labels: map[string]string{brokenLabel: "true"}}); err != nil {
				t.Fatal(err)
			}
			waitCtx, cancel := context.WithTimeout(ctx, publishTimeout)
			defer cancel()
			if err := s.WaitPublished(waitCtx); err != nil {
				t.Fatal(err)
			}
			drivers := nodeDrivers(ctx, t, c, extra)
			for _, want := range []string{gpuDriver, nicDriver, cpuDriver, brokenDriver} {
				if drivers[want] == 0 {
					t.Errorf("node %s has no slices of %s (has %v)", extra, want, drivers)
				}
			}
			if err := c.DeleteNode(ctx, extra); err != nil {
				t.Fatal(err)
			}
			err := wait.PollUntilContextTimeout(ctx, pollInterval, publishTimeout, true, func(ctx context.Context) (bool, error) {
				return len(nodeDrivers(ctx, t, c, extra)) == 0, nil
			})
			if err != nil {
				t.Errorf("slices of deleted node %s remain: %v", extra, nodeDrivers(ctx, t, c, extra))
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			s, ok := ctx.Value(simKey{}).(*simdriver.Sim)
			if !ok {
				return ctx
			}
			if err := s.Stop(); err != nil {
				t.Errorf("stop sim: %v", err)
			}
			left, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, sl := range left.Items {
				if slices.Contains([]string{gpuDriver, nicDriver, cpuDriver, brokenDriver}, sl.Spec.Driver) {
					t.Errorf("slice %s of %s remains after the sim stopped", sl.Name, sl.Spec.Driver)
				}
			}
			_ = c.Client.CoreV1().Namespaces().Delete(ctx, smokeNamespace, metav1.DeleteOptions{})
			for _, name := range []string{"sim-mig", "sim-gpu", "sim-nic", "sim-cpu"} { // classes of this feature
				_ = c.Client.ResourceV1().DeviceClasses().Delete(ctx, name, metav1.DeleteOptions{})
			}
			return ctx
		}).
		Feature()
	testenv.Test(t, feature)
}

// alignedClasses creates the device classes of the alignment checks once.
func alignedClasses(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	for _, dc := range []*resourceapi.DeviceClass{
		deviceClass("sim-gpu", gpuDriver, `device.attributes["gpu.sim.drastack.io"].type == "gpu" && device.attributes["gpu.sim.drastack.io"].model == "A100-SXM4-40GB"`),
		deviceClass("sim-nic", nicDriver, ""),
		deviceClass("sim-cpu", cpuDriver, ""),
	} {
		_, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// alignedTemplate creates a claim template with one request per class
// (sim-<name>) and a matchAttribute constraint on pcieRoot over all.
func alignedTemplate(ctx context.Context, t *testing.T, c *cluster.Cluster, name string, requests []string) {
	t.Helper()
	root := resourceapi.FullyQualifiedName(deviceattribute.StandardDeviceAttributePCIeRoot)
	var reqs []resourceapi.DeviceRequest
	for _, r := range requests {
		reqs = append(reqs, resourceapi.DeviceRequest{Name: r, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "sim-" + r}})
	}
	_, err := c.Client.ResourceV1().ResourceClaimTemplates(smokeNamespace).Create(ctx, &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests:    reqs,
			Constraints: []resourceapi.DeviceConstraint{{MatchAttribute: &root}},
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func mustCreate(t *testing.T, create func() error) {
	t.Helper()
	if err := create(); err != nil {
		t.Fatal(err)
	}
}

// pcieRoots looks up the allocated device in its slice and returns its
// pcieRoot attribute as a list (a string becomes a one-element list).
func pcieRoots(ctx context.Context, t *testing.T, c *cluster.Cluster, r resourceapi.DeviceRequestAllocationResult) []string {
	t.Helper()
	list, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sl := range list.Items {
		if sl.Spec.Driver != r.Driver || sl.Spec.Pool.Name != r.Pool {
			continue
		}
		for _, d := range sl.Spec.Devices {
			if d.Name != r.Device {
				continue
			}
			a := d.Attributes[deviceattribute.StandardDeviceAttributePCIeRoot]
			if a.StringValue != nil {
				return []string{*a.StringValue}
			}
			return a.StringValues
		}
	}
	t.Fatalf("allocated device %s/%s/%s not found in any slice", r.Driver, r.Pool, r.Device)
	return nil
}

// nodeDrivers counts a node's slices by driver.
func nodeDrivers(ctx context.Context, t *testing.T, c *cluster.Cluster, node string) map[string]int {
	t.Helper()
	list, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: resourceapi.ResourceSliceSelectorNodeName + "=" + node})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, sl := range list.Items {
		out[sl.Spec.Driver]++
	}
	return out
}

// TestStartFailureShowsTheAPIServerLog starts a second control plane with
// a feature gate kube-apiserver does not know: Start must fail and say why
// in the words of the API server's own log.
func TestStartFailureShowsTheAPIServerLog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{ExtraFeatureGates: []string{"DrastackNoSuchGate=true"}})
	if err == nil {
		_ = c.Stop()
		t.Fatal("Start succeeded with an unknown feature gate")
	}
	for _, want := range []string{"kube-apiserver.log", "DrastackNoSuchGate"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}
