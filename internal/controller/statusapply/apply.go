// Package statusapply writes parts of an object's status with server-side
// apply, one field manager per controller.
//
// Several controllers report into one DRAStack status (the stack reconciler
// its conditions and cluster probe, the pool controller PoolsHealthy and
// pool counts, the claim controller ClaimsReady). Server-side apply lets
// each own exactly the fields it writes, so they never overwrite each other
// and never need read-modify-write retries on conflicts.
package statusapply

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Apply server-side applies status (a struct or map holding only the
// fields this manager owns) to the status subresource of the object with
// the given GroupVersionKind and name, under fieldManager.
func Apply(ctx context.Context, c client.Client, apiVersion, kind, namespace, name, fieldManager string, status any) error {
	raw, err := json.Marshal(status)
	if err != nil {
		return fmt.Errorf("encode status of %s %s: %w", kind, name, err)
	}
	var fields map[string]any
	if err := json.Unmarshal(raw, &fields); err != nil {
		return fmt.Errorf("decode status of %s %s: %w", kind, name, err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": apiVersion,
		"kind":       kind,
		"metadata":   map[string]any{"name": name},
		"status":     fields,
	}}
	if namespace != "" {
		u.SetNamespace(namespace)
	}
	if err := c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply status of %s %s as %s: %w", kind, name, fieldManager, err)
	}
	return nil
}

// KeepTransitionTimes sets LastTransitionTime on each new condition: the old
// time when the status did not change, now otherwise. Server-side apply
// writes exactly what it is given, so this replaces what
// meta.SetStatusCondition does for read-modify-write updates.
func KeepTransitionTimes(old []metav1.Condition, conds []metav1.Condition, now metav1.Time) []metav1.Condition {
	out := make([]metav1.Condition, len(conds))
	for i, c := range conds {
		if prev := meta.FindStatusCondition(old, c.Type); prev != nil && prev.Status == c.Status {
			c.LastTransitionTime = prev.LastTransitionTime
		} else {
			c.LastTransitionTime = now
		}
		out[i] = c
	}
	return out
}
