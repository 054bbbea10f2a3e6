package driver

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/note"
	"github.com/drastack/drastack/internal/stack"
)

// Annotations every rendered object (but the shared namespace) carries, so
// that a driver removed from the spec can still be removed the way its
// last spec said: the spec entry is gone by then, the objects are not.
const (
	// AnnotationRemovalPolicy holds the driver's removalPolicy.
	AnnotationRemovalPolicy = "drastack.io/removal-policy"
	// AnnotationDriverNames holds the DRA driver names the driver publishes
	// under, comma separated.
	AnnotationDriverNames = "drastack.io/driver-names"
)

// pluginServiceAccount is the base name of the kubelet plugin's identity in
// every profile (profiles/common).
const pluginServiceAccount = "kubelet-plugin"

// Input is one driver entry of one DRAStack.
type Input struct {
	// Stack is the DRAStack's name, the value of LabelStack.
	Stack string
	// Namespace is where the driver's workloads run (spec.namespace).
	Namespace string
	// Driver is the spec entry.
	Driver v1alpha1.DriverSpec
	// Path is the entry's field path ("spec.drivers[0]"), named in
	// errors; default spec.drivers[<name>].
	Path *field.Path
	// Nodes are the nodes with capacity for one of the extended resources
	// NodeResources names for the spec (none for most profiles): a
	// profile may keep its plugin off some of them (see Refusal).
	Nodes []NodeFacts
}

// Rendered is what one driver entry deploys.
type Rendered struct {
	// Driver is the spec's driver name.
	Driver string
	// Profile is the profile used.
	Profile v1alpha1.DriverProfile
	// Image is the plugin image deployed, Version its tag or digest.
	Image, Version string
	// DriverNames are the DRA driver names the plugins publish under.
	DriverNames []string
	// DeviceClasses are the names of the DeviceClasses rendered.
	DeviceClasses []string
	// Requirements are what the driver needs from the cluster.
	Requirements []Requirement
	// RemovalPolicy is the policy to use when the driver is removed.
	RemovalPolicy v1alpha1.RemovalPolicy
	// PluginDaemonSet is the name of the kubelet-plugin DaemonSet.
	PluginDaemonSet string
	// Controllers are the names of the driver's controller Deployments.
	Controllers []string
	// CRDs are the names of the CustomResourceDefinitions rendered.
	CRDs []string
	// Refusal are the nodes the profile keeps the plugin off; nil when
	// none.
	Refusal *Refusal
	// Objects are every object to apply, in apply order. The first is the
	// shared namespace, which carries no driver label.
	Objects []*unstructured.Unstructured
}

// Render turns one driver entry into the objects to apply. It is pure: the
// same input gives the same objects, byte for byte once serialized. A spec
// it cannot deploy is a *field.Error naming the field to fix (a patch by
// its index) with a one-line reason.
func Render(in Input) (*Rendered, error) {
	path := in.path()
	spec := in.Driver.DeepCopy()
	prof, err := Lookup(spec.Profile)
	if err != nil {
		names := make([]string, 0, len(profiles))
		for _, n := range ProfileNames() {
			names = append(names, string(n))
		}
		return nil, field.NotSupported(path.Child("profile"), spec.Profile, names)
	}
	if err := validateInput(in, path); err != nil {
		return nil, err
	}
	if spec.NVIDIA != nil && prof.Name() != v1alpha1.DriverProfileNVIDIAGPU {
		return nil, field.Invalid(path.Child("nvidia"), field.OmitValueType{}, "nvidia configures the nvidia-gpu profile only")
	}
	if err := prof.Validate(spec, path); err != nil {
		return nil, err
	}
	def := defaultsOf(prof, spec)
	image := spec.Image
	if image == "" {
		image = def.Image
	}
	if image == "" {
		return nil, field.Required(path.Child("image"), "the profile has no default image")
	}
	img, err := stack.ParseImage(image)
	if err != nil {
		return nil, field.Invalid(path.Child("image"), image, err.Error())
	}
	policy := spec.RemovalPolicy
	if policy == "" {
		policy = v1alpha1.RemovalPolicyDrain
	}
	a := assembly{in: in, path: path, spec: spec, prof: prof, def: def, image: img, policy: policy}
	out, err := a.run(spec.Patches)
	if err == nil {
		return out, nil
	}
	if ferr := (*field.Error)(nil); errors.As(err, &ferr) {
		return nil, ferr
	}
	return nil, a.blame(err)
}

// path is the spec entry's field path, for errors.
func (in Input) path() *field.Path {
	if in.Path != nil {
		return in.Path
	}
	return field.NewPath("spec", "drivers").Key(in.Driver.Name)
}

// assembly is a validated spec entry on its way to objects.
type assembly struct {
	in     Input
	path   *field.Path
	spec   *v1alpha1.DriverSpec
	prof   Profile
	def    Defaults
	image  stack.Image
	policy v1alpha1.RemovalPolicy
}

// blame finds what made run fail: the first patch with which it fails (it
// is run again with ever more of the patches; only a failing render pays
// for that), else the entry itself. Kustomize's multi-line error becomes
// one line.
func (a assembly) blame(err error) *field.Error {
	if _, base := a.run(nil); base != nil {
		return field.Invalid(a.path, field.OmitValueType{}, OneLine(base.Error()))
	}
	for j := range a.spec.Patches {
		if _, perr := a.run(a.spec.Patches[:j+1]); perr != nil {
			return field.Invalid(a.path.Child("patches").Index(j), field.OmitValueType{}, OneLine(perr.Error()))
		}
	}
	return field.Invalid(a.path.Child("patches"), field.OmitValueType{}, OneLine(err.Error()))
}

// run kustomizes the profile with the given patches and checks the result.
func (a assembly) run(patches []v1alpha1.Patch) (*Rendered, error) {
	spec, in := a.spec, a.in
	prefix := NamePrefix(spec.Name)
	tokens := strings.NewReplacer(
		"__DRASTACK_DRIVER__", spec.Name,
		"__DRASTACK_PLUGIN_USER__", serviceaccount.MakeUsername(in.Namespace, prefix+"-"+pluginServiceAccount),
		"__DRASTACK_DRIVER_LIST__", celList(a.def.DriverNames),
		"__DRASTACK_PREFIX__", prefix,
		"__DRASTACK_NAMESPACE__", in.Namespace,
		"DRASTACK_DRIVER_IMAGE", a.image.Ref,
	)
	var refusal *Refusal
	tune := func(obj *baseObject) (bool, error) {
		if t, ok := a.prof.(objectTuner); ok {
			keep, err := t.tune(spec, obj)
			if err != nil || !keep {
				return keep, err
			}
		}
		if err := obj.apply(spec, a.def.PluginContainers, a.path); err != nil {
			return false, err
		}
		if ds := obj.daemonSet; ds != nil && ds.Labels[LabelComponent] == ComponentKubeletPlugin {
			refusal = refuseNodes(a.prof, spec, in.Nodes, &ds.Spec.Template.Spec)
		}
		return true, nil
	}
	objs, err := build(a.prof.Name(), tokens, tune, kustomization{
		Namespace: in.Namespace,
		Prefix:    prefix + "-",
		Labels:    map[string]string{LabelStack: in.Stack, LabelDriver: spec.Name, LabelManagedBy: ManagedByValue},
		Patches:   patches,
	})
	if err != nil {
		return nil, err
	}

	classSpecs := spec.DeviceClasses
	if len(classSpecs) == 0 {
		classSpecs = a.def.DeviceClasses
	}
	out := &Rendered{
		Driver:        spec.Name,
		Profile:       a.prof.Name(),
		Image:         a.image.Ref,
		Version:       a.image.Version(),
		DriverNames:   a.def.DriverNames,
		Requirements:  a.prof.Requirements(spec),
		RemovalPolicy: a.policy,
		Refusal:       refusal,
	}
	for _, dc := range deviceClasses(classSpecs, a.def.DriverNames) {
		u, err := toUnstructured(dc)
		if err != nil {
			return nil, err
		}
		u.SetLabels(map[string]string{LabelStack: in.Stack, LabelDriver: spec.Name, LabelManagedBy: ManagedByValue})
		objs = append(objs, u)
		out.DeviceClasses = append(out.DeviceClasses, dc.Name)
	}
	if err := finish(out, objs, in, a.policy); err != nil {
		return nil, err
	}
	return out, nil
}

// finish checks what kustomize and the user's patches produced, marks every
// object for removal, and orders the objects for apply.
func finish(out *Rendered, objs []*unstructured.Unstructured, in Input, policy v1alpha1.RemovalPolicy) error {
	var namespaces int
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		id := fmt.Sprintf("%s %s", gvk.Kind, u.GetName())
		if !managedGVK(gvk) {
			return fmt.Errorf("%s: %s is not a kind drastack manages for drivers", id, gvk)
		}
		if clusterScoped(gvk.GroupKind()) {
			if u.GetNamespace() != "" {
				return fmt.Errorf("%s: cluster-scoped, but has namespace %q", id, u.GetNamespace())
			}
		} else if u.GetNamespace() != in.Namespace {
			return fmt.Errorf("%s: in namespace %q, want %q (patches may not move objects)", id, u.GetNamespace(), in.Namespace)
		}
		labels := u.GetLabels()
		if labels[LabelStack] != in.Stack || (gvk.Kind != "Namespace" && labels[LabelDriver] != in.Driver.Name) {
			return fmt.Errorf("%s: patches removed the drastack labels", id)
		}
		if gvk.Kind == "Namespace" {
			// Shared by every driver of the stack, so it names none.
			delete(labels, LabelDriver)
			u.SetLabels(labels)
			namespaces++
			continue
		}
		ann := u.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[AnnotationRemovalPolicy] = string(policy)
		ann[AnnotationDriverNames] = strings.Join(out.DriverNames, ",")
		u.SetAnnotations(ann)
		switch {
		case gvk.Kind == "DaemonSet" && labels[LabelComponent] == ComponentKubeletPlugin:
			if out.PluginDaemonSet != "" {
				return fmt.Errorf("%s: a second kubelet-plugin DaemonSet (first: %s)", id, out.PluginDaemonSet)
			}
			out.PluginDaemonSet = u.GetName()
		case gvk.Kind == "Deployment":
			out.Controllers = append(out.Controllers, u.GetName())
		case IsCRD(gvk.GroupKind()):
			out.CRDs = append(out.CRDs, u.GetName())
		}
	}
	if namespaces != 1 {
		return fmt.Errorf("rendered %d Namespace objects, want exactly one", namespaces)
	}
	if out.PluginDaemonSet == "" {
		return errors.New("no kubelet-plugin DaemonSet rendered (did a patch remove its labels?)")
	}
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
		ra, rb := kindRank(a.GroupVersionKind().GroupKind()), kindRank(b.GroupVersionKind().GroupKind())
		if ra != rb {
			return ra - rb
		}
		return strings.Compare(a.GetNamespace()+"/"+a.GetName(), b.GetNamespace()+"/"+b.GetName())
	})
	out.Objects = objs
	return nil
}

// validateInput rejects values that would make invalid objects or, since
// tokens are substituted into YAML text, change its structure. Admission
// checks the same for DRAStacks, but Render must be safe on its own.
func validateInput(in Input, path *field.Path) *field.Error {
	if errs := validation.IsValidLabelValue(in.Stack); len(errs) > 0 || in.Stack == "" {
		return field.Invalid(field.NewPath("metadata", "name"), in.Stack, "not a valid label value")
	}
	if errs := validation.IsDNS1123Label(in.Namespace); len(errs) > 0 {
		return field.Invalid(field.NewPath("spec", "namespace"), in.Namespace, strings.Join(errs, "; "))
	}
	name := in.Driver.Name
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 || len(name) > 63 {
		return field.Invalid(path.Child("name"), name, "must be a DNS subdomain of at most 63 characters")
	}
	seen := map[string]bool{}
	for i, dc := range in.Driver.DeviceClasses {
		p := path.Child("deviceClasses").Index(i).Child("name")
		if errs := validation.IsDNS1123Subdomain(dc.Name); len(errs) > 0 {
			return field.Invalid(p, dc.Name, strings.Join(errs, "; "))
		}
		if seen[dc.Name] {
			return field.Duplicate(p, dc.Name)
		}
		seen[dc.Name] = true
	}
	return nil
}

// OneLine condenses a multi-line error (kustomize's wrap every step and
// repeat the object) into one line: white space runs become one space,
// wrappers that only say where in kustomize it failed are dropped, and the
// result is shortened to maxReason characters, quoted values first, never
// the cause at its end (internal/note).
func OneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	for _, noise := range []string{"accumulating resources: ", "accumulation err='", "accumulating resources from '"} {
		s = strings.ReplaceAll(s, noise, "")
	}
	return note.Shorten(s, maxReason)
}

// maxReason bounds a condensed error in status.
const maxReason = 400

// celList is a CEL list literal of strings.
func celList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
