package driver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// renderDir is the in-memory folder of the generated kustomization that
// turns a profile base into one driver's objects.
const renderDir = "/render"

// kustomization is what the generated kustomization sets.
type kustomization struct {
	Namespace string
	Prefix    string
	Labels    map[string]string
	Patches   []v1alpha1.Patch
}

// workload is a DaemonSet or Deployment of a profile base, decoded so that
// the DRAStack fields can be set on typed objects.
type workload struct {
	daemonSet  *appsv1.DaemonSet
	deployment *appsv1.Deployment
}

// apply sets the DRAStack fields: plugin fields on the kubelet-plugin
// DaemonSet, controller fields on Deployments.
func (w workload) apply(spec *v1alpha1.DriverSpec, plugins []string, path *field.Path) error {
	switch {
	case w.daemonSet != nil:
		if w.daemonSet.Labels[LabelComponent] != ComponentKubeletPlugin {
			return nil
		}
		return applyPluginFields(w.daemonSet, spec, plugins, path)
	case w.deployment != nil:
		applyControllerFields(w.deployment, spec)
	}
	return nil
}

// build copies the shared base and the profile's base into an in-memory
// file system with the tokens replaced and the DRAStack fields set on its
// workloads, writes the kustomization that applies the user's patches, the
// namespace, the name prefix and the labels, and runs kustomize on it.
func build(profile v1alpha1.DriverProfile, tokens *strings.Replacer, fields func(workload) error, k kustomization) ([]*unstructured.Unstructured, error) {
	mem := filesys.MakeFsInMemory()
	for _, dir := range []string{commonDir, string(profile)} {
		if err := copyBase(mem, dir, tokens, fields); err != nil {
			return nil, err
		}
	}
	data, err := yaml.Marshal(k.document(string(profile)))
	if err != nil {
		return nil, fmt.Errorf("encode kustomization: %w", err)
	}
	if err := mem.WriteFile(path.Join(renderDir, "kustomization.yaml"), data); err != nil {
		return nil, fmt.Errorf("write kustomization: %w", err)
	}
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(mem, renderDir)
	if err != nil {
		return nil, fmt.Errorf("kustomize profile %s: %w", profile, err)
	}
	objs := make([]*unstructured.Unstructured, 0, resMap.Size())
	for _, res := range resMap.Resources() {
		m, err := res.Map()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", res.CurId(), err)
		}
		// Through the unstructured JSON decoder, so numbers are int64 as
		// unstructured objects require.
		js, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", res.CurId(), err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(js); err != nil {
			return nil, fmt.Errorf("decode %s: %w", res.CurId(), err)
		}
		objs = append(objs, normalize(u))
	}
	return objs, nil
}

// document is the kustomization.yaml of a render.
func (k kustomization) document(profile string) map[string]any {
	doc := map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1beta1",
		"kind":       "Kustomization",
		"resources":  []string{path.Join("..", profilesRoot, profile)},
		"namespace":  k.Namespace,
		"namePrefix": k.Prefix,
		"labels": []map[string]any{{
			"pairs":            k.Labels,
			"includeSelectors": false,
			"includeTemplates": true,
		}},
	}
	var patches []map[string]any
	for _, p := range k.Patches {
		entry := map[string]any{"patch": p.Patch}
		if t := p.Target; t != nil {
			target := map[string]string{}
			for key, v := range map[string]string{
				"group": t.Group, "version": t.Version, "kind": t.Kind, "name": t.Name,
				"namespace": t.Namespace, "labelSelector": t.LabelSelector, "annotationSelector": t.AnnotationSelector,
			} {
				if v != "" {
					target[key] = v
				}
			}
			entry["target"] = target
		}
		patches = append(patches, entry)
	}
	if len(patches) > 0 {
		doc["patches"] = patches
	}
	return doc
}

// copyBase copies profiles/<dir> from the embedded files to the same path
// in mem, replacing tokens and setting the DRAStack fields on workloads.
func copyBase(mem filesys.FileSystem, dir string, tokens *strings.Replacer, fields func(workload) error) error {
	root := path.Join(profilesRoot, dir)
	return fs.WalkDir(profileFiles, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("read profile files: %w", err)
		}
		if d.IsDir() {
			return nil
		}
		raw, err := profileFiles.ReadFile(p)
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		text := []byte(tokens.Replace(string(raw)))
		if path.Base(p) != "kustomization.yaml" {
			if text, err = setWorkloadFields(text, fields); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
		}
		if err := mem.WriteFile("/"+p, text); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
		return nil
	})
}

// setWorkloadFields rewrites the DaemonSets and Deployments of a
// multi-document YAML file through fields; files without workloads are
// returned unchanged, comments and all.
func setWorkloadFields(text []byte, fields func(workload) error) ([]byte, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(text), 4096)
	var docs [][]byte
	changed := false
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("parse: %w", err)
		}
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		var head struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(raw, &head); err != nil {
			return nil, fmt.Errorf("parse: %w", err)
		}
		var obj runtime.Object
		var w workload
		switch head.Kind {
		case "DaemonSet":
			w.daemonSet = &appsv1.DaemonSet{}
			obj = w.daemonSet
		case "Deployment":
			w.deployment = &appsv1.Deployment{}
			obj = w.deployment
		}
		if obj != nil {
			strict := json.NewDecoder(bytes.NewReader(raw))
			strict.DisallowUnknownFields()
			if err := strict.Decode(obj); err != nil {
				return nil, fmt.Errorf("decode %s: %w", head.Kind, err)
			}
			if err := fields(w); err != nil {
				return nil, err
			}
			u, err := toUnstructured(obj)
			if err != nil {
				return nil, err
			}
			if raw, err = json.Marshal(u.Object); err != nil {
				return nil, fmt.Errorf("encode %s: %w", head.Kind, err)
			}
			changed = true
		}
		docs = append(docs, raw)
	}
	if !changed {
		return text, nil
	}
	var out bytes.Buffer
	for i, raw := range docs {
		if i > 0 {
			out.WriteString("---\n")
		}
		data, err := yaml.JSONToYAML(raw)
		if err != nil {
			return nil, fmt.Errorf("encode: %w", err)
		}
		out.Write(data)
	}
	return out.Bytes(), nil
}

// normalize drops what the typed round trip of workloads adds but apply
// must not send.
func normalize(u *unstructured.Unstructured) *unstructured.Unstructured {
	if st, ok := u.Object["status"].(map[string]any); ok && len(st) == 0 {
		delete(u.Object, "status")
	}
	return u
}
