package operator

import (
	"encoding/json"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/driver"
)

// cacheByObject scopes what the manager caches per kind: only the objects
// a controller reads, and of the numerous kinds (one or more per node)
// only the fields some code reads. Every controller shares these objects
// (the pool model and the engine's view point at them instead of copying
// them), so what a transform drops is dropped once for all.
func cacheByObject() map[client.Object]cache.ByObject {
	by := map[client.Object]cache.ByObject{
		// Only the pool controller reads DevicePools, and never their
		// managedFields, which for a pool with many counters are as
		// large as its status: 10,000 of them would cost tens of MB.
		&v1alpha1.DevicePool{}: {Transform: cache.TransformStripManagedFields()},
		// Nothing reads who wrote a slice.
		&resourceapi.ResourceSlice{}: {Transform: cache.TransformStripManagedFields()},
		&corev1.Node{}:               {Transform: slimNode},
		&resourceapi.ResourceClaim{}: {Transform: slimClaim},
	}
	// The driver lifecycle controller watches the objects it renders for
	// drivers, to restore them when they are deleted or changed; no
	// controller reads the cluster's other namespaces, service accounts,
	// roles, admission policies or CustomResourceDefinitions, so only those
	// labelled for a stack are cached (metadata only, see driverctrl
	// SetupWithManager).
	stackLabelled, err := labels.NewRequirement(driver.LabelStack, selection.Exists, nil)
	utilruntime.Must(err)
	owned := cache.ByObject{Label: labels.NewSelector().Add(*stackLabelled)}
	for _, obj := range []client.Object{
		&corev1.Namespace{}, &corev1.ServiceAccount{},
		&rbacv1.ClusterRole{}, &rbacv1.ClusterRoleBinding{}, &rbacv1.Role{}, &rbacv1.RoleBinding{},
		&admissionregistrationv1.ValidatingAdmissionPolicy{}, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{},
		&apiextensionsv1.CustomResourceDefinition{},
	} {
		by[obj] = owned
	}
	return by
}

// slimNode keeps of a cached Node what the controllers read: its
// metadata without managedFields (labels select devices, pools and
// hosts), its spec (taints and cordons for placement), and of its status
// the capacity (driver profiles), the allocatable resources (placement)
// and the declared features (the engines). The images, conditions,
// addresses and system information a kubelet reports are most of a real
// node's size and change with every heartbeat; nothing here reads them.
func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	n.ManagedFields = nil
	n.Status = corev1.NodeStatus{
		Capacity:         n.Status.Capacity,
		Allocatable:      n.Status.Allocatable,
		DeclaredFeatures: n.Status.DeclaredFeatures,
	}
	return n, nil
}

// allocationOwner is the managedFields entry's field set kept for the
// manager that owns a claim's status.allocation: claimpolicy.AllocatedBy
// reads no more than that.
var allocationOwner = []byte(`{"f:status":{"f:allocation":{}}}`)

// slimClaim keeps of a cached claim's managedFields which manager wrote
// what when, and of the field sets only whether it owns status.allocation
// (claimpolicy.AllocatedBy: the operator recognises its own allocations
// by it). The field sets of every write, kept whole, would grow each
// claim by its spec and status again.
func slimClaim(obj any) (any, error) {
	c, ok := obj.(*resourceapi.ResourceClaim)
	if !ok {
		return obj, nil
	}
	for i := range c.ManagedFields {
		mf := &c.ManagedFields[i]
		if mf.FieldsV1 == nil {
			continue
		}
		owns := ownsAllocation(mf.FieldsV1.Raw)
		mf.FieldsV1 = nil
		if owns {
			mf.FieldsV1 = &metav1.FieldsV1{Raw: allocationOwner}
		}
	}
	return c, nil
}

// ownsAllocation says whether a field set names status.allocation.
func ownsAllocation(raw []byte) bool {
	var fields struct {
		Status map[string]json.RawMessage `json:"f:status"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &fields) != nil {
		return false
	}
	_, ok := fields.Status["f:allocation"]
	return ok
}
