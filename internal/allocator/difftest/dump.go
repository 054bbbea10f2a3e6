package difftest

import (
	"bytes"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Marshal writes a case as multi-document YAML that kubectl dra simulate
// reads: nodes, classes, slices, the allocated claims, then the claims to
// allocate (in the CLI they are allocated in order, each counting for the
// next, while the differential test tries each on its own).
func Marshal(c *Case) ([]byte, error) {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# difftest seed %d; per-claim nodes: %q\n", c.Seed, c.Node)
	write := func(obj any) error {
		data, err := yaml.Marshal(obj)
		if err != nil {
			return fmt.Errorf("marshal: %w", err)
		}
		buf.WriteString("---\n")
		buf.Write(data)
		return nil
	}
	resource := metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String()}
	for _, n := range c.Inputs.Nodes {
		o := n.DeepCopy()
		o.TypeMeta = metav1.TypeMeta{APIVersion: corev1.SchemeGroupVersion.String(), Kind: "Node"}
		if err := write(o); err != nil {
			return nil, err
		}
	}
	for _, cl := range c.Inputs.Classes {
		o := cl.DeepCopy()
		o.TypeMeta, o.Kind = resource, "DeviceClass"
		if err := write(o); err != nil {
			return nil, err
		}
	}
	for _, s := range c.Inputs.Slices {
		o := s.DeepCopy()
		o.TypeMeta, o.Kind = resource, "ResourceSlice"
		if err := write(o); err != nil {
			return nil, err
		}
	}
	for _, cl := range append(c.Inputs.Allocated[:len(c.Inputs.Allocated):len(c.Inputs.Allocated)], c.Claims...) {
		o := cl.DeepCopy()
		o.TypeMeta, o.Kind = resource, "ResourceClaim"
		if err := write(o); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}
