package driver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/driver"
	"github.com/drastack/drastack/internal/note"
)

// maxProblemMessage bounds an API error quoted in status.
const maxProblemMessage = 300

// apply server-side applies every object of a render but the shared
// namespace (applyNamespace does that). An object that exists labelled for
// the driver is the operator's own: a field someone else took over is
// taken back (force), which is how a deleted policy binding or an edited
// ClusterRole is restored, with an Event naming it; on the plugin's
// workloads (driver.ForcedOnDrift) such a field is reported as a conflict
// instead, never fought over. An object of the same
// name that the operator did not create is never forced: the conflict is
// reported and the object left as it is. It returns the objects that
// failed; the others are applied regardless. An object not in the
// inventory is looked for first: one of the same name that the operator
// did not create for the driver is reported and left alone (see
// ownership.go), whatever server-side apply would have made of it.
//
// The render orders CustomResourceDefinitions before the workloads; a
// workload is applied only when every definition of the render is
// established (as the API server answered the apply), so that no plugin or
// controller starts before the custom resources it lists are served. The
// definitions not established yet are recorded in d.pendingCRDs; their
// status change (a watched event) brings the next reconcile.
func (r *Reconciler) apply(ctx context.Context, st *v1alpha1.DRAStack, d *declared, in *installed) []driver.ApplyProblem {
	rd := d.rendered
	var problems []driver.ApplyProblem
	d.pendingCRDs = nil
	for _, u := range rd.Objects {
		if u.GetKind() == "Namespace" {
			continue
		}
		gk := u.GroupVersionKind().GroupKind()
		if driver.IsWorkload(gk) && len(d.pendingCRDs) > 0 {
			continue
		}
		id := objectID(u.GetKind(), u.GetNamespace(), u.GetName())
		have := in.find(id)
		if have == nil {
			// Not in the inventory: new, or someone else's of the same
			// name, which is never labelled, changed or deleted.
			other, err := r.existing(ctx, u)
			if err == nil && other != nil && !driver.OwnedBy(other, st.Name, rd.Driver) {
				err = fmt.Errorf("%s", driver.NotCreated(other, st.Name, rd.Driver))
				r.warnNotCreated(st, rd.Driver, id, err.Error(), u)
			}
			if err != nil {
				if driver.IsCRD(gk) {
					d.pendingCRDs = append(d.pendingCRDs, u.GetName())
				}
				problems = append(problems, driver.ApplyProblem{Object: id, Conflict: other != nil, Message: shorten(err.Error())})
				continue
			}
		}
		key := st.Name + "/" + rd.Driver + "/" + id
		hash := renderHash(u)
		prevHash, before := r.memory.get(key)
		after, p := r.applyObject(ctx, u, have != nil && driver.ForcedOnDrift(u.GroupVersionKind().GroupKind()))
		var replacedFrom []string
		if have != nil && driver.ReplacedOnDrift(u.GroupVersionKind().GroupKind()) {
			after, p, replacedFrom = r.replaceDrifted(ctx, u, after, p)
		}
		if p != nil {
			if driver.IsCRD(gk) {
				// The workloads wait for a definition that could not be
				// applied as for one not established yet.
				d.pendingCRDs = append(d.pendingCRDs, u.GetName())
			}
			if p.Invalid {
				// The API server refused what the spec rendered to: a spec
				// error (a patch that sets a bad value), reported with the
				// entry's path.
				p.Message = field.Invalid(d.path, field.OmitValueType{}, id+": "+driver.OneLine(p.Message)).Error()
			}
			problems = append(problems, *p)
			continue
		}
		r.memory.set(key, hash)
		if driver.IsCRD(gk) && !driver.CRDEstablished(after) {
			d.pendingCRDs = append(d.pendingCRDs, u.GetName())
		}
		a := driver.Applied{Before: before, PrevHash: prevHash, Hash: hash, Existed: have != nil,
			AfterUID: string(after.GetUID()), AfterGeneration: after.GetGeneration(), AfterResourceVersion: after.GetResourceVersion()}
		if have != nil {
			a.UID, a.Generation, a.ResourceVersion = string(have.GetUID()), have.GetGeneration(), have.GetResourceVersion()
		}
		drift, detail := driver.DriftOf(a), ""
		if len(replacedFrom) > 0 {
			drift, detail = driver.DriftChanged, " by "+strings.Join(replacedFrom, ", ")
		}
		if drift != driver.DriftNone {
			log.FromContext(ctx).Info("Restored an object of a driver", "driver", rd.Driver, "object", id, "drift", drift, "by", replacedFrom)
			if r.Recorder != nil {
				// The restored object is the Event's related object and the
				// action says how: the event library folds Events that share
				// both into one series that keeps the first note, so two
				// objects, or a deletion and a later edit, stay apart.
				action := "Recreate"
				if drift == driver.DriftChanged {
					action = "Revert"
				}
				r.Recorder.Eventf(st, after, corev1.EventTypeWarning, ReasonObjectRestored, action, "Restored %s: %s%s (driver %s)", id, drift, detail, rd.Driver)
			}
		}
	}
	return problems
}

// ReasonObjectRestored is the reason of the Event when an object of a
// driver was found deleted or changed and applied again.
const ReasonObjectRestored = "ObjectRestored"

// renderHash identifies what the render says an object is; equal renders
// give equal hashes (JSON sorts map keys).
func renderHash(u *unstructured.Unstructured) string {
	data, err := json.Marshal(u.Object)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// appliedMemory remembers, for this process, which render of each object
// was last applied successfully: what tells a restored object from a new
// one. After a restart nothing is remembered, so an object deleted while
// the operator was down is restored without an Event.
type appliedMemory struct {
	mu   sync.Mutex
	hash map[string]string
	// said are the one-time Events emitted, by key.
	said map[string]bool
}

// once says true the first time it is called with a key.
func (m *appliedMemory) once(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.said == nil {
		m.said = map[string]bool{}
	}
	if m.said[key] {
		return false
	}
	m.said[key] = true
	return true
}

func (m *appliedMemory) get(key string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.hash[key]
	return h, ok
}

func (m *appliedMemory) set(key, hash string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.hash == nil {
		m.hash = map[string]string{}
	}
	m.hash[key] = hash
}

// forget drops the keys with the prefix (one object, or every object of a
// driver being removed), so that re-creating them later is no restore.
func (m *appliedMemory) forget(prefix string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.hash {
		if strings.HasPrefix(k, prefix) {
			delete(m.hash, k)
		}
	}
	for k := range m.said {
		if strings.HasPrefix(k, prefix) {
			delete(m.said, k)
		}
	}
}

// replaceDrifted puts back the render of an object of a kind whose every
// field is the render's (driver.ReplacedOnDrift) when another manager
// changed it: server-side apply cannot remove fields it does not own (a
// validationActions set to [Warn] by an edit would become [Warn, Deny],
// which the API server refuses). It replaces the object (PUT) with the
// render, then applies again so that the operator's apply owns the fields.
// after and p are the forced apply's outcome; it returns the new outcome
// and the managers whose changes were undone (none: nothing done).
func (r *Reconciler) replaceDrifted(ctx context.Context, u, after *unstructured.Unstructured, p *driver.ApplyProblem) (*unstructured.Unstructured, *driver.ApplyProblem, []string) {
	if _, aggregated := u.Object["aggregationRule"]; aggregated {
		// kube-controller-manager writes the rules of an aggregated
		// ClusterRole (a patch may add one): that is no drift.
		return after, p, nil
	}
	cur := after
	if p != nil {
		if !p.Invalid && !p.Conflict {
			return after, p, nil
		}
		cur = &unstructured.Unstructured{}
		cur.SetGroupVersionKind(u.GroupVersionKind())
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(u), cur); err != nil {
			return after, p, nil
		}
	}
	foreign := driver.ForeignManagers(cur.GetManagedFields(), driver.FieldManager)
	if len(foreign) == 0 {
		return after, p, nil
	}
	repl := u.DeepCopy()
	repl.SetResourceVersion(cur.GetResourceVersion())
	if err := r.Client.Update(ctx, repl, client.FieldOwner(driver.FieldManager)); err != nil {
		id := objectID(u.GetKind(), u.GetNamespace(), u.GetName())
		log.FromContext(ctx).Error(err, "Replacing a changed object failed", "object", id, "changedBy", foreign)
		return after, &driver.ApplyProblem{Object: id, Conflict: apierrors.IsConflict(err), Message: "restore after a change by " + strings.Join(foreign, ", ") + ": " + shorten(err.Error())}, nil
	}
	after, p = r.applyObject(ctx, u, true)
	return after, p, foreign
}

// applyOne applies one object without taking over fields of other
// managers, and describes a failure.
func (r *Reconciler) applyOne(ctx context.Context, u *unstructured.Unstructured) *driver.ApplyProblem {
	_, p := r.applyObject(ctx, u, false)
	return p
}

// applyObject applies one object, forcing ownership of the rendered fields
// when force is set, and returns the API server's answer or a problem.
func (r *Reconciler) applyObject(ctx context.Context, u *unstructured.Unstructured, force bool) (*unstructured.Unstructured, *driver.ApplyProblem) {
	obj := u.DeepCopy()
	opts := []client.ApplyOption{client.FieldOwner(driver.FieldManager)}
	if force {
		opts = append(opts, client.ForceOwnership)
	}
	err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), opts...)
	if err == nil {
		return obj, nil
	}
	id := objectID(u.GetKind(), u.GetNamespace(), u.GetName())
	log.FromContext(ctx).Error(err, "Apply failed", "object", id)
	p := &driver.ApplyProblem{Object: id, Conflict: apierrors.IsConflict(err), Invalid: apierrors.IsInvalid(err), Message: shorten(err.Error())}
	if p.Conflict {
		var causes []metav1.StatusCause
		if st, ok := err.(apierrors.APIStatus); ok && st.Status().Details != nil {
			causes = st.Status().Details.Causes
		}
		p.Message = driver.DescribeConflict(causes)
	}
	return obj, p
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
// CustomResourceDefinitions are never pruned.
func (r *Reconciler) prune(ctx context.Context, stack string, rd *driver.Rendered, in *installed) error {
	if in == nil {
		return nil
	}
	keep := map[string]bool{}
	for _, u := range rd.Objects {
		keep[objectID(u.GetKind(), u.GetNamespace(), u.GetName())] = true
	}
	for _, o := range append(append([]object(nil), in.objects...), in.taintRules...) {
		if keep[o.id()] || !driver.Prunable(o.gvk.GroupKind()) {
			// A CustomResourceDefinition the render no longer produces
			// stays: deleting it would delete its custom resources. The
			// driver's removal handles it.
			continue
		}
		r.memory.forget(stack + "/" + rd.Driver + "/" + o.id())
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

// shorten keeps an API error readable in status: quoted values give way
// before the cause at the end of the error does.
func shorten(s string) string {
	return note.Shorten(s, maxProblemMessage)
}
