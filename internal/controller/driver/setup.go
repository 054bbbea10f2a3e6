package driver

import (
	"context"
	"maps"
	"reflect"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
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

// RBAC of the driver lifecycle controller. Each marker says which code
// needs it. Server-side apply (apply.go applyOne, namespace.go) is a PATCH,
// and a PATCH that creates the object is also authorized as create, so
// every applied kind needs create and patch, never update.
//
// Kubernetes lets nobody create or change a Role, ClusterRole or binding
// that grants more than they hold (RBAC privilege escalation prevention),
// so the operator also holds every rule the driver profiles grant
// (internal/driver/profiles), exactly those verbs and no more: markers
// "held only to grant it to ..." are those. The granted rules name no
// resourceNames, so neither can the operator's (a rule with resourceNames
// does not cover one without). Holding escalate/bind on roles instead
// would be broader. TestProfileGrantsAreHeld checks the rendered profiles
// against config/rbac/role.yaml.
//
// reconciler.go Reconcile, setFinalizer (the DRAStack and its finalizer,
// a merge patch), setup.go For and stacksOfSlice (cache).
// +kubebuilder:rbac:groups=drastack.io,resources=drastacks,verbs=get;list;watch;patch
// status.go writeStatus: statusapply.Apply, server-side apply of the status.
// +kubebuilder:rbac:groups=drastack.io,resources=drastacks/status,verbs=patch
// inventory.go inventory and namespace.go cleanupNamespaces (metadata
// lists), apply.go applyNamespace (apply), namespace.go cleanupNamespaces
// (delete, or release by apply).
// setup.go Watches (metadata informer, scoped to the stack label by
// internal/operator): a deleted or changed object is restored at once.
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=list;watch;create;patch;delete
// inventory.go inventory (metadata lists), apply.go apply (apply),
// apply.go prune and removal.go act via deleteObject (delete), setup.go
// Watches (metadata informers scoped to the stack label by
// internal/operator, so that a deleted or edited policy binding, role or
// service account is restored within seconds).
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=list;watch;create;patch;delete
// inventory.go inventory (metadata lists), apply.go apply (apply: patch,
// and create for a new object), apply.go prune and removal.go act
// (delete), setup.go Watches (metadata informers).
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles;clusterrolebindings;roles;rolebindings,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies;validatingadmissionpolicybindings,verbs=list;watch;create;patch;delete
// apply.go replaceDrifted (get, and update: a PUT): a policy, binding or
// role that another manager changed is replaced with the render. Held for
// that: the e2e drift test changes a policy binding, not the others.
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles;clusterrolebindings;roles;rolebindings,verbs=get;update
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies;validatingadmissionpolicybindings,verbs=get;update
// inventory.go inventory (metadata lists), removal.go act ActionTaint
// (apply), apply.go prune and removal.go act ActionUntaint (delete).
// +kubebuilder:rbac:groups=resource.k8s.io,resources=devicetaintrules,verbs=list;create;patch;delete
// setup.go Watches and observe.go observe (cache), inventory.go inventory
// (metadata lists), apply.go apply (apply), removal.go act (delete).
// +kubebuilder:rbac:groups=resource.k8s.io,resources=deviceclasses,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups=apps,resources=daemonsets;deployments,verbs=list;watch;create;patch;delete
// Held only to grant it to the dranet plugin
// (profiles/dranet/0310_kubelet_plugin_dranet_rbac.yaml: get).
// +kubebuilder:rbac:groups=resource.k8s.io,resources=deviceclasses,verbs=get
// Held only to grant it to the nvidia-gpu compute-domain controller
// (profiles/nvidia-gpu/0600_controller.yaml, Role controller: get, update)
// and, with the MPSSupport feature gate, its GPU plugin
// (profile_nvidia_options.go tune, Role kubelet-plugin: the MPS control
// daemon Deployments).
// +kubebuilder:rbac:groups=apps,resources=daemonsets;deployments,verbs=get;update
// observe.go observe: the plugin DaemonSet's revisions (APIReader list).
// +kubebuilder:rbac:groups=apps,resources=controllerrevisions,verbs=list
// observe.go observe and removal.go removeDriver: the driver's pods
// (APIReader list, cluster-wide during a removal).
// +kubebuilder:rbac:groups="",resources=pods,verbs=list
// Held only to grant it to the nvidia-gpu kubelet plugin, compute-domain
// controller (profiles/nvidia-gpu 0310 and 0600, ClusterRoles: get, watch)
// and IMEX daemons (0700: patch).
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;watch;patch
// removal.go blockingClaims: allocated claims block a removal (APIReader
// list).
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaims,verbs=list
// Held only to grant it to the kubelet plugin of every profile
// (profiles/common/0300_kubelet_plugin_rbac.yaml: get) and the nvidia-gpu
// kubelet plugin (profiles/nvidia-gpu/0310: get, watch).
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaims,verbs=get;watch
// Held only to grant it to the dranet plugin
// (profiles/dranet/0310_kubelet_plugin_dranet_rbac.yaml).
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaims/status,verbs=update;patch
// setup.go Watches and observe.go publishingNodes (cache), removal.go
// leftoverSlices (APIReader list), removal.go act ActionDeleteSlices
// (delete).
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceslices,verbs=list;watch;delete
// Held only to grant it to the kubelet plugin of every profile
// (profiles/common/0300_kubelet_plugin_rbac.yaml), which publishes its
// node's slices; create and update are also what the multi-host publisher
// sends (internal/controller/publisher).
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceslices,verbs=get;create;update;patch
// observe.go observe: which nodes a plugin that targets none could run
// on (cache: list, watch). Also held to grant it to the kubelet plugin of
// every profile (common/0300: get) and the nvidia-gpu kubelet plugin and
// compute-domain controller (nvidia-gpu 0310 and 0600: get, list, watch).
// +kubebuilder:rbac:groups="",resources=nodes,verbs=list;watch
// Held only to grant it to the kubelet plugin of every profile (common/0300:
// get) and the nvidia-gpu kubelet plugin and compute-domain controller
// (nvidia-gpu 0310 and 0600: get, update).
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;update
// Held only to grant it to the nvidia-gpu compute-domain controller
// (profiles/nvidia-gpu/0600_controller.yaml, ClusterRole controller).
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaimtemplates,verbs=get;list;watch;create;update;delete
// removal.go customResources: a removal waits for (Drain) or keeps the
// definitions for (Force) the custom resources of a profile's
// CustomResourceDefinitions (APIReader list). Held also to grant it to the
// nvidia-gpu kubelet plugin (0310: get, list, watch), compute-domain
// controller (0600: get, list, watch) and IMEX daemons (0700: get, list,
// watch).
// +kubebuilder:rbac:groups=resource.nvidia.com,resources=computedomains;computedomains/status;computedomaincliques,verbs=get;list;watch
// Held only to grant it to the nvidia-gpu compute-domain controller (0600:
// update) and IMEX daemons
// (profiles/nvidia-gpu/0700_compute_domain_daemon_rbac.yaml: update and
// patch, also of computedomains/status, and create of
// computedomaincliques).
// +kubebuilder:rbac:groups=resource.nvidia.com,resources=computedomains;computedomains/status;computedomaincliques,verbs=update;patch
// Held only to grant it to the nvidia-gpu IMEX daemons (0700).
// +kubebuilder:rbac:groups=resource.nvidia.com,resources=computedomaincliques,verbs=create
// inventory.go inventory (metadata list), setup.go Watches (metadata
// informer scoped to the stack label), apply.go apply (server-side apply
// creates a missing definition: create cannot name it).
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=list;watch;create
// apply.go apply (patch), removal.go customResources (get), releaseCRD
// (patch) and act ActionDeleteCRDs (delete): only the definitions the
// profiles install, by name (TestProfileCRDsAreHeld).
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;patch;delete,resourceNames=computedomains.resource.nvidia.com;computedomaincliques.resource.nvidia.com
// Held only to grant it to the dranet plugin
// (profiles/dranet/0310_kubelet_plugin_dranet_rbac.yaml), which records
// Events through the core API.
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch;update
// Held only to grant it to the dranet plugin (0310): the node-scoped verbs
// on the driver part of claims, for its own driver name only.
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaims/driver,verbs=associated-node:patch;associated-node:update,resourceNames=dra.net
// reconciler.go recordTransitions and removal.go removeDriver: Recorder
// (events.k8s.io/v1 through the manager's event broadcaster).
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the controller. It reconciles the DRAStack
// when its spec, deletion, finalizers or cluster probe change, when an
// object labelled for one of its drivers changes or is deleted (every
// kind of driver.ManagedKinds: the reconcile applies it again, see
// apply; a CustomResourceDefinition also when it becomes established),
// when a node starts or stops publishing ResourceSlices for one of its
// drivers, and when a node's device plugins change what a profile refuses
// (nodeResourcesChanged).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	RegisterMetrics()
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
		Watches(&corev1.Namespace{}, owned, labelled, builder.OnlyMetadata).
		Watches(&corev1.ServiceAccount{}, owned, labelled, builder.OnlyMetadata).
		Watches(&rbacv1.ClusterRole{}, owned, labelled, builder.OnlyMetadata).
		Watches(&rbacv1.ClusterRoleBinding{}, owned, labelled, builder.OnlyMetadata).
		Watches(&rbacv1.Role{}, owned, labelled, builder.OnlyMetadata).
		Watches(&rbacv1.RoleBinding{}, owned, labelled, builder.OnlyMetadata).
		Watches(&admissionregistrationv1.ValidatingAdmissionPolicy{}, owned, labelled, builder.OnlyMetadata).
		Watches(&admissionregistrationv1.ValidatingAdmissionPolicyBinding{}, owned, labelled, builder.OnlyMetadata).
		Watches(&apiextensionsv1.CustomResourceDefinition{}, owned, labelled, builder.OnlyMetadata).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.allStacks), builder.WithPredicates(nodeResourcesChanged(driver.WatchedNodeResources()))).
		Watches(&resourcev1.ResourceSlice{}, handler.EnqueueRequestsFromMapFunc(r.stacksOfSlice), builder.WithPredicates(sliceAppearedOrGone())).
		Named("drastack-driver").
		Complete(r)
}

// allStacks enqueues every DRAStack: a node whose device plugins changed
// may change the render of any driver that asks about them.
func (r *Reconciler) allStacks(ctx context.Context, _ client.Object) []reconcile.Request {
	stacks := &v1alpha1.DRAStackList{}
	if err := r.Client.List(ctx, stacks); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(stacks.Items))
	for _, st := range stacks.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: st.Name}})
	}
	return out
}

// nodeResourcesChanged passes the node events that can change a render
// (driver.NodeResources): a node that gains or loses capacity for one of
// the resources, comes or goes with it, or is relabelled while it has it
// (its labels decide whether the plugin would run there). Heartbeats and
// every other node change pass nothing.
func nodeResourcesChanged(resources []string) predicate.Predicate {
	served := func(obj client.Object) []string {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return nil
		}
		return servedResources(n, resources)
	}
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return len(served(e.Object)) > 0 },
		DeleteFunc:  func(e event.DeleteEvent) bool { return len(served(e.Object)) > 0 },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			before, after := served(e.ObjectOld), served(e.ObjectNew)
			if !slices.Equal(before, after) {
				return true
			}
			return len(after) > 0 && !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels())
		},
	}
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
