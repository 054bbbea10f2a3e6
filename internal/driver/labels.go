package driver

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
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
