package driver

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/drastack/drastack/internal/driver"
)

// maxProblemMessage bounds an API error quoted in status.
const maxProblemMessage = 300

// apply server-side applies every object of a render but the shared
// namespace (applyNamespace does that). It never forces: a field another
// manager owns is reported as a conflict and left as it is. It returns the
// objects that failed; the others are applied regardless.
func (r *Reconciler) apply(ctx context.Context, rd *driver.Rendered) []driver.ApplyProblem {
	var problems []driver.ApplyProblem
	for _, u := range rd.Objects {
		if u.GetKind() == "Namespace" {
			continue
		}
		if p := r.applyOne(ctx, u); p != nil {
			problems = append(problems, *p)
		}
	}
	return problems
}

// applyOne applies one object and describes a failure.
func (r *Reconciler) applyOne(ctx context.Context, u *unstructured.Unstructured) *driver.ApplyProblem {
	obj := u.DeepCopy()
	err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(driver.FieldManager))
	if err == nil {
		return nil
	}
	id := objectID(u.GetKind(), u.GetNamespace(), u.GetName())
	log.FromContext(ctx).Error(err, "Apply failed", "object", id)
	return &driver.ApplyProblem{Object: id, Conflict: apierrors.IsConflict(err), Message: shorten(err.Error())}
}

// applyNamespace applies the shared namespace of the declared drivers
// (the first render that has one) and charges a failure to every driver,
// since none can run without it.
func (r *Reconciler) applyNamespace(ctx context.Context, want []*declared) {
	for _, d := range want {
		if d.rendered == nil {
			continue
		}
		if p := r.applyOne(ctx, d.rendered.Objects[0]); p != nil {
			for _, other := range want {
				other.problems = append(other.problems, *p)
			}
		}
		return
	}
}

// prune deletes the objects of a declared driver that its render no longer
// produces: a DeviceClass dropped from the spec, the controller of a
// feature turned off, objects left in a previous namespace, or the taint
// of an interrupted removal (the driver is back, so allocations resume).
func (r *Reconciler) prune(ctx context.Context, rd *driver.Rendered, in *installed) error {
	if in == nil {
		return nil
	}
	keep := map[string]bool{}
	for _, u := range rd.Objects {
		keep[objectID(u.GetKind(), u.GetNamespace(), u.GetName())] = true
	}
	for _, o := range append(append([]object(nil), in.objects...), in.taintRules...) {
		if keep[o.id()] {
			continue
		}
		log.FromContext(ctx).Info("Pruning an object the render no longer produces", "driver", rd.Driver, "object", o.id())
		if err := r.deleteObject(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

// deleteObject deletes one object by its metadata; gone is fine.
func (r *Reconciler) deleteObject(ctx context.Context, o object) error {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(o.gvk)
	u.SetNamespace(o.GetNamespace())
	u.SetName(o.GetName())
	background := metav1.DeletePropagationBackground
	if err := r.Client.Delete(ctx, u, &client.DeleteOptions{PropagationPolicy: &background}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete %s: %w", o.id(), err)
	}
	return nil
}

// shorten keeps an API error readable in status.
func shorten(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > maxProblemMessage {
		return s[:maxProblemMessage-3] + "..."
	}
	return s
}
