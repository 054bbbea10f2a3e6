package driver

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

func ptrTo[T any](v T) *T { return &v }

func runtimeRaw(js string) runtime.RawExtension { return runtime.RawExtension{Raw: []byte(js)} }

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func unstructuredString(obj map[string]any, fields ...string) (string, bool, error) {
	return unstructured.NestedString(obj, fields...)
}

func metaWithLabels(name string, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Labels: labels}
}
