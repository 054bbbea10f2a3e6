package driver

import (
	"fmt"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// celSelectors wraps CEL expressions as device selectors.
func celSelectors(exprs ...string) []resourcev1.DeviceSelector {
	out := make([]resourcev1.DeviceSelector, len(exprs))
	for i, e := range exprs {
		out[i] = resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: e}}
	}
	return out
}

// deviceClasses builds the DeviceClasses of a driver: the spec's, or the
// profile's when the spec lists none. Every class starts with a selector
// for the driver's own devices, so a class managed with one driver can
// never hand out another driver's devices, whatever else it selects.
func deviceClasses(specs []v1alpha1.DeviceClassSpec, driverNames []string) []*resourcev1.DeviceClass {
	own := celSelectors(driverSelector(driverNames))
	out := make([]*resourcev1.DeviceClass, 0, len(specs))
	for _, s := range specs {
		dc := &resourcev1.DeviceClass{
			TypeMeta:   metav1.TypeMeta{APIVersion: resourcev1.SchemeGroupVersion.String(), Kind: "DeviceClass"},
			ObjectMeta: metav1.ObjectMeta{Name: s.Name},
		}
		dc.Spec.Selectors = append(append([]resourcev1.DeviceSelector{}, own...), deepCopySelectors(s.Selectors)...)
		for _, c := range s.Config {
			dc.Spec.Config = append(dc.Spec.Config, *c.DeepCopy())
		}
		if s.ExtendedResourceName != nil {
			name := *s.ExtendedResourceName
			dc.Spec.ExtendedResourceName = &name
		}
		out = append(out, dc)
	}
	return out
}

func deepCopySelectors(in []resourcev1.DeviceSelector) []resourcev1.DeviceSelector {
	out := make([]resourcev1.DeviceSelector, len(in))
	for i := range in {
		out[i] = *in[i].DeepCopy()
	}
	return out
}

// toUnstructured converts a typed object for apply, dropping the fields a
// typed object always carries but an apply configuration must not set.
func toUnstructured(obj runtime.Object) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("convert %T: %w", obj, err)
	}
	u := &unstructured.Unstructured{Object: m}
	unstructured.RemoveNestedField(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u.Object, "spec", "template", "metadata", "creationTimestamp")
	return u, nil
}
