package pool

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// applyStatus server-side applies a DevicePool's whole status under
// FieldManager and returns the object's new resourceVersion. It is
// statusapply.Apply plus that version: the reconciler remembers it to know
// whether the cached DevicePool already shows its last write, which is
// what makes skipping unchanged writes safe (comparing with a cache that
// is a write behind could skip a write that is needed).
func applyStatus(ctx context.Context, c client.Client, name string, status *v1alpha1.DevicePoolStatus) (string, error) {
	raw, err := json.Marshal(status)
	if err != nil {
		return "", fmt.Errorf("encode status of DevicePool %s: %w", name, err)
	}
	var fields map[string]any
	if err := json.Unmarshal(raw, &fields); err != nil {
		return "", fmt.Errorf("decode status of DevicePool %s: %w", name, err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(),
		"kind":       "DevicePool",
		"metadata":   map[string]any{"name": name},
		"status":     fields,
	}}
	if err := c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return "", fmt.Errorf("apply status of DevicePool %s: %w", name, err)
	}
	// The client decodes the response into u.
	return u.GetResourceVersion(), nil
}
