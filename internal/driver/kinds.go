package driver

import (
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ManagedKinds are the kinds a render may produce, in the order they are
// applied: the namespace and the CustomResourceDefinitions first (the
// workloads that watch custom resources start after their definitions are
// established, see CRDEstablished), identities and permissions before the
// admission policy, classes before the workloads that publish devices for
// them. The controller lists exactly these kinds (by label) to find objects
// to prune, so a render that produced another kind would leave it behind on
// removal; Render refuses it instead.
var ManagedKinds = []schema.GroupVersionKind{
	{Version: "v1", Kind: "Namespace"},
	CRDKind,
	{Version: "v1", Kind: "ServiceAccount"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRoleBinding"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "Role"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "RoleBinding"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicy"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicyBinding"},
	{Group: "resource.k8s.io", Version: "v1", Kind: "DeviceClass"},
	{Group: "apps", Version: "v1", Kind: "DaemonSet"},
	{Group: "apps", Version: "v1", Kind: "Deployment"},
}

// CRDKind is the kind of the CustomResourceDefinitions a profile installs
// for its driver (NVIDIA's ComputeDomain). They are the driver's own
// objects like the others, with three differences: prune never deletes
// them (custom resources would go with them; a definition the render no
// longer produces stays until the driver is removed), a removal deletes
// them last and only when no custom resource of them is left, and
// workloads are applied only once they are established.
var CRDKind = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

// WorkloadKinds are the managed kinds that run pods; removal waits for
// their pods to be gone before it deletes leftover ResourceSlices, so that
// no plugin publishes again after the cleanup.
var WorkloadKinds = []schema.GroupKind{
	{Group: "apps", Kind: "DaemonSet"},
	{Group: "apps", Kind: "Deployment"},
}

// IsWorkload reports whether a kind runs pods.
func IsWorkload(gk schema.GroupKind) bool {
	return slices.Contains(WorkloadKinds, gk)
}

// IsCRD reports whether a kind is CustomResourceDefinition.
func IsCRD(gk schema.GroupKind) bool {
	return gk == CRDKind.GroupKind()
}

// Prunable reports whether prune may delete an object of the kind that
// the render no longer produces: every kind but CustomResourceDefinitions.
func Prunable(gk schema.GroupKind) bool {
	return !IsCRD(gk)
}

// kindRank orders objects for apply; unknown kinds sort last.
func kindRank(gk schema.GroupKind) int {
	for i, k := range ManagedKinds {
		if k.GroupKind() == gk {
			return i
		}
	}
	return len(ManagedKinds)
}

// managedGVK reports whether a rendered object's kind and version are ones
// the controller manages.
func managedGVK(gvk schema.GroupVersionKind) bool {
	return slices.Contains(ManagedKinds, gvk)
}

// clusterScoped reports whether a managed kind has no namespace.
func clusterScoped(gk schema.GroupKind) bool {
	switch gk.Kind {
	case "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "DeviceClass":
		return true
	}
	return false
}

// CRDEstablished reports whether a CustomResourceDefinition, as the API
// server returned it, has the Established condition True: only then are
// its custom resources served, and a workload that lists them starts
// cleanly.
func CRDEstablished(u *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if ok && m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}
