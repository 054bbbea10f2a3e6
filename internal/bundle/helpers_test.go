package bundle

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// decodeAll decodes a multi-document YAML stream, skipping empty documents.
func decodeAll(t *testing.T, stream string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, doc := range splitDocuments(stream) {
		obj, err := decodeObject([]byte(doc))
		if err != nil {
			t.Fatalf("decode fixture: %v\n%s", err, doc)
		}
		out = append(out, obj)
	}
	return out
}

// splitDocuments splits a YAML stream at "---" lines.
func splitDocuments(stream string) []string {
	var docs []string
	for _, doc := range strings.Split("\n"+stream+"\n", "\n---\n") {
		if strings.TrimSpace(doc) != "" {
			docs = append(docs, doc)
		}
	}
	return docs
}

// find returns the objects of the given kind (and name, if not empty).
func find(objs []*unstructured.Unstructured, kind, name string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			out = append(out, o)
		}
	}
	return out
}
