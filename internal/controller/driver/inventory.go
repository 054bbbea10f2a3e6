package driver

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/driver"
)

// taintRuleGK is the kind that stops allocations during a removal.
var taintRuleGK = schema.GroupKind{Group: "resource.k8s.io", Kind: "DeviceTaintRule"}

// object is the metadata of one object the controller manages.
type object struct {
	gvk schema.GroupVersionKind
	metav1.PartialObjectMetadata
}

// id is "Kind namespace/name" or "Kind name", for messages and set keys.
func (o object) id() string {
	return objectID(o.gvk.Kind, o.GetNamespace(), o.GetName())
}

func objectID(kind, namespace, name string) string {
	if namespace == "" {
		return kind + " " + name
	}
	return kind + " " + namespace + "/" + name
}

// installed is what exists in the cluster of one driver of a stack.
type installed struct {
	// objects are the driver's managed objects, taint rules apart.
	objects []object
	// taintRules are the driver's DeviceTaintRules.
	taintRules []object
}

// annotation returns an annotation found on any of the driver's objects.
func (in *installed) annotation(key string) string {
	if in == nil {
		return ""
	}
	for _, o := range append(slices.Clone(in.objects), in.taintRules...) {
		if v := o.GetAnnotations()[key]; v != "" {
			return v
		}
	}
	return ""
}

// annotations returns the values of an annotation on every object of the
// driver, taint rules included (empty where unset).
func (in *installed) annotations(key string) []string {
	if in == nil {
		return nil
	}
	var out []string
	for _, o := range append(slices.Clone(in.objects), in.taintRules...) {
		out = append(out, o.GetAnnotations()[key])
	}
	return out
}

// findRule returns the driver's DeviceTaintRule of the name, or nil.
func (in *installed) findRule(name string) *object {
	if in == nil {
		return nil
	}
	for i := range in.taintRules {
		if in.taintRules[i].GetName() == name {
			return &in.taintRules[i]
		}
	}
	return nil
}

// hasTaintRules says whether the driver's DeviceTaintRules are exactly
// those of the targets: every one exists, and no other is left (a rule
// for the whole driver name, from before the central publisher started
// publishing under it, would taint the publisher's devices).
func (in *installed) hasTaintRules(targets []driver.TaintTarget) bool {
	for _, t := range targets {
		if in.findRule(driver.TaintRuleName(t)) == nil {
			return false
		}
	}
	return len(in.staleRules(targets)) == 0
}

// ruleCount counts the driver's removal DeviceTaintRules.
func (in *installed) ruleCount() int {
	if in == nil {
		return 0
	}
	return len(in.taintRules)
}

// staleRules are the driver's DeviceTaintRules that no target names.
func (in *installed) staleRules(targets []driver.TaintTarget) []object {
	if in == nil {
		return nil
	}
	var out []object
	for _, r := range in.taintRules {
		if !slices.ContainsFunc(targets, func(t driver.TaintTarget) bool { return driver.TaintRuleName(t) == r.GetName() }) {
			out = append(out, r)
		}
	}
	return out
}

// find returns the installed object with the id ("Kind ns/name"), or nil.
func (in *installed) find(id string) *object {
	if in == nil {
		return nil
	}
	for i := range in.objects {
		if in.objects[i].id() == id {
			return &in.objects[i]
		}
	}
	return nil
}

// count returns how many objects of the kinds match.
func (in *installed) count(match func(schema.GroupKind) bool) int {
	if in == nil {
		return 0
	}
	n := 0
	for _, o := range in.objects {
		if match(o.gvk.GroupKind()) {
			n++
		}
	}
	return n
}

// inventory is every object labelled for one stack, by driver.
type inventory struct {
	drivers map[string]*installed
	// namespaces are the namespaces labelled for the stack.
	namespaces []object
}

// inventory lists the metadata of every managed kind labelled for the
// stack, in every namespace: objects left in a namespace the spec no
// longer names are found and pruned too. Only objects the driver
// lifecycle created count (driver.OwnedBy): one that merely carries the
// labels is someone else's, and is never changed, pruned or removed.
func (r *Reconciler) inventory(ctx context.Context, stack string) (*inventory, error) {
	inv := &inventory{drivers: map[string]*installed{}}
	kinds := slices.Clone(driver.ManagedKinds)
	if gvk, ok := r.taintRuleGVK(); ok {
		kinds = append(kinds, gvk)
	}
	for _, gvk := range kinds {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := r.APIReader.List(ctx, list, client.MatchingLabels{driver.LabelStack: stack}); err != nil {
			if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("list %s of stack %s: %w", gvk.Kind, stack, err)
		}
		for _, item := range list.Items {
			o := object{gvk: gvk, PartialObjectMetadata: item}
			if gvk.Kind == "Namespace" {
				if driver.Created(&item, stack) {
					inv.namespaces = append(inv.namespaces, o)
				}
				continue
			}
			name := item.Labels[driver.LabelDriver]
			if name == "" || !driver.OwnedBy(&item, stack, name) {
				continue
			}
			in := inv.drivers[name]
			if in == nil {
				in = &installed{}
				inv.drivers[name] = in
			}
			if gvk.GroupKind() == taintRuleGK {
				in.taintRules = append(in.taintRules, o)
			} else {
				in.objects = append(in.objects, o)
			}
		}
	}
	return inv, nil
}

// taintRuleVersions are the DeviceTaintRule versions to use, most stable
// first: 1.36 serves v1beta2 and the deprecated v1alpha3, and discovery
// alone would not say which to prefer.
var taintRuleVersions = []string{"v1", "v1beta2", "v1beta1", "v1alpha3"}

// taintRuleGVK returns the version the API server serves DeviceTaintRule
// in, from discovery.
func (r *Reconciler) taintRuleGVK() (schema.GroupVersionKind, bool) {
	mapping, err := r.Client.RESTMapper().RESTMapping(taintRuleGK, taintRuleVersions...)
	if err != nil {
		return schema.GroupVersionKind{}, false
	}
	return mapping.GroupVersionKind, true
}

// servedTaintRules returns the DeviceTaintRule kind to write, or nil where
// the cluster does not serve it (discovery), or the cluster probe of the
// DRAStack found it off.
func (r *Reconciler) servedTaintRules(cluster *v1alpha1.ClusterStatus) *schema.GroupVersionKind {
	gvk, ok := r.taintRuleGVK()
	if !ok {
		return nil
	}
	if cluster != nil && len(cluster.ResourceAPIVersions) > 0 && !cluster.Features.DeviceTaintRules {
		return nil
	}
	return &gvk
}

// driverNamesOf returns the DRA driver names of an installed driver: from
// its objects' annotation, else the spec, else just its name.
func driverNamesOf(name string, in *installed, fromSpec []string) []string {
	if v := in.annotation(driver.AnnotationDriverNames); v != "" {
		return strings.Split(v, ",")
	}
	if len(fromSpec) > 0 {
		return fromSpec
	}
	return []string{name}
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
