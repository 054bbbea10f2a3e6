package driver

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ManagedKinds are the kinds a render may produce, in the order they are
// applied: identities and permissions before the admission policy, classes
// before the workloads that publish devices for them. The controller lists
// exactly these kinds (by label) to find objects to prune, so a render that
// produced another kind would leave it behind on removal; Render refuses
// it instead.
var ManagedKinds = []schema.GroupVersionKind{
	{Version: "v1", Kind: "Namespace"},
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

// WorkloadKinds are the managed kinds that run pods; removal waits for
// their pods to be gone before it deletes leftover ResourceSlices, so that
// no plugin publishes again after the cleanup.
var WorkloadKinds = []schema.GroupKind{
	{Group: "apps", Kind: "DaemonSet"},
	{Group: "apps", Kind: "Deployment"},
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
	for _, k := range ManagedKinds {
		if k == gvk {
			return true
		}
	}
	return false
}

// clusterScoped reports whether a managed kind has no namespace.
func clusterScoped(gk schema.GroupKind) bool {
	switch gk.Kind {
	case "Namespace", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "DeviceClass":
		return true
	}
	return false
}
