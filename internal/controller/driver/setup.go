package driver

import (
	"context"
	"reflect"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/driver"
)

// The operator holds every permission the driver profiles grant, because
// Kubernetes lets nobody create a Role granting more than they hold
// (privilege escalation prevention), and the verbs it needs to manage
// drivers: their namespace, identities, permissions, admission policies,
// device classes, workloads, taints, and the slices they leave behind.
//
// +kubebuilder:rbac:groups=drastack.io,resources=drastacks,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=drastack.io,resources=drastacks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=drastack.io,resources=drastacks/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=namespaces;serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;update
// +kubebuilder:rbac:groups=apps,resources=daemonsets;deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=controllerrevisions,verbs=get;list;watch
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles;clusterrolebindings;roles;rolebindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies;validatingadmissionpolicybindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=resource.k8s.io,resources=deviceclasses;devicetaintrules;resourceslices,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaims/status,verbs=update
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaimtemplates,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=resource.nvidia.com,resources=computedomains,verbs=get;list;watch;update
// +kubebuilder:rbac:groups=resource.nvidia.com,resources=computedomains/status,verbs=update
// +kubebuilder:rbac:groups=resource.nvidia.com,resources=computedomaincliques,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the controller. It reconciles the DRAStack
// when its spec, deletion, finalizers or cluster probe change, when an
// object labelled for one of its drivers changes, and when a node starts
// or stops publishing ResourceSlices for one of its drivers.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	owned := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		stack := obj.GetLabels()[driver.LabelStack]
		if stack == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: stack}}}
	})
	labelled := builder.WithPredicates(predicate.NewPredicateFuncs(func(obj client.Object) bool {
		return obj.GetLabels()[driver.LabelStack] != ""
	}))
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.DRAStack{}, builder.WithPredicates(stackChanged())).
		Watches(&appsv1.DaemonSet{}, owned, labelled).
		Watches(&appsv1.Deployment{}, owned, labelled).
		Watches(&resourcev1.DeviceClass{}, owned, labelled).
		Watches(&resourcev1.ResourceSlice{}, handler.EnqueueRequestsFromMapFunc(r.stacksOfSlice), builder.WithPredicates(sliceAppearedOrGone())).
		Named("drastack-driver").
		Complete(r)
}

// stackChanged passes DRAStack events that change what this controller
// does: not its own status writes (that would loop), nor other
// controllers' status, except the cluster probe, which decides
// requirements and how drivers are removed.
func stackChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*v1alpha1.DRAStack)
			n, ok2 := e.ObjectNew.(*v1alpha1.DRAStack)
			if !ok1 || !ok2 {
				return true
			}
			return o.Generation != n.Generation ||
				!o.DeletionTimestamp.Equal(n.DeletionTimestamp) ||
				!slices.Equal(o.Finalizers, n.Finalizers) ||
				!reflect.DeepEqual(clusterFeatures(o), clusterFeatures(n))
		},
	}
}

func clusterFeatures(st *v1alpha1.DRAStack) any {
	if st.Status.Cluster == nil {
		return nil
	}
	return []any{st.Status.Cluster.ResourceAPIVersions, st.Status.Cluster.Features}
}

// sliceAppearedOrGone passes slice creations and deletions: the set of
// publishing nodes changes only then, and slices are updated often.
func sliceAppearedOrGone() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(event.UpdateEvent) bool { return false },
	}
}

// stacksOfSlice enqueues the DRAStacks that declare or are removing a
// driver the slice belongs to.
func (r *Reconciler) stacksOfSlice(ctx context.Context, obj client.Object) []reconcile.Request {
	slice, ok := obj.(*resourcev1.ResourceSlice)
	if !ok {
		return nil
	}
	stacks := &v1alpha1.DRAStackList{}
	if err := r.Client.List(ctx, stacks); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, st := range stacks.Items {
		if stackUsesDriver(&st, slice.Spec.Driver) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: st.Name}})
		}
	}
	return out
}

func stackUsesDriver(st *v1alpha1.DRAStack, name string) bool {
	for i := range st.Spec.Drivers {
		if slices.Contains(driver.DriverNames(&st.Spec.Drivers[i]), name) {
			return true
		}
	}
	for _, d := range st.Status.Drivers {
		if d.Name == name && d.Removal != nil {
			return true
		}
	}
	return false
}
