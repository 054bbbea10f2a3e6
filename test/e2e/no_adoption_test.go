//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	driverctrl "github.com/drastack/drastack/internal/controller/driver"
	"github.com/drastack/drastack/internal/driver"
	"github.com/drastack/drastack/test/cluster"
)

// The no-adoption suite: objects of exactly the names (and, but for the
// drastack labels, the content) a driver's render produces are created
// first by someone else, one of every kind the driver lifecycle manages;
// the operator must never label, change or delete any of them. Server-side
// apply alone would have merged into each silently wherever the render
// agrees with it.
const (
	naNamespace = "no-adoption"
	naDriverNS  = "adopt-drivers"
	naForeignNS = "adopt-someone-elses"
	naExample   = "gpu.adopt.e2e.drastack.io"
	naNode      = "adopt-0"
	naNodeLabel = "e2e.drastack.io/adopt-node"
	naManager   = "e2e-admin"
)

// naSpec is the stack: the example driver, and the nvidia-gpu driver
// (CustomResourceDefinitions, Roles, a Deployment) when nvidia is set.
func naSpec(namespace string, example, nvidia bool) v1alpha1.DRAStackSpec {
	sel := map[string]string{naNodeLabel: "true"}
	spec := v1alpha1.DRAStackSpec{Namespace: namespace}
	if example {
		spec.Drivers = append(spec.Drivers, v1alpha1.DriverSpec{Name: naExample, Profile: v1alpha1.DriverProfileExample, NodeSelector: sel, RemovalPolicy: v1alpha1.RemovalPolicyDrain})
	}
	if nvidia {
		spec.Drivers = append(spec.Drivers, v1alpha1.DriverSpec{Name: driver.NVIDIAGPUDriver, Profile: v1alpha1.DriverProfileNVIDIAGPU, NodeSelector: sel, RemovalPolicy: v1alpha1.RemovalPolicyDrain})
	}
	return spec
}

// naForeign is an object someone else created, as it was created.
type naForeign struct {
	gvr  schema.GroupVersionResource
	obj  *unstructured.Unstructured
	kind string
}

// naCreateForeign creates, as naManager, the objects of the nvidia-gpu
// render that want accepts (never the namespace), without the drastack
// labels and annotations.
func naCreateForeign(ctx context.Context, t *testing.T, crc client.Client, dyn dynamic.Interface, want func(kind string) bool) []naForeign {
	t.Helper()
	spec := naSpec(naDriverNS, false, true).Drivers[0]
	rd, err := driver.Render(driver.Input{Stack: v1alpha1.DRAStackName, Namespace: naDriverNS, Driver: spec})
	if err != nil {
		t.Fatal(err)
	}
	mapper := crc.RESTMapper()
	var out []naForeign
	for _, u := range rd.Objects {
		if u.GetKind() == "Namespace" || !want(u.GetKind()) {
			continue
		}
		obj := u.DeepCopy()
		for k := range obj.GetLabels() {
			if strings.HasPrefix(k, "drastack.io/") || k == driver.LabelManagedBy {
				unstructured.RemoveNestedField(obj.Object, "metadata", "labels", k)
			}
		}
		for k := range obj.GetAnnotations() {
			if strings.HasPrefix(k, "drastack.io/") {
				unstructured.RemoveNestedField(obj.Object, "metadata", "annotations", k)
			}
		}
		m, err := mapper.RESTMapping(obj.GroupVersionKind().GroupKind(), obj.GroupVersionKind().Version)
		if err != nil {
			t.Fatal(err)
		}
		ri := dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
		created, err := ri.Create(ctx, obj, metav1.CreateOptions{FieldManager: naManager})
		if err != nil {
			t.Fatalf("create %s %s as someone else: %v", obj.GetKind(), obj.GetName(), err)
		}
		out = append(out, naForeign{gvr: m.Resource, obj: created, kind: obj.GetKind()})
	}
	return out
}

// naUntouched checks that the operator left someone else's object alone:
// it still exists with its UID and generation, carries no drastack label
// or annotation, and the driver lifecycle's field manager wrote nothing.
func naUntouched(ctx context.Context, t *testing.T, dyn dynamic.Interface, f naForeign) {
	t.Helper()
	now, err := dyn.Resource(f.gvr).Namespace(f.obj.GetNamespace()).Get(ctx, f.obj.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("%s %s: %v", f.kind, f.obj.GetName(), err)
	}
	if now.GetUID() != f.obj.GetUID() || now.GetGeneration() != f.obj.GetGeneration() {
		t.Errorf("%s %s was replaced or changed: uid %s -> %s, generation %d -> %d", f.kind, now.GetName(), f.obj.GetUID(), now.GetUID(), f.obj.GetGeneration(), now.GetGeneration())
	}
	for k := range now.GetLabels() {
		if strings.HasPrefix(k, "drastack.io/") || k == driver.LabelManagedBy {
			t.Errorf("%s %s was labelled %s", f.kind, now.GetName(), k)
		}
	}
	for k := range now.GetAnnotations() {
		if strings.HasPrefix(k, "drastack.io/") {
			t.Errorf("%s %s was annotated %s", f.kind, now.GetName(), k)
		}
	}
	for _, e := range now.GetManagedFields() {
		if e.Manager == driver.FieldManager {
			t.Errorf("%s %s has fields of %s", f.kind, now.GetName(), driver.FieldManager)
		}
	}
}

// TestNoAdoption runs the driver lifecycle next to objects it did not
// create, one of every kind it manages (issue 22).
func TestNoAdoption(t *testing.T) {
	var (
		crc     client.Client
		stop    func()
		dyn     dynamic.Interface
		foreign []naForeign
		rule    naForeign
		slice   *resourceapi.ResourceSlice
	)
	feature := features.New("the driver lifecycle never adopts an object it did not create").
		Setup(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			crc = prepareFeature(ctx, t, c, naNamespace, cluster.NodeSpec{Name: naNode, Labels: map[string]string{
				naNodeLabel: "true", "feature.node.kubernetes.io/pci-10de.present": "true"}})
			var err error
			if dyn, err = dynamic.NewForConfig(c.Config); err != nil {
				t.Fatal(err)
			}
			stop = drvStartOperator(ctx, t, c, naNamespace)
			return ctx
		}).
		Assess("Namespace: one someone else created is refused as spec.namespace and left alone", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			createNamespace(ctx, t, c.Client, naForeignNS)
			before, err := c.Client.CoreV1().Namespaces().Get(ctx, naForeignNS, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			sgWaitInvalid(ctx, t, crc, naSpec(naForeignNS, true, false), `spec.namespace: Invalid value: "`+naForeignNS+`": exists and was created by someone else`)
			after, err := c.Client.CoreV1().Namespaces().Get(ctx, naForeignNS, metav1.GetOptions{})
			if err != nil || after.UID != before.UID || len(after.Labels) != len(before.Labels) || after.Labels[driver.LabelStack] != "" {
				t.Errorf("someone else's namespace changed: %v, labels %v", err, after.Labels)
			}
			// The example driver goes to a namespace of its own instead.
			sgWrite(ctx, t, crc, naSpec(naDriverNS, true, false))
			drvWaitStack(ctx, t, crc, "the example driver installed", func(st *v1alpha1.DRAStack) bool {
				d := drvStatus(st, naExample)
				return d != nil && d.NodesDesired == 1
			})
			return ctx
		}).
		Assess("every kind of the nvidia-gpu render, created by someone else first, is reported and left alone", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			// The definitions first are the operator's, so that the
			// workloads are applied too; someone else's definitions come in
			// the next step.
			foreign = naCreateForeign(ctx, t, crc, dyn, func(kind string) bool { return kind != driver.CRDKind.Kind })
			sgWrite(ctx, t, crc, naSpec(naDriverNS, true, true))
			plugin := "DaemonSet " + naDriverNS + "/" + driver.ObjectName(driver.NVIDIAGPUDriver, "kubelet-plugin")
			st := drvWaitStack(ctx, t, crc, "the nvidia driver reporting that its objects are someone else's", func(st *v1alpha1.DRAStack) bool {
				d := drvStatus(st, driver.NVIDIAGPUDriver)
				return d != nil && d.Reason == driver.ReasonApplyConflict && strings.Contains(d.Message, "not created by drastack for driver "+driver.NVIDIAGPUDriver)
			})
			t.Logf("driver status: %s", drvStatus(st, driver.NVIDIAGPUDriver).Message)
			drvWaitEvent(ctx, t, c, driverctrl.ReasonNotCreated, plugin)
			kinds := map[string]bool{}
			for _, f := range foreign {
				kinds[f.kind] = true
				t.Run(f.kind+" "+f.obj.GetName(), func(t *testing.T) { naUntouched(ctx, t, dyn, f) })
			}
			for _, k := range driver.ManagedKinds {
				if k.Kind != "Namespace" && k.Kind != driver.CRDKind.Kind && !kinds[k.Kind] {
					t.Errorf("the render has no %s: the test must cover every managed kind", k.Kind)
				}
			}
			// Dropping the driver again removes only what the operator
			// created (the definitions), nothing of theirs.
			sgWrite(ctx, t, crc, naSpec(naDriverNS, true, false))
			drvWaitStack(ctx, t, crc, "the nvidia driver removed", func(st *v1alpha1.DRAStack) bool {
				return drvStatus(st, driver.NVIDIAGPUDriver) == nil
			})
			for _, f := range foreign {
				t.Run("after removal "+f.kind+" "+f.obj.GetName(), func(t *testing.T) { naUntouched(ctx, t, dyn, f) })
			}
			return ctx
		}).
		Assess("CustomResourceDefinition: someone else's definitions are reported and left alone, and the workloads wait", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			// The removal of the step before deletes the operator's own
			// definitions; wait until they are gone.
			for _, name := range []string{"computedomains.resource.nvidia.com", "computedomaincliques.resource.nvidia.com"} {
				drvWaitGone(ctx, t, "CustomResourceDefinition "+name, func(ctx context.Context) error {
					_, err := prfCRD(ctx, crc, name)
					return err
				})
			}
			crds := naCreateForeign(ctx, t, crc, dyn, func(kind string) bool { return kind == driver.CRDKind.Kind })
			foreign = append(foreign, crds...)
			sgWrite(ctx, t, crc, naSpec(naDriverNS, true, true))
			drvWaitEvent(ctx, t, c, driverctrl.ReasonNotCreated, "CustomResourceDefinition computedomains.resource.nvidia.com")
			drvWaitStack(ctx, t, crc, "the nvidia driver waiting for definitions that are someone else's", func(st *v1alpha1.DRAStack) bool {
				d := drvStatus(st, driver.NVIDIAGPUDriver)
				// Objects with the same verdict share one message; the
				// definitions may share it with the earlier step's
				// foreign objects (the same field manager).
				return d != nil && strings.Contains(d.Message, "CustomResourceDefinition computedomaincliques.resource.nvidia.com, CustomResourceDefinition computedomains.resource.nvidia.com") &&
					strings.Contains(d.Message, "exists but is owned by someone else")
			})
			for _, f := range crds {
				t.Run(f.kind+" "+f.obj.GetName(), func(t *testing.T) { naUntouched(ctx, t, dyn, f) })
			}
			sgWrite(ctx, t, crc, naSpec(naDriverNS, true, false))
			drvWaitStack(ctx, t, crc, "the nvidia driver gone", func(st *v1alpha1.DRAStack) bool { return drvStatus(st, driver.NVIDIAGPUDriver) == nil })
			for _, f := range foreign {
				t.Run("after removal "+f.kind+" "+f.obj.GetName(), func(t *testing.T) { naUntouched(ctx, t, dyn, f) })
			}
			return ctx
		}).
		Assess("DeviceTaintRule: a removal does not take over someone else's rule of its name, and waits", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			name := driver.TaintRuleName(driver.TaintTarget{Driver: naExample})
			gvr := schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "devicetaintrules"}
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
				"metadata": map[string]any{"name": name},
				"spec": map[string]any{
					"deviceSelector": map[string]any{"driver": "other.adopt.e2e.drastack.io"},
					"taint":          map[string]any{"key": "e2e.drastack.io/someone", "effect": "NoSchedule"},
				},
			}}
			created, err := dyn.Resource(gvr).Create(ctx, u, metav1.CreateOptions{FieldManager: naManager})
			if err != nil {
				t.Fatal(err)
			}
			rule = naForeign{gvr: gvr, obj: created, kind: "DeviceTaintRule"}
			sgWrite(ctx, t, crc, naSpec(naDriverNS, false, false))
			drvWaitEvent(ctx, t, c, driverctrl.ReasonNotCreated, "DeviceTaintRule "+name)
			st := drvWaitStack(ctx, t, crc, "the removal stopped at Tainting", func(st *v1alpha1.DRAStack) bool {
				d := drvStatus(st, naExample)
				return d != nil && d.Removal != nil && d.Removal.Phase == driver.PhaseTainting
			})
			if d := drvStatus(st, naExample); d.NodesDesired != 1 {
				t.Logf("removal status: %+v", d.Removal)
			}
			naUntouched(ctx, t, dyn, rule)
			if _, err := drvDaemonSet(ctx, c, naDriverNS, driver.ObjectName(naExample, "kubelet-plugin")); err != nil {
				t.Errorf("the plugin was deleted before allocations were stopped: %v", err)
			}
			// Once their rule is gone, the removal takes its own course.
			if err := dyn.Resource(gvr).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			drvWaitStack(ctx, t, crc, "the example driver removed", func(st *v1alpha1.DRAStack) bool { return drvStatus(st, naExample) == nil })
			drvCheckNothingLeftOf(ctx, t, c, naExample)
			return ctx
		}).
		Assess("ResourceSlice: a multi-host driver with node-less slices someone else wrote is refused, and they are left alone", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			const mhDriverName = "tpu.adopt.e2e.drastack.io"
			sl := &resourceapi.ResourceSlice{
				ObjectMeta: metav1.ObjectMeta{Name: "someone-elses-central-slice"},
				Spec: resourceapi.ResourceSliceSpec{Driver: mhDriverName, AllNodes: ptr.To(true),
					Pool:    resourceapi.ResourcePool{Name: "vendor", Generation: 1, ResourceSliceCount: 1},
					Devices: []resourceapi.Device{{Name: "d0"}}},
			}
			created, err := c.Client.ResourceV1().ResourceSlices().Create(ctx, sl, metav1.CreateOptions{FieldManager: naManager})
			if err != nil {
				t.Fatal(err)
			}
			slice = created
			spec := naSpec(naDriverNS, false, false)
			m := sgMultiHost("tpu", mhDriverName)
			m.NodeSelector.MatchLabels = map[string]string{"e2e.drastack.io/no-such-node": "true"}
			spec.MultiHost = []v1alpha1.MultiHostSpec{m}
			sgWaitInvalid(ctx, t, crc, spec, `spec.multiHost[0].driver: Invalid value: "`+mhDriverName+`": has node-less ResourceSlices that drastack did not write (slice someone-elses-central-slice)`)
			now, err := c.Client.ResourceV1().ResourceSlices().Get(ctx, slice.Name, metav1.GetOptions{})
			if err != nil || now.UID != slice.UID || now.Generation != slice.Generation || len(now.OwnerReferences) != 0 {
				t.Errorf("someone else's slice was changed or deleted: %v", err)
			}
			sgWrite(ctx, t, crc, naSpec(naDriverNS, false, false))
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			if crc != nil {
				var st v1alpha1.DRAStack
				if err := crc.Get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, &st); err == nil {
					_ = crc.Delete(ctx, &st)
					_ = wait.PollUntilContextTimeout(ctx, pollInterval, drvTimeout, true, func(ctx context.Context) (bool, error) {
						return apierrors.IsNotFound(crc.Get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, &v1alpha1.DRAStack{})), nil
					})
				}
			}
			if stop != nil {
				stop()
			}
			for _, f := range append(foreign, rule) {
				if f.obj != nil {
					_ = dyn.Resource(f.gvr).Namespace(f.obj.GetNamespace()).Delete(ctx, f.obj.GetName(), metav1.DeleteOptions{})
				}
			}
			if slice != nil {
				_ = c.Client.ResourceV1().ResourceSlices().Delete(ctx, slice.Name, metav1.DeleteOptions{})
			}
			for _, ns := range []string{naNamespace, naForeignNS, naDriverNS} {
				_ = c.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
			}
			if err := c.DeleteNode(ctx, naNode); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("%v", err)
			}
			return ctx
		}).
		Feature()
	testenv.Test(t, feature)
}
