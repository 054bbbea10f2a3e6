package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/driver"
)

// ReasonForceRemovalWithClaims is the reason of the Warning when a Force
// removal deletes a driver's plugins under allocated claims.
const ReasonForceRemovalWithClaims = "ForceRemovalWithClaims"

var namespaceGVK = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}

// removeDriver observes a driver that is no longer declared, takes the next
// step of its removal, and returns its status; done is true when nothing of
// it is left.
func (r *Reconciler) removeDriver(ctx context.Context, st *v1alpha1.DRAStack, name string, in *installed, taintGVK *schema.GroupVersionKind, pub publishing, now time.Time) (*driver.Assessment, bool, error) {
	logger := log.FromContext(ctx).WithValues("driver", name)
	since, prevPolicy := removalSince(st, name)
	if since.IsZero() {
		// Objects re-created after the removal are new, not restored.
		r.memory.forget(st.Name + "/" + name + "/")
	}

	var spec *v1alpha1.DriverSpec
	for i := range st.Spec.Drivers {
		if st.Spec.Drivers[i].Name == name {
			spec = &st.Spec.Drivers[i]
		}
	}
	var specNames []string
	var specPolicy v1alpha1.RemovalPolicy
	if spec != nil {
		// The DRAStack is being deleted: its spec still says how.
		specNames = driver.DriverNames(spec)
		specPolicy = spec.RemovalPolicy
	}
	policy := driver.RemovalPolicyOf(specPolicy, in.annotations(driver.AnnotationRemovalPolicy), prevPolicy)
	names := driverNamesOf(name, in, specNames)
	sl, err := r.driverSlices(ctx, names)
	if err != nil {
		return nil, false, err
	}
	targets := driver.RemovalTaintTargets(names, sl.ownPools, sl.publisherPools)

	state := driver.RemovalState{
		Policy:           policy,
		TaintRulesServed: taintGVK != nil,
		Tainted:          in.hasTaintRules(targets),
		Rules:            in.ruleCount(),
		DeviceClasses:    in.count(func(gk schema.GroupKind) bool { return gk.Kind == "DeviceClass" }),
		Workloads:        in.count(isWorkload),
		Objects:          in.count(isOther),
		CRDs:             in.count(driver.IsCRD),
		Slices:           len(sl.own),
	}
	if state.BlockingClaims, err = r.blockingClaims(ctx, names, sl.publisherPools); err != nil {
		return nil, false, err
	}
	if state.CustomResources, err = r.customResources(ctx, in); err != nil {
		return nil, false, err
	}
	if state.Pods, err = r.driverPods(ctx, st.Name, name); err != nil {
		return nil, false, err
	}
	slicesLeft := sl.own

	step := driver.NextRemovalStep(state)
	if step.Done {
		r.memory.forget(st.Name + "/" + name + "/")
		logger.Info("Driver removed")
		if r.Recorder != nil {
			r.Recorder.Eventf(st, nil, corev1.EventTypeNormal, "DriverRemoved", "Driver", "driver %s removed: nothing of it is left", name)
		}
		return nil, true, nil
	}
	if msg := driver.ForceWarning(name, state, step); msg != "" && r.memory.once(st.Name+"/"+name+"/!force") {
		logger.Info("Force removal with claims still allocated", "claims", state.BlockingClaims)
		if r.Recorder != nil {
			r.Recorder.Eventf(st, nil, corev1.EventTypeWarning, ReasonForceRemovalWithClaims, "Remove", "%s", msg)
		}
	}
	if msg := driver.KeptCRDsWarning(name, state, step); msg != "" && r.memory.once(st.Name+"/"+name+"/!crds") {
		logger.Info("Removal keeps CustomResourceDefinitions that still have custom resources", "customResources", state.CustomResources)
		if r.Recorder != nil {
			r.Recorder.Eventf(st, nil, corev1.EventTypeWarning, ReasonCustomResourceDefinitionsKept, "Remove", "%s", msg)
		}
	}
	for _, action := range step.Actions {
		logger.Info("Removal step", "phase", step.Phase, "action", action)
		if err := r.act(ctx, st, name, names, targets, policy, in, slicesLeft, taintGVK, action); err != nil {
			return nil, false, err
		}
	}
	status := driver.RemovalStatus(step, state, since, now)
	a := driver.AssessRemoval(name, status, r.observeRemoval(ctx, in, pub.nodesOf(names)))
	return &a, false, nil
}

// act carries out one removal action.
func (r *Reconciler) act(ctx context.Context, st *v1alpha1.DRAStack, name string, names []string, targets []driver.TaintTarget, policy v1alpha1.RemovalPolicy,
	in *installed, slicesLeft []resourcev1.ResourceSlice, taintGVK *schema.GroupVersionKind, action driver.RemovalAction) error {
	switch action {
	case driver.ActionTaint:
		for _, u := range driver.TaintRules(st.Name, name, names, targets, policy, taintGVK.GroupVersion().String()) {
			if in.findRule(u.GetName()) == nil {
				// Never label or change a rule of that name someone else
				// made: the removal stays in Tainting, and says why.
				other, err := r.existing(ctx, u)
				if err != nil {
					return err
				}
				if other != nil && !driver.OwnedBy(other, st.Name, name) {
					r.warnNotCreated(st, name, objectID(u.GetKind(), "", u.GetName()), driver.NotCreated(other, st.Name, name), u)
					continue
				}
			}
			if p := r.applyOne(ctx, u); p != nil {
				return fmt.Errorf("stop allocations of driver %s: %s", name, p.Message)
			}
		}
		// Rules no target names any more go once the new ones are in
		// place: never a moment without a taint.
		for _, o := range in.staleRules(targets) {
			if err := r.deleteObject(ctx, o); err != nil {
				return err
			}
		}
	case driver.ActionDeleteDeviceClasses:
		return r.deleteMatching(in.objects, func(gk schema.GroupKind) bool { return gk.Kind == "DeviceClass" }, ctx)
	case driver.ActionDeleteWorkloads:
		return r.deleteMatching(in.objects, isWorkload, ctx)
	case driver.ActionDeleteObjects:
		return r.deleteMatching(in.objects, isOther, ctx)
	case driver.ActionDeleteCRDs:
		return r.deleteMatching(in.objects, driver.IsCRD, ctx)
	case driver.ActionReleaseCRDs:
		for _, o := range in.objects {
			if driver.IsCRD(o.gvk.GroupKind()) {
				if err := r.releaseCRD(ctx, o); err != nil {
					return err
				}
			}
		}
	case driver.ActionDeleteSlices:
		for i := range slicesLeft {
			if err := r.Client.Delete(ctx, &slicesLeft[i]); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete ResourceSlice %s: %w", slicesLeft[i].Name, err)
			}
		}
	case driver.ActionUntaint:
		for _, o := range in.taintRules {
			if err := r.deleteObject(ctx, o); err != nil {
				return err
			}
		}
	}
	return nil
}

// driverPods counts the pods of the driver's workloads: pods with the
// driver's labels, except those of a DaemonSet or Deployment that exists
// and is someone else's (a copy of the driver's manifests carries the same
// pod labels; the removal must not wait for it).
func (r *Reconciler) driverPods(ctx context.Context, stack, name string) (int, error) {
	pods := &corev1.PodList{}
	if err := r.APIReader.List(ctx, pods, client.MatchingLabels(driver.Selector(stack, name))); err != nil {
		return 0, fmt.Errorf("list pods of driver %s: %w", name, err)
	}
	foreign := map[string]bool{}
	n := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		ref := metav1.GetControllerOf(p)
		kind, workload := "", ""
		switch {
		case ref == nil:
		case ref.Kind == "DaemonSet":
			kind, workload = "DaemonSet", ref.Name
		case ref.Kind == "ReplicaSet" && p.Labels[appsv1.DefaultDeploymentUniqueLabelKey] != "":
			kind, workload = "Deployment", strings.TrimSuffix(ref.Name, "-"+p.Labels[appsv1.DefaultDeploymentUniqueLabelKey])
		}
		if kind != "" {
			key := kind + " " + p.Namespace + "/" + workload
			theirs, known := foreign[key]
			if !known {
				u := &unstructured.Unstructured{}
				u.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind(kind))
				u.SetNamespace(p.Namespace)
				u.SetName(workload)
				other, err := r.existing(ctx, u)
				if err != nil {
					return 0, err
				}
				theirs = other != nil && !driver.OwnedBy(other, stack, name)
				foreign[key] = theirs
			}
			if theirs {
				continue
			}
		}
		n++
	}
	return n, nil
}

func (r *Reconciler) deleteMatching(objs []object, match func(schema.GroupKind) bool, ctx context.Context) error {
	for _, o := range objs {
		if match(o.gvk.GroupKind()) {
			if err := r.deleteObject(ctx, o); err != nil {
				return err
			}
		}
	}
	return nil
}

func isWorkload(gk schema.GroupKind) bool {
	return driver.IsWorkload(gk)
}

// isOther: the kinds ActionDeleteObjects deletes, neither workloads nor
// CustomResourceDefinitions.
func isOther(gk schema.GroupKind) bool {
	return !driver.IsWorkload(gk) && !driver.IsCRD(gk)
}

// ReasonCustomResourceDefinitionsKept is the reason of the Warning when a
// removal leaves a driver's CustomResourceDefinitions because custom
// resources of them exist.
const ReasonCustomResourceDefinitionsKept = "CustomResourceDefinitionsKept"

// customResources lists the custom resources ("Kind namespace/name",
// sorted) of the driver's CustomResourceDefinitions: the served version of
// each definition, read from the API server, then its objects' metadata.
// A definition being deleted or not found has none to wait for.
func (r *Reconciler) customResources(ctx context.Context, in *installed) ([]string, error) {
	var out []string
	for _, o := range in.objects {
		if !driver.IsCRD(o.gvk.GroupKind()) {
			continue
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Name: o.GetName()}, crd); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("get CustomResourceDefinition %s: %w", o.GetName(), err)
		}
		version := servedVersion(crd)
		if version == "" {
			continue
		}
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(schema.GroupVersionKind{Group: crd.Spec.Group, Version: version, Kind: crd.Spec.Names.ListKind})
		if err := r.APIReader.List(ctx, list); err != nil {
			if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
				continue // not served yet, or any more
			}
			return nil, fmt.Errorf("list %s: %w", crd.Spec.Names.Plural, err)
		}
		for _, item := range list.Items {
			out = append(out, objectID(crd.Spec.Names.Kind, item.Namespace, item.Name))
		}
	}
	slices.Sort(out)
	return out, nil
}

// servedVersion is a definition's storage version when served, else its
// first served version.
func servedVersion(crd *apiextensionsv1.CustomResourceDefinition) string {
	first := ""
	for _, v := range crd.Spec.Versions {
		if v.Served && v.Storage {
			return v.Name
		}
		if v.Served && first == "" {
			first = v.Name
		}
	}
	return first
}

// releaseCRD removes the drastack labels and annotations from a kept
// CustomResourceDefinition, with a merge patch that touches nothing else:
// an apply would remove the fields the operator applied, its schema
// included. Released, it is no longer the driver's, and the removal
// completes.
func (r *Reconciler) releaseCRD(ctx context.Context, o object) error {
	patch := map[string]any{"metadata": map[string]any{
		"labels":      map[string]any{driver.LabelStack: nil, driver.LabelDriver: nil, driver.LabelComponent: nil, driver.LabelManagedBy: nil},
		"annotations": map[string]any{driver.AnnotationRemovalPolicy: nil, driver.AnnotationDriverNames: nil},
	}}
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(o.gvk)
	u.SetName(o.GetName())
	if err := r.Client.Patch(ctx, u, client.RawPatch(types.MergePatchType, data)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("release CustomResourceDefinition %s: %w", o.GetName(), err)
	}
	log.FromContext(ctx).Info("Kept a CustomResourceDefinition that still has custom resources, without the drastack labels", "crd", o.GetName())
	return nil
}

// blockingClaims lists the allocated claims (namespace/name, sorted) with
// a device of one of the driver names, except devices of the pools the
// central publisher publishes under the same name: those are not the
// driver's, and its removal does not wait for them.
func (r *Reconciler) blockingClaims(ctx context.Context, names []string, publisherPools map[string][]string) ([]string, error) {
	claims := &resourcev1.ResourceClaimList{}
	if err := r.APIReader.List(ctx, claims); err != nil {
		return nil, fmt.Errorf("list resource claims: %w", err)
	}
	var out []string
	for _, c := range claims.Items {
		if c.Status.Allocation == nil {
			continue
		}
		if slices.ContainsFunc(c.Status.Allocation.Devices.Results, func(res resourcev1.DeviceRequestAllocationResult) bool {
			return slices.Contains(names, res.Driver) && !slices.Contains(publisherPools[res.Driver], res.Pool)
		}) {
			out = append(out, c.Namespace+"/"+c.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// driverSlicesOf are the ResourceSlices under a driver's names, split by
// who wrote them.
type driverSlicesOf struct {
	// own are the slices of the driver's plugins: every slice of its
	// names but the central publisher's. The removal deletes those that
	// are left once its plugins are gone.
	own []resourcev1.ResourceSlice
	// ownPools and publisherPools are the pool names of each, by driver
	// name.
	ownPools, publisherPools map[string][]string
}

// driverSlices lists the ResourceSlices of the driver names. The slices
// the central publisher writes for spec.multiHost (owned by the DRAStack)
// belong to another controller: they are never deleted or tainted by a
// driver's removal.
func (r *Reconciler) driverSlices(ctx context.Context, names []string) (driverSlicesOf, error) {
	out := driverSlicesOf{ownPools: map[string][]string{}, publisherPools: map[string][]string{}}
	for _, n := range names {
		list := &resourcev1.ResourceSliceList{}
		sel := fields.OneTermEqualSelector(resourcev1.ResourceSliceSelectorDriver, n)
		if err := r.APIReader.List(ctx, list, client.MatchingFieldsSelector{Selector: sel}); err != nil {
			return out, fmt.Errorf("list ResourceSlices of driver %s: %w", n, err)
		}
		for _, s := range list.Items {
			if ownedByStack(s.OwnerReferences) {
				out.publisherPools[n] = appendNew(out.publisherPools[n], s.Spec.Pool.Name)
				continue
			}
			out.own = append(out.own, s)
			out.ownPools[n] = appendNew(out.ownPools[n], s.Spec.Pool.Name)
		}
	}
	return out, nil
}

func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

func ownedByStack(refs []metav1.OwnerReference) bool {
	for _, ref := range refs {
		if ref.Kind == "DRAStack" && ref.APIVersion == v1alpha1.GroupVersion.String() {
			return true
		}
	}
	return false
}

// observeRemoval reads what a removal's status shows besides the removal:
// the plugin DaemonSet's counts while it still exists, and the nodes that
// still publish.
func (r *Reconciler) observeRemoval(ctx context.Context, in *installed, publishing map[string]bool) driver.Observed {
	o := driver.Observed{PublishingNodes: publishing}
	for _, obj := range in.objects {
		if obj.gvk.Kind != "DaemonSet" || obj.GetLabels()[driver.LabelComponent] != driver.ComponentKubeletPlugin {
			continue
		}
		ds := &appsv1.DaemonSet{}
		if err := r.Client.Get(ctx, client.ObjectKeyFromObject(&obj.PartialObjectMetadata), ds); err == nil {
			o.DaemonSet = ds
		}
	}
	return o
}
