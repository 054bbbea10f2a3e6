package bundle

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// almExamples renders the samples as the alm-examples annotation: a JSON
// array, indented, in input order (kustomize's order is stable), with map
// keys sorted by encoding/json. Each sample must use a version its CRD
// defines, so a stale sample fails the build instead of the console.
func almExamples(samples []*unstructured.Unstructured, defined map[schema.GroupKind]crdInfo) (string, error) {
	list := make([]interface{}, 0, len(samples))
	for _, s := range samples {
		gvk := s.GroupVersionKind()
		info := defined[gvk.GroupKind()]
		if !contains(info.versions, gvk.Version) {
			return "", fmt.Errorf("sample %s %q uses version %q, CRD %q has %v", gvk.Kind, s.GetName(), gvk.Version, info.name, info.versions)
		}
		list = append(list, s.DeepCopy().Object)
	}
	out, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encode alm-examples: %w", err)
	}
	return string(out), nil
}
