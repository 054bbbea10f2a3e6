package bundle

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Build runs `kustomize build dir` in process, so that `make bundle` needs no
// kustomize binary, and returns the resulting objects in kustomize's order.
// Objects are decoded through JSON so numbers are int64, as unstructured
// objects require.
func Build(dir string) ([]*unstructured.Unstructured, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	objs := make([]*unstructured.Unstructured, 0, resMap.Size())
	for _, res := range resMap.Resources() {
		data, err := res.AsYAML()
		if err != nil {
			return nil, fmt.Errorf("serialize %s: %w", res.CurId(), err)
		}
		obj, err := decodeObject(data)
		if err != nil {
			return nil, fmt.Errorf("decode %s: %w", res.CurId(), err)
		}
		objs = append(objs, obj)
	}
	return objs, nil
}

// decodeObject turns one YAML document into an unstructured object.
func decodeObject(data []byte) (*unstructured.Unstructured, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("yaml to json: %w", err)
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(js); err != nil {
		return nil, fmt.Errorf("unmarshal object: %w", err)
	}
	return obj, nil
}
