package driver

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
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
	// Objects are every object to apply, in apply order. The first is the
	// shared namespace, which carries no driver label.
	Objects []*unstructured.Unstructured
}

// Render turns one driver entry into the objects to apply. It is pure: the
// same input gives the same objects, byte for byte once serialized.
func Render(in Input) (*Rendered, error) {
	spec := in.Driver.DeepCopy()
	prof, err := Lookup(spec.Profile)
	if err != nil {
		return nil, err
	}
	if err := validateInput(in); err != nil {
		return nil, err
	}
	if err := prof.Validate(spec); err != nil {
		return nil, err
	}
	def := prof.Defaults(spec.Name)
	image := spec.Image
	if image == "" {
		image = def.Image
	}
	if err := validateImage(image); err != nil {
		return nil, err
	}
	policy := spec.RemovalPolicy
	if policy == "" {
		policy = v1alpha1.RemovalPolicyDrain
	}
	prefix := NamePrefix(spec.Name)
	tokens := strings.NewReplacer(
		"__DRASTACK_DRIVER__", spec.Name,
		"__DRASTACK_PLUGIN_USER__", serviceaccount.MakeUsername(in.Namespace, prefix+"-"+pluginServiceAccount),
		"__DRASTACK_DRIVER_LIST__", celList(def.DriverNames),
		"DRASTACK_DRIVER_IMAGE", image,
	)
	objs, err := build(prof.Name(), tokens, func(w workload) error { return w.apply(spec, def.PluginContainers) }, kustomization{
		Namespace: in.Namespace,
		Prefix:    prefix + "-",
		Labels:    map[string]string{LabelStack: in.Stack, LabelDriver: spec.Name, LabelManagedBy: ManagedByValue},
		Patches:   spec.Patches,
	})
	if err != nil {
		return nil, err
	}

	classSpecs := spec.DeviceClasses
	if len(classSpecs) == 0 {
		classSpecs = def.DeviceClasses
	}
	out := &Rendered{
		Driver:        spec.Name,
		Profile:       prof.Name(),
		Image:         image,
		Version:       ImageVersion(image),
		DriverNames:   def.DriverNames,
		Requirements:  prof.Requirements(spec),
		RemovalPolicy: policy,
	}
	for _, dc := range deviceClasses(classSpecs, def.DriverNames) {
		u, err := toUnstructured(dc)
		if err != nil {
			return nil, err
		}
		u.SetLabels(map[string]string{LabelStack: in.Stack, LabelDriver: spec.Name, LabelManagedBy: ManagedByValue})
		objs = append(objs, u)
		out.DeviceClasses = append(out.DeviceClasses, dc.Name)
	}
	if err := finish(out, objs, in, policy); err != nil {
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
func validateInput(in Input) error {
	if errs := validation.IsValidLabelValue(in.Stack); len(errs) > 0 || in.Stack == "" {
		return fmt.Errorf("stack name %q: not a valid label value", in.Stack)
	}
	if errs := validation.IsDNS1123Label(in.Namespace); len(errs) > 0 {
		return fmt.Errorf("namespace %q: %s", in.Namespace, strings.Join(errs, "; "))
	}
	name := in.Driver.Name
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 || len(name) > 63 {
		return fmt.Errorf("driver name %q: must be a DNS subdomain of at most 63 characters", name)
	}
	seen := map[string]bool{}
	for _, dc := range in.Driver.DeviceClasses {
		if errs := validation.IsDNS1123Subdomain(dc.Name); len(errs) > 0 {
			return fmt.Errorf("device class %q: %s", dc.Name, strings.Join(errs, "; "))
		}
		if seen[dc.Name] {
			return fmt.Errorf("device class %q listed twice", dc.Name)
		}
		seen[dc.Name] = true
	}
	return nil
}

// imagePattern accepts container image references: registry, path, tag and
// digest characters only, so an image cannot inject YAML.
var imagePattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._/:@+-]*$`)

func validateImage(image string) error {
	if image == "" {
		return errors.New("no image: the profile has no default, set spec.drivers[].image")
	}
	if len(image) > 512 || !imagePattern.MatchString(image) {
		return fmt.Errorf("image %q: not a container image reference", image)
	}
	return nil
}

// ImageVersion is the tag of an image reference ("v0.2.0"), its digest
// shortened to 12 hex digits ("sha256:0123456789ab"), or "latest".
func ImageVersion(image string) string {
	if at := strings.LastIndex(image, "@"); at >= 0 {
		d := image[at+1:]
		if colon := strings.Index(d, ":"); colon >= 0 && len(d) > colon+13 {
			return d[:colon+13]
		}
		return d
	}
	last := image[strings.LastIndex(image, "/")+1:]
	if colon := strings.LastIndex(last, ":"); colon >= 0 {
		return last[colon+1:]
	}
	return "latest"
}

// celList is a CEL list literal of strings.
func celList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
