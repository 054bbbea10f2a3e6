package driver

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels on every object the driver lifecycle writes. Pruning and removal
// find a driver's objects by these labels alone, so an object that loses
// them is no longer managed (and no longer deleted) by the operator.
const (
	// LabelStack names the DRAStack the object belongs to.
	LabelStack = "drastack.io/stack"
	// LabelDriver names the DRA driver the object belongs to. The shared
	// driver namespace carries no driver label: it outlives any one driver.
	LabelDriver = "drastack.io/driver"
	// LabelComponent says what part of a driver the object is:
	// kubelet-plugin, controller, removal, namespace.
	LabelComponent = "drastack.io/component"
	// LabelManagedBy is the well-known label tools filter on.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByValue is the value of LabelManagedBy.
	ManagedByValue = "drastack"
)

// Components, the values of LabelComponent.
const (
	// ComponentKubeletPlugin marks the kubelet-plugin DaemonSet and its pods.
	ComponentKubeletPlugin = "kubelet-plugin"
	// ComponentController marks a driver's central controller Deployment and its pods.
	ComponentController = "controller"
	// ComponentRemoval marks the DeviceTaintRules that stop allocations
	// while a driver is removed.
	ComponentRemoval = "removal"
	// ComponentNamespace marks the shared namespace of driver workloads.
	ComponentNamespace = "namespace"
)

// FieldManager is the server-side apply field manager of everything the
// driver lifecycle writes, so conflicts with other managers name it.
const FieldManager = "drastack-driver"

// maxPrefix bounds the name prefix so that prefixed names stay well inside
// the 63 characters of a DNS label (pod host names derive from them).
const maxPrefix = 40

// NamePrefix is the prefix of every namespaced and cluster-scoped object
// name of a driver, so several drivers share one namespace without
// colliding: "gpu.example.com" becomes "gpu-example-com". Long names are
// cut and made unique again with a hash of the full name.
func NamePrefix(driver string) string {
	p := strings.ReplaceAll(driver, ".", "-")
	if len(p) <= maxPrefix {
		return p
	}
	sum := sha256.Sum256([]byte(driver))
	head := strings.TrimRight(p[:maxPrefix-9], "-")
	return head + "-" + hex.EncodeToString(sum[:4])
}

// ObjectName is the name a base object named base gets for a driver.
func ObjectName(driver, base string) string {
	return NamePrefix(driver) + "-" + base
}

// Selector returns the labels that select every object of one driver of a
// stack, or of every driver when driver is empty.
func Selector(stack, driver string) map[string]string {
	sel := map[string]string{LabelStack: stack}
	if driver != "" {
		sel[LabelDriver] = driver
	}
	return sel
}

// Created says whether the driver lifecycle of the stack created an
// object: it carries the stack's label and the driver lifecycle's field
// manager wrote it (an apply, or the replacement of a drifted policy). An
// object with either missing is someone else's, even one that copies the
// labels or shares the name: the operator never labels, changes or
// deletes it, and reports it instead.
func Created(obj metav1.Object, stack string) bool {
	if obj.GetLabels()[LabelStack] != stack {
		return false
	}
	for _, e := range obj.GetManagedFields() {
		if e.Manager == FieldManager && e.Subresource == "" {
			return true
		}
	}
	return false
}

// OwnedBy says whether the driver lifecycle of the stack created the
// object for the driver (Created, and labelled for that driver).
func OwnedBy(obj metav1.Object, stack, driver string) bool {
	return Created(obj, stack) && obj.GetLabels()[LabelDriver] == driver
}

// NotCreated is the problem message for an object of the render's name
// that exists but was not created by the operator for the driver.
func NotCreated(obj metav1.Object, stack, driver string) string {
	managers := []string{}
	for _, e := range obj.GetManagedFields() {
		if e.Subresource == "" && !slices.Contains(managers, e.Manager) {
			managers = append(managers, e.Manager)
		}
	}
	slices.Sort(managers)
	who := "someone else"
	if len(managers) > 0 {
		who = fmt.Sprintf("someone else (field %s %s)", plural(len(managers), "manager", "managers"), strings.Join(managers, ", "))
	}
	if Created(obj, stack) {
		who = "drastack for driver " + obj.GetLabels()[LabelDriver]
	}
	return "exists but is owned by " + who + ", not created by drastack for driver " + driver +
		": drastack does not take over an object it did not create; delete it, or choose another name in the spec"
}
