// Package specfuzz generates random DRAStack edits for the spec fuzz test
// (test/e2e/spec_fuzz_test.go): each edit is a base spec (a sample)
// changed in one place. Half the edits follow the CRD's own schema (a
// random field, a value of its type, its enum, or one that breaks it), so
// they reach every field the API has, admission included; the other half
// are the mistakes people make with the samples (a second multi-host entry
// over the same hosts, a driver named like a multi-host driver, the wrong
// namespace, central entries that name nothing or overlap, a bad patch, a
// removal). Edits are plain JSON objects, so a value of the wrong type
// reaches the API server as it would from kubectl.
package specfuzz

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// Vocabulary are the names an edit uses: those of the cluster the test
// runs on, so that edits meet real nodes, drivers and namespaces.
type Vocabulary struct {
	// Drivers are DRA driver names: the base's and others.
	Drivers []string
	// Namespaces are values for spec.namespace.
	Namespaces []string
	// Labels are node label keys and values the selectors may use.
	Labels map[string]string
	// Pools are pool names.
	Pools []string
	// Images are container image references, good and bad.
	Images []string
}

// Edit is one change of the base spec.
type Edit struct {
	// What says what changed, for the log.
	What string
	// Spec is the whole spec after the change.
	Spec map[string]any
}

// Generator makes edits of one base spec.
type Generator struct {
	rng    *rand.Rand
	schema *apiextensionsv1.JSONSchemaProps
	base   map[string]any
	vocab  Vocabulary
}

// New returns a generator of edits of base (a DRAStack spec as JSON
// values) by the spec schema of the CRD (the properties of spec).
func New(seed int64, schema *apiextensionsv1.JSONSchemaProps, base map[string]any, vocab Vocabulary) *Generator {
	return &Generator{rng: rand.New(rand.NewSource(seed)), schema: schema, base: base, vocab: vocab}
}

// Next returns the next edit.
func (g *Generator) Next() Edit {
	spec := clone(g.base)
	var what string
	if g.rng.Intn(2) == 0 {
		what = "schema: " + g.schemaEdit(spec)
	} else {
		what = "sample: " + g.sampleEdit(spec)
	}
	// As JSON decodes it (numbers are float64), which is what the
	// unstructured client copies.
	return Edit{What: what, Spec: clone(spec)}
}

// schemaEdit changes one field of spec, found by walking the schema from
// the root along present and absent properties alike.
func (g *Generator) schemaEdit(spec map[string]any) string {
	var obj any = spec
	s := g.schema
	path := "spec"
	for depth := 0; depth < 8; depth++ {
		switch {
		case len(s.Properties) > 0:
			m, _ := obj.(map[string]any)
			names := sortedKeys(s.Properties)
			name := names[g.rng.Intn(len(names))]
			child := s.Properties[name]
			path += "." + name
			cur, ok := m[name]
			if !ok || g.rng.Intn(4) == 0 || leaf(&child) {
				m[name] = g.value(name, &child, cur)
				return path + " = " + short(m[name])
			}
			parent := m
			if next, deeper := cur.(map[string]any); deeper && len(child.Properties) > 0 {
				obj, s = next, &child
				continue
			}
			if list, isList := cur.([]any); isList && child.Items != nil && child.Items.Schema != nil {
				edited, what := g.listEdit(name, list, child.Items.Schema)
				parent[name] = edited
				return path + what
			}
			parent[name] = g.value(name, &child, cur)
			return path + " = " + short(parent[name])
		default:
			return path + " (no property)"
		}
	}
	return path + " (too deep)"
}

// listEdit changes a list: an element edited (along the schema), a copy
// of one appended, one removed, or the list emptied.
func (g *Generator) listEdit(name string, list []any, item *apiextensionsv1.JSONSchemaProps) ([]any, string) {
	switch n := g.rng.Intn(10); {
	case len(list) == 0 || n == 0:
		return append(list, g.value(name, item, nil)), "[+] new"
	case n == 1:
		return []any{}, " = []"
	case n == 2:
		i := g.rng.Intn(len(list))
		return slices.Delete(slices.Clone(list), i, i+1), fmt.Sprintf("[%d] removed", i)
	case n <= 5:
		i := g.rng.Intn(len(list))
		dup := clone(map[string]any{"x": list[i]})["x"]
		if m, ok := dup.(map[string]any); ok {
			if _, named := m["name"]; named {
				m["name"] = fmt.Sprintf("%v-copy", m["name"])
			}
		}
		return append(list, dup), fmt.Sprintf("[+] copy of [%d]", i)
	default:
		i := g.rng.Intn(len(list))
		if m, ok := list[i].(map[string]any); ok && len(item.Properties) > 0 {
			sub := &Generator{rng: g.rng, schema: item, vocab: g.vocab}
			return list, fmt.Sprintf("[%d]", i) + strings.TrimPrefix(sub.schemaEdit(m), "spec")
		}
		list[i] = g.value(name, item, list[i])
		return list, fmt.Sprintf("[%d] = %s", i, short(list[i]))
	}
}

// leaf says whether a schema has nothing to walk into.
func leaf(s *apiextensionsv1.JSONSchemaProps) bool {
	return len(s.Properties) == 0 && s.Items == nil
}

// value makes a value for a field: mostly of its type (from its enum, or
// the vocabulary for the names the field holds), sometimes one that breaks
// the schema.
func (g *Generator) value(name string, s *apiextensionsv1.JSONSchemaProps, cur any) any {
	if g.rng.Intn(8) == 0 {
		// The wrong type, an empty or an absurd value: admission's turn.
		return []any{nil, "", -1, true, strings.Repeat("x", 300), map[string]any{"bogus": 1}}[g.rng.Intn(6)]
	}
	if len(s.Enum) > 0 {
		var v any
		_ = json.Unmarshal(s.Enum[g.rng.Intn(len(s.Enum))].Raw, &v)
		return v
	}
	if s.XIntOrString {
		if g.rng.Intn(2) == 0 {
			return g.rng.Intn(4)
		}
		return []string{"25%", "100%", "0", "x%"}[g.rng.Intn(4)]
	}
	switch s.Type {
	case "string":
		return g.stringFor(name)
	case "integer":
		return []int{-1, 0, 1, 2, 3, 4, 8, 16, 64, 65, 200, 86400}[g.rng.Intn(12)]
	case "boolean":
		return g.rng.Intn(2) == 0
	case "array":
		if s.Items == nil || s.Items.Schema == nil {
			return []any{}
		}
		n := g.rng.Intn(3)
		out := make([]any, 0, n)
		for i := 0; i < n; i++ {
			out = append(out, g.value(singular(name), s.Items.Schema, nil))
		}
		return out
	case "object":
		if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
			m := map[string]any{}
			if c, ok := cur.(map[string]any); ok {
				m = clone(c)
			}
			k, v := g.label()
			if s.AdditionalProperties.Schema.Type == "string" {
				m[k] = v
			} else {
				m[k] = g.value(k, s.AdditionalProperties.Schema, nil)
			}
			return m
		}
		out := map[string]any{}
		for _, req := range s.Required {
			p := s.Properties[req]
			out[req] = g.value(req, &p, nil)
		}
		if len(s.Properties) > 0 && g.rng.Intn(2) == 0 {
			names := sortedKeys(s.Properties)
			n := names[g.rng.Intn(len(names))]
			p := s.Properties[n]
			out[n] = g.value(n, &p, nil)
		}
		return out
	}
	return nil
}

// stringFor picks a string for a field by what its name holds.
func (g *Generator) stringFor(name string) string {
	pick := func(vs []string) string { return vs[g.rng.Intn(len(vs))] }
	switch name {
	case "driver", "name", "drivers":
		return pick(g.vocab.Drivers)
	case "namespace":
		return pick(g.vocab.Namespaces)
	case "image":
		return pick(g.vocab.Images)
	case "pool", "pools":
		return pick(g.vocab.Pools)
	case "domainLabel", "coordinatesLabel", "key":
		k, _ := g.label()
		return k
	case "partition", "partitions":
		return pick([]string{"2x2", "2x4", "4x4", "3x4", "1x1", "8x8", "4x2"})
	case "resyncPeriod", "incompleteGracePeriod", "placementTimeout", "allocationTimeout":
		return pick([]string{"1s", "10s", "60s", "5m", "25h", "-1s", "bogus"})
	case "class", "classes", "immediateClasses":
		return pick(g.vocab.Drivers)
	case "patch":
		return pick([]string{`[{"op": "add", "path": "/spec/minReadySeconds", "value": 1}]`, `{"kind": "DaemonSet", "metadata": {"name": "no-such"}}`, "not: [yaml"})
	}
	return pick([]string{"a", "x.example.com", "Bad Value", "/host/path", "true"})
}

// label picks a node label the vocabulary knows, sometimes an unknown one.
func (g *Generator) label() (string, string) {
	keys := sortedKeys(g.vocab.Labels)
	if len(keys) == 0 || g.rng.Intn(5) == 0 {
		return "e2e.drastack.io/fuzz-other", "x"
	}
	k := keys[g.rng.Intn(len(keys))]
	return k, g.vocab.Labels[k]
}

// sampleEdit makes one of the mistakes people make with the samples, or a
// routine change, on spec.
func (g *Generator) sampleEdit(spec map[string]any) string {
	mh, _ := spec["multiHost"].([]any)
	drivers, _ := spec["drivers"].([]any)
	claims, _ := spec["claims"].(map[string]any)
	if claims == nil {
		claims = map[string]any{}
		spec["claims"] = claims
	}
	central, _ := claims["central"].([]any)
	pick := func(vs []string) string { return vs[g.rng.Intn(len(vs))] }
	switch g.rng.Intn(12) {
	case 0:
		if len(mh) == 0 {
			return "nothing (no multiHost entry)"
		}
		dup := clone(map[string]any{"x": mh[0]})["x"].(map[string]any)
		dup["name"] = "copy"
		what := "a second multiHost entry over the same hosts"
		if g.rng.Intn(2) == 0 {
			delete(dup, "nodeSelector")
			what += " (without nodeSelector)"
		}
		spec["multiHost"] = append(mh, dup)
		return what
	case 1:
		if len(mh) == 0 {
			return "nothing (no multiHost entry)"
		}
		spec["drivers"] = append(drivers, map[string]any{"name": mh[0].(map[string]any)["driver"], "profile": "example"})
		return "a driver named like the multiHost driver"
	case 2:
		ns := pick(g.vocab.Namespaces)
		spec["namespace"] = ns
		return "namespace " + ns
	case 3:
		d := pick(g.vocab.Drivers)
		claims["central"] = append(central, map[string]any{"driver": d})
		return "a central entry for the whole driver " + d
	case 4:
		if len(mh) == 0 {
			return "nothing (no multiHost entry)"
		}
		claims["central"] = append(central, map[string]any{"driver": mh[0].(map[string]any)["driver"], "pools": []any{pick(g.vocab.Pools)}})
		return "a central entry over the pools of another"
	case 5:
		if len(drivers) == 0 {
			return "nothing (no driver)"
		}
		d := drivers[0].(map[string]any)
		d["patches"] = []any{map[string]any{"patch": `{"kind": "DaemonSet", "apiVersion": "apps/v1", "metadata": {"name": "no-such-daemonset"}}`}}
		return "a patch that matches nothing"
	case 6:
		if len(drivers) == 0 {
			return "nothing (no driver)"
		}
		img := pick(g.vocab.Images)
		drivers[0].(map[string]any)["image"] = img
		return "driver image " + img
	case 7:
		spec["drivers"] = []any{}
		return "every driver removed"
	case 8:
		spec["drivers"] = append(drivers, map[string]any{"name": "gpu.nvidia.com", "profile": "nvidia-gpu", "nodeSelector": map[string]any{"e2e.drastack.io/fuzz-none": "true"}})
		spec["multiHost"] = append(mh, map[string]any{"name": "cd", "driver": "compute-domain.nvidia.com", "domainLabel": "e2e.drastack.io/fuzz-none",
			"coordinatesLabel": "e2e.drastack.io/fuzz-none", "hostGrid": []any{2}, "chipsPerHost": []any{1}, "partitions": []any{"1"}})
		return "the nvidia driver next to a multiHost entry of compute-domain.nvidia.com"
	case 9:
		if len(mh) == 0 {
			return "nothing (no multiHost entry)"
		}
		m := mh[0].(map[string]any)
		m["partitions"] = []any{pick([]string{"2x2", "3x4", "4x4"})}
		return fmt.Sprintf("multiHost partitions %v", m["partitions"])
	case 10:
		if len(mh) == 0 {
			return "nothing (no multiHost entry)"
		}
		dup := clone(map[string]any{"x": mh[0]})["x"].(map[string]any)
		dup["name"] = "other-driver"
		dup["driver"] = pick(g.vocab.Drivers)
		spec["multiHost"] = append(mh, dup)
		return fmt.Sprintf("a second multiHost entry of driver %v over the same hosts", dup["driver"])
	default:
		if len(drivers) == 0 {
			return "nothing (no driver)"
		}
		drivers[0].(map[string]any)["removalPolicy"] = pick([]string{"Drain", "Force"})
		return "the driver's removal policy"
	}
}

func singular(name string) string {
	switch name {
	case "partitions":
		return "partition"
	case "pools":
		return "pool"
	case "classes", "immediateClasses":
		return "class"
	}
	return name
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// clone deep-copies JSON values.
func clone(m map[string]any) map[string]any {
	data, err := json.Marshal(m)
	if err != nil {
		panic(err) // JSON values always marshal
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		panic(err)
	}
	return out
}

// short is a value for the log, shortened.
func short(v any) string {
	data, _ := json.Marshal(v)
	s := string(data)
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

// LoadSchema reads the schema of spec from a DRAStack CRD file.
func LoadSchema(crdYAML []byte) (*apiextensionsv1.JSONSchemaProps, error) {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(crdYAML, &crd); err != nil {
		return nil, err
	}
	for _, v := range crd.Spec.Versions {
		if v.Schema != nil && v.Schema.OpenAPIV3Schema != nil {
			if spec, ok := v.Schema.OpenAPIV3Schema.Properties["spec"]; ok {
				return &spec, nil
			}
		}
	}
	return nil, fmt.Errorf("no spec schema in %s", crd.Name)
}

// LoadSample reads the spec of a DRAStack sample, with every occurrence
// of each key of replace (driver names, node labels; longer keys first)
// replaced by its value, so that the sample fits the test's cluster.
func LoadSample(sampleYAML []byte, replace map[string]string) (map[string]any, error) {
	text := string(sampleYAML)
	keys := sortedKeys(replace)
	// Longest first: a key may be the start of another.
	sort.SliceStable(keys, func(i, j int) bool { return len(keys[i]) > len(keys[j]) })
	for _, k := range keys {
		text = strings.ReplaceAll(text, k, replace[k])
	}
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(text), &obj); err != nil {
		return nil, err
	}
	spec, ok := obj["spec"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("the sample has no spec")
	}
	return clone(spec), nil
}
