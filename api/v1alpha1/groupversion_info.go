// Package v1alpha1 contains the drastack.io/v1alpha1 API: DRAStack, the one
// object that declares a cluster's whole DRA stack, and DevicePool, the
// operator's report on one resource pool.
//
// +kubebuilder:object:generate=true
// +groupName=drastack.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of these types.
	GroupVersion = schema.GroupVersion{Group: "drastack.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this group-version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
