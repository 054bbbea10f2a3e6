package driver

import (
	"context"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/driver"
)

// publishing maps each DRA driver name to the nodes that have at least one
// of its node-local ResourceSlices.
type publishing map[string]map[string]bool

// publishingNodes reads every ResourceSlice from the cache once per
// reconcile.
func (r *Reconciler) publishingNodes(ctx context.Context) (publishing, error) {
	// Read only the node and driver names: no copy of the cache's slices
	// (at 1,000 nodes a copied list was 200 MB for each reconcile).
	list := &resourcev1.ResourceSliceList{}
	if err := r.Client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list ResourceSlices: %w", err)
	}
	out := publishing{}
	for _, s := range list.Items {
		if s.Spec.NodeName == nil || *s.Spec.NodeName == "" {
			continue
		}
		if out[s.Spec.Driver] == nil {
			out[s.Spec.Driver] = map[string]bool{}
		}
		out[s.Spec.Driver][*s.Spec.NodeName] = true
	}
	return out, nil
}

// nodesOf merges the publishing nodes of several driver names.
func (p publishing) nodesOf(names []string) map[string]bool {
	out := map[string]bool{}
	for _, n := range names {
		for node := range p[n] {
			out[node] = true
		}
	}
	return out
}

// observe gathers what Assess needs about one declared driver.
func (r *Reconciler) observe(ctx context.Context, st *v1alpha1.DRAStack, d *declared, pub publishing, now time.Time) (driver.Observed, error) {
	o := driver.Observed{Now: now, Rendered: d.rendered, RenderErr: d.renderErr, ApplyProblems: d.problems, Cluster: st.Status.Cluster, PendingCRDs: d.pendingCRDs}
	names := driver.DriverNames(&d.spec)
	if d.rendered != nil {
		names = d.rendered.DriverNames
	}
	o.PublishingNodes = pub.nodesOf(names)
	classes := &resourcev1.DeviceClassList{}
	if err := r.Client.List(ctx, classes, client.MatchingLabels(driver.Selector(st.Name, d.spec.Name))); err != nil {
		return o, fmt.Errorf("list DeviceClasses of driver %s: %w", d.spec.Name, err)
	}
	for _, c := range classes.Items {
		if c.DeletionTimestamp == nil {
			o.DeviceClasses = append(o.DeviceClasses, c.Name)
		}
	}
	if d.rendered == nil {
		return o, nil
	}
	namespace := d.rendered.Objects[0].GetName()

	ds := &appsv1.DaemonSet{}
	// Someone else's workload of the same name is not the driver's: it
	// neither serves nor fails for it (see ownership.go).
	switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: d.rendered.PluginDaemonSet}, ds); {
	case err == nil && driver.OwnedBy(ds, st.Name, d.spec.Name):
		o.DaemonSet = ds
	case err == nil:
	case !apierrors.IsNotFound(err):
		return o, fmt.Errorf("get DaemonSet of driver %s: %w", d.spec.Name, err)
	}
	for _, name := range d.rendered.Controllers {
		dep := &appsv1.Deployment{}
		switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, dep); {
		case err == nil && driver.OwnedBy(dep, st.Name, d.spec.Name):
			o.Deployments = append(o.Deployments, *dep)
		case err == nil:
		case !apierrors.IsNotFound(err):
			return o, fmt.Errorf("get Deployment %s: %w", name, err)
		}
	}

	pods := &corev1.PodList{}
	if err := r.APIReader.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels(driver.Selector(st.Name, d.spec.Name))); err != nil {
		return o, fmt.Errorf("list pods of driver %s: %w", d.spec.Name, err)
	}
	o.Pods = pods.Items

	if o.DaemonSet != nil {
		revs := &appsv1.ControllerRevisionList{}
		sel := driver.Selector(st.Name, d.spec.Name)
		sel[driver.LabelComponent] = driver.ComponentKubeletPlugin
		if err := r.APIReader.List(ctx, revs, client.InNamespace(namespace), client.MatchingLabels(sel)); err != nil {
			return o, fmt.Errorf("list controller revisions of driver %s: %w", d.spec.Name, err)
		}
		if newest := newestRevision(revs.Items, o.DaemonSet.UID); newest != nil {
			o.CurrentRevision = newest.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]
			o.RevisionCreated = newest.CreationTimestamp.Time
			o.RevisionNumber = newest.Revision
		}
		// A DaemonSet the controller has seen that targets no node: say
		// which of the node selector, the profile's node affinity or the
		// taints leaves none. During a rollout: the nodes that must keep
		// publishing for the driver to stay Ready. Nodes are cached; they
		// are listed only then.
		ds := o.DaemonSet
		seen := ds.Status.ObservedGeneration >= ds.Generation
		rolling := !seen || ds.Status.UpdatedNumberScheduled < ds.Status.DesiredNumberScheduled || ds.Status.NumberAvailable < ds.Status.DesiredNumberScheduled
		if (seen && ds.Status.DesiredNumberScheduled == 0) || rolling {
			nodes := &corev1.NodeList{}
			if err := r.Client.List(ctx, nodes); err != nil {
				return o, fmt.Errorf("list nodes for driver %s: %w", d.spec.Name, err)
			}
			fit := driver.FitNodes(&ds.Spec.Template.Spec, nodes.Items)
			o.NodeFit = &fit
		}
	}
	return o, nil
}

// newestRevision is the DaemonSet's revision with the highest number: the
// template its rollout moves to.
func newestRevision(revs []appsv1.ControllerRevision, owner types.UID) *appsv1.ControllerRevision {
	var out *appsv1.ControllerRevision
	for i := range revs {
		rev := &revs[i]
		if !slices.ContainsFunc(rev.OwnerReferences, func(ref metav1.OwnerReference) bool { return ref.UID == owner }) {
			continue
		}
		if out == nil || rev.Revision > out.Revision {
			out = rev
		}
	}
	return out
}
