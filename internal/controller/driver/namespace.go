package driver

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/drastack/drastack/internal/driver"
)

// cleanupNamespaces handles the namespaces labelled for the stack that no
// driver needs any more: every one but current while drivers are declared,
// all of them otherwise. A namespace only the driver lifecycle manages is
// deleted; one that someone else manages too (it existed before, or holds
// other things, maybe the operator itself) keeps everything but what the
// driver lifecycle added: its labels are released. It reports whether
// nothing is left to do.
func (r *Reconciler) cleanupNamespaces(ctx context.Context, stack, current string, driversDeclared bool) (bool, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(namespaceGVK.GroupVersion().WithKind("NamespaceList"))
	if err := r.APIReader.List(ctx, list, client.MatchingLabels{driver.LabelStack: stack}); err != nil {
		return false, fmt.Errorf("list namespaces of stack %s: %w", stack, err)
	}
	done := true
	for i := range list.Items {
		ns := &list.Items[i]
		if driversDeclared && ns.Name == current {
			continue
		}
		if ns.DeletionTimestamp != nil || !driver.Created(ns, stack) {
			// Someone else's namespace that only carries the label is
			// never deleted or changed.
			continue
		}
		logger := log.FromContext(ctx).WithValues("namespace", ns.Name)
		if onlyManagedByUs(ns.ManagedFields) {
			logger.Info("Deleting the driver namespace: no driver needs it")
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(namespaceGVK)
			u.SetName(ns.Name)
			if err := r.Client.Delete(ctx, u); err != nil && !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("delete namespace %s: %w", ns.Name, err)
			}
			continue
		}
		logger.Info("Releasing the driver namespace: others manage it too, only the drastack labels go")
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(namespaceGVK)
		u.SetName(ns.Name)
		if err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(driver.FieldManager)); err != nil {
			done = false
			logger.Error(err, "Releasing the namespace failed")
		}
	}
	return done, nil
}

// onlyManagedByUs reports whether every manager of the object's fields
// (status apart, which the namespace controller writes) is the driver
// lifecycle.
func onlyManagedByUs(entries []metav1.ManagedFieldsEntry) bool {
	if len(entries) == 0 {
		return false
	}
	for _, e := range entries {
		if e.Subresource == "status" {
			continue
		}
		if e.Manager != driver.FieldManager {
			return false
		}
	}
	return true
}
