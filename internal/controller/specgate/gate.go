// Package specgate is the gate every controller that changes what runs
// passes before it acts on a DRAStack spec: it reads what the whole-spec
// check (internal/stack Check) needs of the cluster and returns the
// verdict. The stack reconciler reports it as SpecValid; the driver
// lifecycle controller and the central publisher act on a spec only when
// it is valid, and otherwise leave everything the last valid spec made
// as it is. Each controller asks the gate itself, for the generation it
// is about to act on, so no controller waits for another's report.
package specgate

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/driver"
	"github.com/drastack/drastack/internal/stack"
)

// RBAC the gate needs, held by every controller that uses it (one role).
// Facts: nodes and ResourceSlices from the manager's cache, the driver
// namespace by a list with a name field selector (the cache holds only
// namespaces labelled for a stack).
// +kubebuilder:rbac:groups="",resources=nodes,verbs=list;watch
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceslices,verbs=list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=list

// Gate reads the facts of the whole-spec check.
type Gate struct {
	// Cache reads Nodes and ResourceSlices (the manager's cache).
	Cache client.Reader
	// API reads the driver namespace from the API server: the cache holds
	// only namespaces labelled for a stack, and a namespace someone else
	// created is exactly one that is not.
	API client.Reader
	// OperatorNamespace is the operator's own namespace.
	OperatorNamespace string
}

// What a Check reads besides the spec and the namespace.
type What struct {
	// Published reads the driver names of every ResourceSlice, for the
	// warning about central entries of drivers nothing publishes; only
	// the reconciler that reports SpecValid needs it.
	Published bool
}

// Check returns the whole-spec verdict on st's spec. An error means a
// fact could not be read; the caller must then not act on the spec.
func (g *Gate) Check(ctx context.Context, st *v1alpha1.DRAStack, what What) (stack.Verdict, error) {
	f, err := g.Facts(ctx, st, what)
	if err != nil {
		return stack.Verdict{}, err
	}
	return stack.Check(&st.Spec, f), nil
}

// Facts reads what stack.Check needs to know of the cluster.
func (g *Gate) Facts(ctx context.Context, st *v1alpha1.DRAStack, what What) (stack.Facts, error) {
	f := stack.Facts{OperatorNamespace: g.OperatorNamespace}
	for i := range st.Spec.Drivers {
		f.DriverNames = append(f.DriverNames, driver.DriverNames(&st.Spec.Drivers[i]))
	}
	if len(st.Spec.Drivers) > 0 {
		// Which namespace the drivers go to matters only when there are
		// drivers: a namespace named but never used is no reason to stop
		// anything.
		ns, err := g.namespace(ctx, st)
		if err != nil {
			return f, err
		}
		f.Namespace = ns
	}
	if len(st.Spec.MultiHost) > 0 || len(st.Spec.Claims.Central) > 0 {
		var nodes corev1.NodeList
		if err := g.Cache.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
			return f, fmt.Errorf("list nodes: %w", err)
		}
		f.Nodes = nodes.Items
	}
	published := what.Published && len(st.Spec.Claims.Central) > 0
	if published || len(st.Spec.MultiHost) > 0 {
		var list resourcev1.ResourceSliceList
		if err := g.Cache.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
			return f, fmt.Errorf("list ResourceSlices: %w", err)
		}
		if published {
			f.Published = map[string]bool{}
		}
		multiHost := map[string]bool{}
		for _, m := range st.Spec.MultiHost {
			multiHost[m.Driver] = true
		}
		for i := range list.Items {
			sl := &list.Items[i]
			if published {
				f.Published[sl.Spec.Driver] = true
			}
			if multiHost[sl.Spec.Driver] && sl.Spec.NodeName == nil && !WrittenByPublisher(sl) {
				if f.ForeignSlices == nil {
					f.ForeignSlices = map[string][]string{}
				}
				f.ForeignSlices[sl.Spec.Driver] = append(f.ForeignSlices[sl.Spec.Driver], sl.Name)
			}
		}
		for _, names := range f.ForeignSlices {
			slices.Sort(names)
		}
	}
	return f, nil
}

// WrittenByPublisher says whether the central publisher wrote a
// ResourceSlice: it is owned by a DRAStack (the library writes the owner
// it is started with).
func WrittenByPublisher(sl *resourcev1.ResourceSlice) bool {
	for _, ref := range sl.OwnerReferences {
		if ref.Kind == "DRAStack" && ref.APIVersion == v1alpha1.GroupVersion.String() {
			return true
		}
	}
	return false
}

// namespace reads spec.namespace as stack.Check sees it.
func (g *Gate) namespace(ctx context.Context, st *v1alpha1.DRAStack) (*stack.NamespaceFacts, error) {
	name := st.Spec.Namespace
	if name == "" {
		name = stack.DefaultDriverNamespace
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	if err := g.API.List(ctx, list, client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", name)}); err != nil {
		return nil, fmt.Errorf("read namespace %s: %w", name, err)
	}
	for i := range list.Items {
		if list.Items[i].Name == name {
			return NamespaceFacts(&list.Items[i], st.Name), nil
		}
	}
	return &stack.NamespaceFacts{}, nil
}

// NamespaceFacts is what stack.Check needs of an existing namespace:
// whether the driver lifecycle created it for the stack (driver.Created),
// who manages it, and the Pod Security level it enforces.
func NamespaceFacts(ns *metav1.PartialObjectMetadata, stackName string) *stack.NamespaceFacts {
	f := &stack.NamespaceFacts{
		Exists:      true,
		Created:     driver.Created(ns, stackName),
		Enforce:     ns.Labels[stack.PodSecurityEnforceLabel],
		Terminating: ns.DeletionTimestamp != nil,
	}
	for _, e := range ns.ManagedFields {
		if e.Subresource == "" && !slices.Contains(f.Managers, e.Manager) {
			f.Managers = append(f.Managers, e.Manager)
		}
	}
	slices.Sort(f.Managers)
	return f
}
