//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	driverctrl "github.com/drastack/drastack/internal/controller/driver"
	"github.com/drastack/drastack/internal/driver"
	"github.com/drastack/drastack/test/cluster"
)

// The profiles suite installs every vendor profile (nvidia-gpu, amd-gpu,
// intel-gpu, dranet) on kwok nodes that carry the labels each vendor's
// nodes carry, under the operator's own RBAC, and follows each to the
// Ready the operator defines: the API server accepts every rendered object
// (the CustomResourceDefinitions, their schema and establishment, RBAC
// that the operator may grant, the admission policy, DeviceClasses with
// their selectors, the workloads), the plugin DaemonSet targets exactly
// the vendor's nodes, its pods (kwok) and the NVIDIA controller run, and
// the nodes publish ResourceSlices. kwok runs no driver code: the test
// publishes each node's slice as that node's plugin identity would,
// through the admission policy; whether the vendor binaries start, find
// hardware and prepare devices is not checked here (the fidelity tests
// hold the manifests to the vendors' charts). It also checks the
// nvidia-gpu refusal of nodes where NVIDIA's device plugin serves
// nvidia.com/gpu, and that a profile's CustomResourceDefinitions outlive a
// removal exactly as long as custom resources of them exist.
const (
	prfNamespace = "profiles-e2e"
	prfNodeLabel = "e2e.drastack.io/profiles-node"
	prfCD        = "training-domain"
)

// prfNodes are the suite's nodes with the labels their vendor's tools
// set; prf-nvidia-dp also has NVIDIA's device plugin serving 8 GPUs.
var prfNodes = []struct {
	name   string
	labels map[string]string
	gpus   int64
}{
	{"prf-nvidia", map[string]string{"feature.node.kubernetes.io/pci-10de.present": "true"}, 0},
	{"prf-nvidia-dp", map[string]string{"nvidia.com/gpu.present": "true"}, 8},
	{"prf-amd", map[string]string{"feature.node.kubernetes.io/amd-gpu": "true"}, 0},
	{"prf-intel", map[string]string{"intel.feature.node.kubernetes.io/gpu": "true"}, 0},
	{"prf-plain", nil, 0},
}

var computeDomainGVR = schema.GroupVersionResource{Group: "resource.nvidia.com", Version: "v1beta1", Resource: "computedomains"}

// prfSpecs are the four vendor drivers on the suite's nodes; nvidia
// changes the nvidia-gpu entry.
func prfSpecs(nvidia func(*v1alpha1.DriverSpec)) []v1alpha1.DriverSpec {
	sel := map[string]string{prfNodeLabel: "true"}
	n := v1alpha1.DriverSpec{Name: driver.NVIDIAGPUDriver, Profile: v1alpha1.DriverProfileNVIDIAGPU, NodeSelector: sel,
		NVIDIA: &v1alpha1.NVIDIAOptions{DriverRoot: driver.NVIDIAGPUOperatorDriverRoot}}
	if nvidia != nil {
		nvidia(&n)
	}
	out := []v1alpha1.DriverSpec{
		{Name: driver.AMDDriver, Profile: v1alpha1.DriverProfileAMDGPU, NodeSelector: sel},
		{Name: driver.IntelDriver, Profile: v1alpha1.DriverProfileIntelGPU, NodeSelector: sel},
		{Name: driver.DRANETDriver, Profile: v1alpha1.DriverProfileDRANET, NodeSelector: sel, RemovalPolicy: v1alpha1.RemovalPolicyForce},
	}
	if n.Name != "" {
		out = append([]v1alpha1.DriverSpec{n}, out...)
	}
	return out
}

// prfWithout drops the nvidia-gpu entry.
func prfWithout(nvidia bool) []v1alpha1.DriverSpec {
	specs := prfSpecs(nil)
	if !nvidia {
		return specs[1:]
	}
	return specs
}

func TestDriverProfiles(t *testing.T) {
	var (
		crc  client.Client
		dyn  dynamic.Interface
		stop func()
	)
	feature := features.New("vendor driver profiles install on their vendors' nodes").
		Setup(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			var specs []cluster.NodeSpec
			for _, n := range prfNodes {
				labels := map[string]string{prfNodeLabel: "true"}
				for k, v := range n.labels {
					labels[k] = v
				}
				capacity := cluster.DefaultNodeCapacity()
				if n.gpus > 0 {
					capacity[driver.NVIDIADevicePluginResource] = *resource.NewQuantity(n.gpus, resource.DecimalSI)
				}
				specs = append(specs, cluster.NodeSpec{Name: n.name, Labels: labels, Capacity: capacity})
			}
			crc = prepareFeature(ctx, t, c, prfNamespace, specs...)
			var err error
			if dyn, err = dynamic.NewForConfig(c.Config); err != nil {
				t.Fatal(err)
			}
			stop = drvStartOperator(ctx, t, c, prfNamespace)
			return ctx
		}).
		Assess("each profile reaches Ready on its vendor's nodes; nvidia-gpu refuses the node of NVIDIA's device plugin until allowed", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			begin := time.Now()
			drvSetDrivers(ctx, t, crc, prfSpecs(nil))
			st := drvWaitStack(ctx, t, crc, "nvidia-gpu refusing prf-nvidia-dp, every plugin on its vendor's nodes", func(st *v1alpha1.DRAStack) bool {
				nv := drvStatus(st, driver.NVIDIAGPUDriver)
				return nv != nil && nv.Reason == driver.ReasonDevicePluginConflict && nv.NodesDesired == 1 &&
					prfDesired(st, driver.AMDDriver) == 1 && prfDesired(st, driver.IntelDriver) == 1 && prfDesired(st, driver.DRANETDriver) == int32(len(prfNodes))
			})
			nv := drvStatus(st, driver.NVIDIAGPUDriver)
			for _, want := range []string{"kept off node prf-nvidia-dp", "NVIDIA's device plugin serves nvidia.com/gpu", "nvidia.devicePluginNodes: Allow"} {
				if !strings.Contains(nv.Message, want) {
					t.Errorf("nvidia-gpu status lacks %q: %s", want, nv.Message)
				}
			}
			if _, reason, msg := drvCondition(st, v1alpha1.ConditionDriversReady); reason != driver.ReasonDevicePluginConflict || !strings.Contains(msg, "prf-nvidia-dp") {
				t.Errorf("DriversReady %s does not name the refused node: %s", reason, msg)
			}
			t.Logf("timing: four drivers declared -> every DaemonSet placed in %s", since(begin))
			prfCheckPlacement(ctx, t, c, map[string][]string{
				driver.NVIDIAGPUDriver: {"prf-nvidia"}, driver.AMDDriver: {"prf-amd"}, driver.IntelDriver: {"prf-intel"},
				driver.DRANETDriver: {"prf-amd", "prf-intel", "prf-nvidia", "prf-nvidia-dp", "prf-plain"},
			})
			prfCheckNVIDIAObjects(ctx, t, c, crc)

			published := time.Now()
			drvPublish(ctx, t, c, drvOpsNS, driver.NVIDIAGPUDriver, "prf-nvidia")
			drvPublish(ctx, t, c, drvOpsNS, driver.AMDDriver, "prf-amd")
			drvPublish(ctx, t, c, drvOpsNS, driver.IntelDriver, "prf-intel")
			drvPublish(ctx, t, c, drvOpsNS, driver.DRANETDriver, "prf-amd", "prf-intel", "prf-nvidia", "prf-nvidia-dp", "prf-plain")
			drvWaitStack(ctx, t, crc, "amd-gpu, intel-gpu and dranet Ready; nvidia-gpu still refusing", func(st *v1alpha1.DRAStack) bool {
				nv := drvStatus(st, driver.NVIDIAGPUDriver)
				return prfReady(st, driver.AMDDriver) && prfReady(st, driver.IntelDriver) && prfReady(st, driver.DRANETDriver) &&
					nv != nil && nv.Reason == driver.ReasonDevicePluginConflict && !nv.Ready && nv.NodesPublishing == 1
			})
			t.Logf("timing: slices published -> three drivers Ready in %s", since(published))

			drvSetDrivers(ctx, t, crc, prfSpecs(func(d *v1alpha1.DriverSpec) { d.NVIDIA.DevicePluginNodes = v1alpha1.DevicePluginNodesAllow }))
			drvWaitStack(ctx, t, crc, "nvidia-gpu allowed beside the device plugin: two nodes", func(st *v1alpha1.DRAStack) bool {
				return prfDesired(st, driver.NVIDIAGPUDriver) == 2
			})
			drvPublish(ctx, t, c, drvOpsNS, driver.NVIDIAGPUDriver, "prf-nvidia-dp")
			drvWaitStack(ctx, t, crc, "every driver Ready, DriversReady True", func(st *v1alpha1.DRAStack) bool {
				return prfReady(st, driver.NVIDIAGPUDriver) && meta.IsStatusConditionTrue(st.Status.Conditions, v1alpha1.ConditionDriversReady)
			})
			t.Logf("timing: four drivers declared -> all Ready in %s (slices published by the test)", since(begin))
			return ctx
		}).
		Assess("a Drain removal waits for ComputeDomains, then deletes the definitions", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			prfCreateComputeDomain(ctx, t, dyn)
			drvSetDrivers(ctx, t, crc, prfWithout(false))
			st := drvWaitStack(ctx, t, crc, "nvidia-gpu Draining on the ComputeDomain", func(st *v1alpha1.DRAStack) bool {
				d := drvStatus(st, driver.NVIDIAGPUDriver)
				return d != nil && d.Removal != nil && d.Removal.Phase == driver.PhaseDraining && d.Removal.BlockingResourceCount == 1
			})
			rm := drvStatus(st, driver.NVIDIAGPUDriver).Removal
			if want := "ComputeDomain " + prfNamespace + "/" + prfCD; !slices.Contains(rm.BlockingResources, want) {
				t.Errorf("blockingResources %v lack %s", rm.BlockingResources, want)
			}
			// The controller must still run to finalize the ComputeDomain,
			// and the definitions must stay.
			if _, err := c.Client.AppsV1().Deployments(drvOpsNS).Get(ctx, driver.ObjectName(driver.NVIDIAGPUDriver, "controller"), metav1.GetOptions{}); err != nil {
				t.Errorf("the ComputeDomain controller is gone while a ComputeDomain exists: %v", err)
			}
			prfCRDs(ctx, t, crc, true)
			if err := dyn.Resource(computeDomainGVR).Namespace(prfNamespace).Delete(ctx, prfCD, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			drvWaitStack(ctx, t, crc, "nvidia-gpu removed", func(st *v1alpha1.DRAStack) bool { return drvStatus(st, driver.NVIDIAGPUDriver) == nil })
			prfCRDs(ctx, t, crc, false)
			drvWaitGone(ctx, t, "the IMEX daemons' ServiceAccount", func(ctx context.Context) error {
				_, err := c.Client.CoreV1().ServiceAccounts(drvOpsNS).Get(ctx, "compute-domain-daemon-service-account", metav1.GetOptions{})
				return err
			})
			return ctx
		}).
		Assess("a Force removal keeps definitions that still have custom resources, released", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			drvSetDrivers(ctx, t, crc, prfSpecs(func(d *v1alpha1.DriverSpec) {
				d.RemovalPolicy = v1alpha1.RemovalPolicyForce
				d.NVIDIA.Plugins = []v1alpha1.NVIDIAPlugin{v1alpha1.NVIDIAPluginComputeDomains}
			}))
			drvWaitStack(ctx, t, crc, "nvidia-gpu (ComputeDomains only) installed again", func(st *v1alpha1.DRAStack) bool {
				d := drvStatus(st, driver.NVIDIAGPUDriver)
				return d != nil && d.Removal == nil && d.NodesDesired == 2
			})
			prfCRDs(ctx, t, crc, true)
			prfCreateComputeDomain(ctx, t, dyn)
			drvSetDrivers(ctx, t, crc, prfWithout(false))
			drvWaitStack(ctx, t, crc, "nvidia-gpu removed", func(st *v1alpha1.DRAStack) bool { return drvStatus(st, driver.NVIDIAGPUDriver) == nil })
			for _, name := range []string{"computedomains.resource.nvidia.com", "computedomaincliques.resource.nvidia.com"} {
				crd, err := prfCRD(ctx, crc, name)
				if err != nil {
					t.Errorf("definition %s deleted although ComputeDomains exist: %v", name, err)
					continue
				}
				if _, ok := crd.Labels[driver.LabelStack]; ok {
					t.Errorf("kept definition %s still labelled for the stack: %v", name, crd.Labels)
				}
			}
			if _, err := dyn.Resource(computeDomainGVR).Namespace(prfNamespace).Get(ctx, prfCD, metav1.GetOptions{}); err != nil {
				t.Errorf("the ComputeDomain is gone: %v", err)
			}
			drvWaitEvent(ctx, t, c, driverctrl.ReasonCustomResourceDefinitionsKept, driver.NVIDIAGPUDriver)
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			if crc != nil {
				deleteStack(ctx, t, crc)
			}
			if stop != nil {
				stop()
			}
			if dyn != nil {
				_ = dyn.Resource(computeDomainGVR).Namespace(prfNamespace).Delete(ctx, prfCD, metav1.DeleteOptions{})
			}
			for _, name := range []string{"computedomains.resource.nvidia.com", "computedomaincliques.resource.nvidia.com"} {
				u := &unstructured.Unstructured{}
				u.SetGroupVersionKind(driver.CRDKind)
				u.SetName(name)
				if crc != nil {
					if err := crc.Delete(ctx, u); client.IgnoreNotFound(err) != nil {
						t.Errorf("delete %s: %v", name, err)
					}
				}
			}
			for _, n := range prfNodes {
				if err := c.Client.CoreV1().Nodes().Delete(ctx, n.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("delete node %s: %v", n.name, err)
				}
			}
			return ctx
		}).
		Feature()
	testenv.Test(t, feature)
}

func prfDesired(st *v1alpha1.DRAStack, name string) int32 {
	if d := drvStatus(st, name); d != nil {
		return d.NodesDesired
	}
	return -1
}

func prfReady(st *v1alpha1.DRAStack, name string) bool {
	d := drvStatus(st, name)
	return d != nil && d.Ready && d.Reason == driver.ReasonReady
}

// prfCheckPlacement checks that each driver's plugin pods run on exactly
// the nodes its vendor's labels (and the node selector) pick.
func prfCheckPlacement(ctx context.Context, t *testing.T, c *cluster.Cluster, want map[string][]string) {
	t.Helper()
	for name, nodes := range want {
		var got []string
		err := wait.PollUntilContextTimeout(ctx, pollInterval, drvTimeout, true, func(ctx context.Context) (bool, error) {
			got = nil
			for node, p := range drvPluginPods(ctx, t, c, drvOpsNS, name) {
				if p.Status.Phase == corev1.PodRunning {
					got = append(got, node)
				}
			}
			slices.Sort(got)
			return slices.Equal(got, nodes), nil
		})
		if err != nil {
			t.Errorf("driver %s: plugin pods running on %v, want %v", name, got, nodes)
		}
	}
}

// prfCheckNVIDIAObjects checks what the nvidia-gpu profile adds beyond a
// plugin: its definitions are established and served, the IMEX daemons'
// ServiceAccount has its fixed name, the controller runs with
// NVIDIA_VISIBLE_DEVICES=void and every flag it requires, the driver root
// reaches the plugin, and the classes exist.
func prfCheckNVIDIAObjects(ctx context.Context, t *testing.T, c *cluster.Cluster, crc client.Client) {
	t.Helper()
	prfCRDs(ctx, t, crc, true)
	if _, err := c.Client.CoreV1().ServiceAccounts(drvOpsNS).Get(ctx, "compute-domain-daemon-service-account", metav1.GetOptions{}); err != nil {
		t.Errorf("the IMEX daemons' ServiceAccount: %v", err)
	}
	var dep *appsv1.Deployment
	err := wait.PollUntilContextTimeout(ctx, pollInterval, drvTimeout, true, func(ctx context.Context) (bool, error) {
		d, err := c.Client.AppsV1().Deployments(drvOpsNS).Get(ctx, driver.ObjectName(driver.NVIDIAGPUDriver, "controller"), metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // retried
		}
		dep = d
		return d.Status.AvailableReplicas == 1, nil
	})
	if err != nil {
		t.Fatalf("the ComputeDomain controller is not available: %v", err)
	}
	env := map[string]string{}
	for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env["NVIDIA_VISIBLE_DEVICES"] != "void" || env["LOG_VERBOSITY_CD_DAEMON"] == "" {
		t.Errorf("controller env %v lacks NVIDIA_VISIBLE_DEVICES=void or LOG_VERBOSITY_CD_DAEMON", env)
	}
	ds, err := drvDaemonSet(ctx, c, drvOpsNS, driver.ObjectName(driver.NVIDIAGPUDriver, "kubelet-plugin"))
	if err != nil {
		t.Fatal(err)
	}
	root := ""
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == "driver-root" && v.HostPath != nil {
			root = v.HostPath.Path
		}
	}
	if root != driver.NVIDIAGPUOperatorDriverRoot {
		t.Errorf("driver-root host path %q, want the GPU Operator's %s", root, driver.NVIDIAGPUOperatorDriverRoot)
	}
	// The workloads were applied only after the definitions were
	// established.
	crd, err := prfCRD(ctx, crc, "computedomains.resource.nvidia.com")
	if err == nil {
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && ds.CreationTimestamp.Before(&cond.LastTransitionTime) {
				t.Errorf("the plugin DaemonSet was created at %s, before the definition was established at %s", ds.CreationTimestamp, cond.LastTransitionTime)
			}
		}
	}
	for _, name := range []string{"gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com", "compute-domain-daemon.nvidia.com", "compute-domain-default-channel.nvidia.com"} {
		dc, err := c.Client.ResourceV1().DeviceClasses().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("DeviceClass %s: %v", name, err)
			continue
		}
		if name == "gpu.nvidia.com" {
			// The API server keeps the field only with DRAExtendedResource.
			t.Logf("DeviceClass gpu.nvidia.com: extendedResourceName %v", ptrValue(dc.Spec.ExtendedResourceName))
		}
	}
}

func ptrValue(p *string) string {
	if p == nil {
		return "(dropped by the API server)"
	}
	return *p
}

// prfCRD reads a CustomResourceDefinition (the operator's scheme knows
// the kind).
func prfCRD(ctx context.Context, crc client.Client, name string) (*apiextensionsv1.CustomResourceDefinition, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	return crd, crc.Get(ctx, client.ObjectKey{Name: name}, crd)
}

// prfCRDs waits until both NVIDIA definitions are established (present)
// or gone.
func prfCRDs(ctx context.Context, t *testing.T, crc client.Client, present bool) {
	t.Helper()
	for _, name := range []string{"computedomains.resource.nvidia.com", "computedomaincliques.resource.nvidia.com"} {
		err := wait.PollUntilContextTimeout(ctx, pollInterval, drvTimeout, true, func(ctx context.Context) (bool, error) {
			crd, err := prfCRD(ctx, crc, name)
			if !present {
				return apierrors.IsNotFound(err), nil
			}
			if err != nil {
				return false, nil //nolint:nilerr // retried
			}
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("CustomResourceDefinition %s present=%v never: %v", name, present, err)
		}
	}
}

// prfCreateComputeDomain creates a ComputeDomain as a user would; the API
// server checks it against the profile's schema.
func prfCreateComputeDomain(ctx context.Context, t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	cd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "resource.nvidia.com/v1beta1",
		"kind":       "ComputeDomain",
		"metadata":   map[string]any{"name": prfCD, "namespace": prfNamespace},
		"spec": map[string]any{
			"numNodes": int64(0),
			"channel":  map[string]any{"resourceClaimTemplate": map[string]any{"name": prfCD + "-channel"}},
		},
	}}
	err := wait.PollUntilContextTimeout(ctx, pollInterval, drvTimeout, true, func(ctx context.Context) (bool, error) {
		created, err := dyn.Resource(computeDomainGVR).Namespace(prfNamespace).Create(ctx, cd, metav1.CreateOptions{})
		if err != nil {
			t.Logf("create ComputeDomain: %v", err)
			return apierrors.IsAlreadyExists(err), nil
		}
		mode, _, _ := unstructured.NestedString(created.Object, "spec", "channel", "allocationMode")
		if mode != "Single" {
			return false, fmt.Errorf("the schema's default allocationMode Single was not applied: %q", mode)
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("create ComputeDomain: %v", err)
	}
}
