package bundle

import (
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ownedKey identifies an entry of spec.customresourcedefinitions.owned:
// OLM lists a CRD once per version.
type ownedKey struct{ name, version string }

// mergeOwned returns spec.customresourcedefinitions.owned: the base CSV's
// entries (which carry the hand-written displayName and description), in
// their order, followed by an entry for every CRD version the base lacks.
// A base entry naming a CRD or version that does not exist, or the wrong
// kind, is an error: it would make OLM refuse the bundle.
func mergeOwned(baseOwned []interface{}, defined map[schema.GroupKind]crdInfo) ([]interface{}, error) {
	byName := make(map[string]crdInfo, len(defined))
	for _, info := range defined {
		byName[info.name] = info
	}

	out := make([]interface{}, 0, len(baseOwned))
	have := map[ownedKey]bool{}
	for i, e := range baseOwned {
		entry, ok := e.(map[string]interface{})
		if !ok {
			return nil, fmt.Errorf("owned[%d] is not an object", i)
		}
		name, err := requiredString(entry, "name")
		if err != nil {
			return nil, fmt.Errorf("owned[%d]: %w", i, err)
		}
		version, err := requiredString(entry, "version")
		if err != nil {
			return nil, fmt.Errorf("owned[%d] (%s): %w", i, name, err)
		}
		info, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("owned[%d]: no CRD named %q in the input", i, name)
		}
		if !contains(info.versions, version) {
			return nil, fmt.Errorf("owned[%d]: CRD %q has no version %q (it has %v)", i, name, version, info.versions)
		}
		if kind, _, _ := unstructured.NestedString(entry, "kind"); kind != "" && kind != info.kind {
			return nil, fmt.Errorf("owned[%d]: CRD %q defines kind %q, not %q", i, name, info.kind, kind)
		}
		key := ownedKey{name, version}
		if have[key] {
			return nil, fmt.Errorf("owned[%d]: %s %s listed twice", i, name, version)
		}
		have[key] = true
		merged := runtimeCopy(entry)
		merged["kind"] = info.kind
		if _, ok := merged["displayName"]; !ok {
			merged["displayName"] = displayName(info.kind)
		}
		if _, ok := merged["description"]; !ok && info.description != "" {
			merged["description"] = info.description
		}
		out = append(out, merged)
	}

	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		info := byName[n]
		for _, v := range info.versions {
			if have[ownedKey{n, v}] {
				continue
			}
			entry := map[string]interface{}{
				"name":        n,
				"version":     v,
				"kind":        info.kind,
				"displayName": displayName(info.kind),
			}
			if info.description != "" {
				entry["description"] = info.description
			}
			out = append(out, entry)
		}
	}
	return out, nil
}

// runtimeCopy deep-copies a JSON-like map.
func runtimeCopy(m map[string]interface{}) map[string]interface{} {
	return (&unstructured.Unstructured{Object: m}).DeepCopy().Object
}
