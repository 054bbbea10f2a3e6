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

// fixedDir is the folder of a profile base that holds the objects whose
// names the driver itself expects (a CustomResourceDefinition, the
// ServiceAccount NVIDIA's compute-domain controller names in the DaemonSets
// it creates): they get the namespace, labels and patches of the render,
// but not the driver's name prefix. The profile's own kustomization does
// not list it.
const fixedDir = "fixed"

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

// baseObject is one object of a profile base on its way into kustomize:
// every object as unstructured, and DaemonSets and Deployments also typed
// (changes go to the typed object then).
type baseObject struct {
	u *unstructured.Unstructured
	workload
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

// tuner changes (or drops, returning false) one object of a profile base
// before kustomize sees it.
type tuner func(*baseObject) (keep bool, err error)

// build copies the shared base and the profile's base into an in-memory
// file system with the tokens replaced and every object passed through
// tune, writes the kustomizations that apply the name prefix (to all but
// the profile's fixed-name objects), the user's patches, the namespace and
// the labels, and runs kustomize on them.
func build(profile v1alpha1.DriverProfile, tokens *strings.Replacer, tune tuner, k kustomization) ([]*unstructured.Unstructured, error) {
	mem := filesys.MakeFsInMemory()
	for _, dir := range []string{commonDir, string(profile)} {
		if err := copyBase(mem, dir, tokens, tune); err != nil {
			return nil, err
		}
	}
	prefixed := map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1beta1",
		"kind":       "Kustomization",
		"resources":  []string{path.Join("..", "..", profilesRoot, string(profile))},
		"namePrefix": k.Prefix,
	}
	resources := []string{"prefixed"}
	if _, err := fs.Stat(profileFiles, path.Join(profilesRoot, string(profile), fixedDir)); err == nil {
		resources = append(resources, path.Join("..", profilesRoot, string(profile), fixedDir))
	}
	for file, doc := range map[string]map[string]any{
		path.Join(renderDir, "prefixed", "kustomization.yaml"): prefixed,
		path.Join(renderDir, "kustomization.yaml"):             k.document(resources),
	} {
		data, err := yaml.Marshal(doc)
		if err != nil {
			return nil, fmt.Errorf("encode kustomization: %w", err)
		}
		if err := mem.WriteFile(file, data); err != nil {
			return nil, fmt.Errorf("write kustomization: %w", err)
		}
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

// document is the top kustomization.yaml of a render: the prefixed base
// and the fixed-name objects, with the namespace, labels and patches. The
// patches name objects by their base names: kustomize matches the names
// objects had before the prefix too.
func (k kustomization) document(resources []string) map[string]any {
	doc := map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1beta1",
		"kind":       "Kustomization",
		"resources":  resources,
		"namespace":  k.Namespace,
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
// in mem, replacing tokens and passing every object through tune.
func copyBase(mem filesys.FileSystem, dir string, tokens *strings.Replacer, tune tuner) error {
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
			if text, err = tuneObjects(text, tune); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
		}
		if err := mem.WriteFile("/"+p, text); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
		return nil
	})
}

// tuneObjects passes every object of a multi-document YAML file through
// tune and writes the ones it keeps back. DaemonSets and Deployments are
// decoded strictly: a field the API does not know is a mistake in the
// profile, not something to send.
func tuneObjects(text []byte, tune tuner) ([]byte, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(text), 4096)
	var docs [][]byte
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
		obj := &baseObject{u: &unstructured.Unstructured{}}
		if err := obj.u.UnmarshalJSON(raw); err != nil {
			return nil, fmt.Errorf("parse: %w", err)
		}
		var typed runtime.Object
		switch obj.u.GetKind() {
		case "DaemonSet":
			obj.daemonSet = &appsv1.DaemonSet{}
			typed = obj.daemonSet
		case "Deployment":
			obj.deployment = &appsv1.Deployment{}
			typed = obj.deployment
		}
		if typed != nil {
			strict := json.NewDecoder(bytes.NewReader(raw))
			strict.DisallowUnknownFields()
			if err := strict.Decode(typed); err != nil {
				return nil, fmt.Errorf("decode %s: %w", obj.u.GetKind(), err)
			}
		}
		keep, err := tune(obj)
		if err != nil {
			return nil, err
		}
		if !keep {
			continue
		}
		out := obj.u
		if typed != nil {
			if out, err = toUnstructured(typed); err != nil {
				return nil, err
			}
		}
		if raw, err = json.Marshal(out.Object); err != nil {
			return nil, fmt.Errorf("encode %s: %w", obj.u.GetKind(), err)
		}
		docs = append(docs, raw)
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
