package bundle

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// crdInfo is what the bundle needs to know about one CRD.
type crdInfo struct {
	name     string
	group    string
	kind     string
	plural   string
	versions []string
	// description is the first paragraph of the storage version's schema
	// description (controller-gen copies the type's doc comment there).
	description string
}

// readCRD extracts crdInfo and rejects CRDs missing what a bundle needs.
func readCRD(crd *unstructured.Unstructured) (crdInfo, error) {
	info := crdInfo{name: crd.GetName()}
	var err error
	if info.group, err = requiredString(crd.Object, "spec", "group"); err != nil {
		return info, fmt.Errorf("CRD %q: %w", info.name, err)
	}
	if info.kind, err = requiredString(crd.Object, "spec", "names", "kind"); err != nil {
		return info, fmt.Errorf("CRD %q: %w", info.name, err)
	}
	if info.plural, err = requiredString(crd.Object, "spec", "names", "plural"); err != nil {
		return info, fmt.Errorf("CRD %q: %w", info.name, err)
	}
	if want := info.plural + "." + info.group; info.name != want {
		return info, fmt.Errorf("CRD %q: name must be %q", info.name, want)
	}
	versions, _, err := unstructured.NestedSlice(crd.Object, "spec", "versions")
	if err != nil {
		return info, fmt.Errorf("CRD %q: spec.versions: %w", info.name, err)
	}
	for i, v := range versions {
		vm, ok := v.(map[string]interface{})
		if !ok {
			return info, fmt.Errorf("CRD %q: spec.versions[%d] is not an object", info.name, i)
		}
		name, err := requiredString(vm, "name")
		if err != nil {
			return info, fmt.Errorf("CRD %q: spec.versions[%d]: %w", info.name, i, err)
		}
		info.versions = append(info.versions, name)
		storage, _, _ := unstructured.NestedBool(vm, "storage")
		if storage || info.description == "" {
			desc, _, _ := unstructured.NestedString(vm, "schema", "openAPIV3Schema", "description")
			if d := firstParagraph(desc); d != "" {
				info.description = d
			}
		}
	}
	if len(info.versions) == 0 {
		return info, fmt.Errorf("CRD %q has no versions", info.name)
	}
	return info, nil
}

// definedKinds maps every kind the CRDs define to its CRD, so samples can
// be told apart from other objects and checked against served versions.
func definedKinds(crds []*unstructured.Unstructured) (map[schema.GroupKind]crdInfo, error) {
	out := make(map[schema.GroupKind]crdInfo, len(crds))
	for _, crd := range crds {
		info, err := readCRD(crd)
		if err != nil {
			return nil, err
		}
		gk := schema.GroupKind{Group: info.group, Kind: info.kind}
		if prev, dup := out[gk]; dup {
			return nil, fmt.Errorf("kind %s is defined by two CRDs: %q and %q", gk, prev.name, info.name)
		}
		out[gk] = info
	}
	return out, nil
}

// requiredString reads a non-empty string field.
func requiredString(obj map[string]interface{}, fields ...string) (string, error) {
	s, found, err := unstructured.NestedString(obj, fields...)
	if err != nil {
		return "", fmt.Errorf("%s: %w", dotted(fields), err)
	}
	if !found || s == "" {
		return "", fmt.Errorf("%s is missing", dotted(fields))
	}
	return s, nil
}

func dotted(fields []string) string {
	out := ""
	for i, f := range fields {
		if i > 0 {
			out += "."
		}
		out += f
	}
	return out
}
