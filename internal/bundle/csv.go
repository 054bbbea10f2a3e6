package bundle

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// CSV annotations the generator owns.
const (
	annotationExamples  = "alm-examples"
	annotationImage     = "containerImage"
	annotationCreatedAt = "createdAt"
	annotationBuilder   = "operators.operatorframework.io/builder"
	annotationLayout    = "operators.operatorframework.io/project_layout"
)

// completeCSV fills a copy of the base CSV with everything that follows
// from the manifests and the options. createdAt is removed rather than set
// so that regenerating an unchanged bundle changes nothing.
func completeCSV(base *unstructured.Unstructured, samples []*unstructured.Unstructured, install *installPlan, defined map[schema.GroupKind]crdInfo, opts Options) (*unstructured.Unstructured, error) {
	csv := base.DeepCopy()
	csv.SetName(opts.Package + ".v" + opts.Version)

	examples, err := almExamples(samples, defined)
	if err != nil {
		return nil, err
	}
	annotations := csv.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	delete(annotations, annotationCreatedAt)
	annotations[annotationExamples] = examples
	annotations[annotationImage] = opts.Image
	csv.SetAnnotations(annotations)

	if err := unstructured.SetNestedField(csv.Object, opts.Version, "spec", "version"); err != nil {
		return nil, fmt.Errorf("spec.version: %w", err)
	}

	baseOwned, _, err := unstructured.NestedSlice(csv.Object, "spec", "customresourcedefinitions", "owned")
	if err != nil {
		return nil, fmt.Errorf("spec.customresourcedefinitions.owned: %w", err)
	}
	owned, err := mergeOwned(baseOwned, defined)
	if err != nil {
		return nil, fmt.Errorf("spec.customresourcedefinitions.owned: %w", err)
	}
	if len(owned) > 0 {
		if err := unstructured.SetNestedSlice(csv.Object, owned, "spec", "customresourcedefinitions", "owned"); err != nil {
			return nil, fmt.Errorf("spec.customresourcedefinitions.owned: %w", err)
		}
	}

	if strategy, _, _ := unstructured.NestedString(csv.Object, "spec", "install", "strategy"); strategy != "" && strategy != "deployment" {
		return nil, fmt.Errorf("spec.install.strategy is %q, only \"deployment\" is supported", strategy)
	}
	spec := map[string]interface{}{"deployments": install.deployments}
	if len(install.clusterPermissions) > 0 {
		spec["clusterPermissions"] = install.clusterPermissions
	}
	if len(install.permissions) > 0 {
		spec["permissions"] = install.permissions
	}
	if err := unstructured.SetNestedField(csv.Object, map[string]interface{}{"strategy": "deployment", "spec": spec}, "spec", "install"); err != nil {
		return nil, fmt.Errorf("spec.install: %w", err)
	}
	return csv, nil
}
