package v1alpha1_test

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// TestEveryFieldDocumented walks the generated CRD schemas: every property
// must carry a description, because `kubectl explain` shows exactly that.
func TestEveryFieldDocumented(t *testing.T) {
	files, err := filepath.Glob("../../config/crd/bases/*.yaml")
	if err != nil || len(files) != 2 {
		t.Fatalf("expected the two generated CRDs, got %v (%v)", files, err)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, v := range crd.Spec.Versions {
			var undocumented []string
			walk(v.Schema.OpenAPIV3Schema, crd.Spec.Names.Singular, &undocumented)
			sort.Strings(undocumented)
			if len(undocumented) > 0 {
				t.Errorf("%s %s: fields without description: %v", crd.Name, v.Name, undocumented)
			}
		}
	}
}

// walk records properties without a description. metadata, apiVersion and
// kind are documented by Kubernetes itself.
func walk(s *apiextensionsv1.JSONSchemaProps, path string, out *[]string) {
	if s == nil {
		return
	}
	for name, p := range s.Properties {
		child := path + "." + name
		if path != "" && (name == "metadata" || name == "apiVersion" || name == "kind") && !strings.Contains(path, ".") {
			continue
		}
		if p.Description == "" {
			*out = append(*out, child)
		}
		walk(&p, child, out)
	}
	if s.Items != nil && s.Items.Schema != nil {
		walk(s.Items.Schema, path+"[]", out)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		walk(s.AdditionalProperties.Schema, path+"{}", out)
	}
}
