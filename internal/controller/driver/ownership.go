package driver

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/note"
)

// The operator never adopts: an object it would apply that exists but is
// not in the inventory (not created by the driver lifecycle for this
// driver, see driver.OwnedBy) is left exactly as it is. Server-side apply
// alone would take it over silently whenever the render agrees with its
// fields (a DeviceClass of the same name and selector gains the drastack
// labels, and the driver's removal then deletes it), so the operator
// looks first.

// existing returns the metadata of the object of u's kind, namespace and
// name, or nil when there is none. It lists by name: the operator may
// list every kind it manages, and get only some.
func (r *Reconciler) existing(ctx context.Context, u *unstructured.Unstructured) (*metav1.PartialObjectMetadata, error) {
	gvk := u.GroupVersionKind()
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	opts := []client.ListOption{client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", u.GetName())}}
	if ns := u.GetNamespace(); ns != "" {
		opts = append(opts, client.InNamespace(ns))
	}
	if err := r.APIReader.List(ctx, list, opts...); err != nil {
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("look for %s: %w", objectID(gvk.Kind, u.GetNamespace(), u.GetName()), err)
	}
	for i := range list.Items {
		if list.Items[i].Name == u.GetName() {
			return &list.Items[i], nil
		}
	}
	return nil, nil
}

// warnNotCreated emits one Warning Event per object and driver: an object
// of a name the driver needs exists and is someone else's.
func (r *Reconciler) warnNotCreated(st *v1alpha1.DRAStack, driverName, id, msg string, related *unstructured.Unstructured) {
	if !r.memory.once(st.Name + "/" + driverName + "/!foreign/" + id) {
		return
	}
	log.Log.WithName("driver").Info("An object of the driver's name exists and is someone else's; it is left alone", "driver", driverName, "object", id)
	if r.Recorder != nil {
		r.Recorder.Eventf(st, related, corev1.EventTypeWarning, ReasonNotCreated, "Apply", "%s", note.Shorten(fmt.Sprintf("%s %s (driver %s)", id, msg, driverName), maxNote))
	}
}

// ReasonNotCreated is the reason of the Warning about an object of a
// rendered name that the operator did not create and leaves alone.
const ReasonNotCreated = "ObjectNotCreated"
