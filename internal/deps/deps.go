//go:build tools

// Package deps pins modules the project uses before the code that uses them
// lands, so that parallel work never has to edit go.mod. Delete an import
// here once real code imports the package.
package deps

import (
	_ "k8s.io/api/resource/v1"
	_ "k8s.io/apiserver/pkg/cel/library"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/dynamic-resource-allocation/cel"
	_ "k8s.io/dynamic-resource-allocation/resourceslice"
	_ "k8s.io/dynamic-resource-allocation/structured"
	_ "k8s.io/klog/v2"
	_ "sigs.k8s.io/controller-runtime"
	_ "sigs.k8s.io/controller-runtime/pkg/envtest"
	_ "sigs.k8s.io/e2e-framework/pkg/env"
	_ "sigs.k8s.io/kustomize/api/krusty"
	_ "sigs.k8s.io/kustomize/kyaml/filesys"
	_ "sigs.k8s.io/yaml"
	_ "github.com/prometheus/client_golang/prometheus"
)
