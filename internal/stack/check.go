package stack

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/note"
)

// Facts are what the whole-spec check needs to know of the cluster and the
// operator besides the spec. A zero field means "not known": the checks
// that need it are skipped (unit tests, or a read that failed).
type Facts struct {
	// OperatorNamespace is the namespace the operator itself runs in.
	OperatorNamespace string
	// Namespace is what the cluster shows of spec.namespace; nil: not read.
	Namespace *NamespaceFacts
	// DriverNames are, per spec.drivers entry, the DRA driver names its
	// plugins publish under (a profile may publish under several, NVIDIA's
	// under gpu.nvidia.com and compute-domain.nvidia.com); a missing or
	// empty entry means the entry's name alone.
	DriverNames [][]string
	// Nodes are the cluster's nodes, for the hosts of spec.multiHost
	// entries and the nodeSelectors of spec.claims.central; nil: the
	// checks that need them only look at the spec.
	Nodes []corev1.Node
	// Published are the driver names of the cluster's ResourceSlices; nil:
	// not read, so no central entry is reported as naming a driver that
	// nothing publishes.
	Published map[string]bool
	// ForeignSlices are, per spec.multiHost driver, the node-less
	// ResourceSlices of that driver the operator did not write: the
	// publisher reconciles every node-less slice of its driver and would
	// delete them.
	ForeignSlices map[string][]string
}

// NamespaceFacts is what the cluster shows of the namespace spec.namespace
// names.
type NamespaceFacts struct {
	// Exists is false when there is no such namespace: the operator will
	// create it.
	Exists bool
	// Created says the operator created it: it carries the stack label and
	// the driver lifecycle's field manager wrote it.
	Created bool
	// Managers are its field managers, for the message that names who
	// created it when drastack did not.
	Managers []string
	// Enforce is its pod-security.kubernetes.io/enforce label, "" when
	// unset.
	Enforce string
	// Terminating: the namespace is being deleted.
	Terminating bool
}

// Verdict is the outcome of the whole-spec check.
type Verdict struct {
	// Errors make the spec invalid: the operator then changes nothing that
	// runs (SpecValid False).
	Errors field.ErrorList
	// Warnings leave the spec valid but are reported (SpecValid True with
	// reason SpecValidWithWarnings, and an Event).
	Warnings []string
}

// Valid says whether the spec may be acted on.
func (v Verdict) Valid() bool { return len(v.Errors) == 0 }

// Messages are the errors as one-line messages, field path first, quoted
// values shortened so that the reason after them stays.
func (v Verdict) Messages() []string {
	out := make([]string, 0, len(v.Errors))
	for _, e := range v.Errors {
		out = append(out, errorMessage(e))
	}
	return out
}

// PodSecurityEnforceLabel is the label that sets a namespace's enforced
// Pod Security level.
const PodSecurityEnforceLabel = "pod-security.kubernetes.io/enforce"

// DriverPodSecurity is the Pod Security level the driver namespace must
// allow: kubelet plugins mount host paths and run privileged
// (internal/driver/profiles/common/0100_namespace.yaml sets it).
const DriverPodSecurity = "privileged"

// systemNamespaces belong to Kubernetes itself; the CRD refuses them too.
var systemNamespaces = []string{"kube-system", "kube-public", "kube-node-lease", "default"}

// Check is the whole-spec check, made before anything is applied or
// deleted: Validate's field checks, plus conflicts between entries and
// with the cluster that admission cannot see. An invalid spec changes
// nothing that runs: every controller keeps what the last valid spec
// made (drivers, published slices) until the spec is fixed.
func Check(spec *v1alpha1.DRAStackSpec, f Facts) Verdict {
	v := Verdict{Errors: Validate(spec)}
	root := field.NewPath("spec")
	v.Errors = append(v.Errors, checkNamespace(spec.Namespace, f, root.Child("namespace"))...)
	v.Errors = append(v.Errors, checkDriverNames(spec, f, root)...)
	for i, m := range spec.MultiHost {
		if names := f.ForeignSlices[m.Driver]; len(names) > 0 && slices.IndexFunc(spec.MultiHost, func(o v1alpha1.MultiHostSpec) bool { return o.Driver == m.Driver }) == i {
			v.Errors = append(v.Errors, field.Invalid(root.Child("multiHost").Index(i).Child("driver"), m.Driver,
				fmt.Sprintf("has node-less ResourceSlices that drastack did not write (%s): the central publisher owns every node-less slice of its driver and would delete them; use another driver name, or remove their publisher",
					listNames("slice", names))))
		}
	}
	for _, c := range MultiHostConflicts(spec.MultiHost, f.Nodes) {
		v.Errors = append(v.Errors, field.Invalid(root.Child("multiHost").Index(c.Second), spec.MultiHost[c.Second].Name, c.Message(spec.MultiHost)))
	}
	v.Warnings = centralWarnings(spec, f, root.Child("claims", "central"))
	return v
}

// checkNamespace refuses a driver namespace the operator must not run
// drivers in: its own (restricted), Kubernetes' own, one it did not create
// (it would label it, and later delete or strip it), and one whose Pod
// Security level refuses the plugins.
func checkNamespace(ns string, f Facts, path *field.Path) field.ErrorList {
	if ns == "" {
		ns = DefaultDriverNamespace
	}
	switch {
	case slices.Contains(systemNamespaces, ns):
		return field.ErrorList{field.Invalid(path, ns, "is a namespace of Kubernetes itself; drivers run in a namespace the operator creates for them (default "+DefaultDriverNamespace+")")}
	case f.OperatorNamespace != "" && ns == f.OperatorNamespace:
		return field.ErrorList{field.Invalid(path, ns, "is the operator's own namespace, which keeps the restricted Pod Security level; drivers run in a namespace the operator creates for them (default "+DefaultDriverNamespace+")")}
	}
	n := f.Namespace
	if n == nil || !n.Exists {
		return nil
	}
	if !n.Created {
		who := "someone else"
		if len(n.Managers) > 0 {
			who = "someone else (field " + plural(len(n.Managers), "manager", "managers") + " " + strings.Join(n.Managers, ", ") + ")"
		}
		return field.ErrorList{field.Invalid(path, ns, "exists and was created by "+who+", not by drastack, which would have to label it and later delete it; name a namespace that does not exist yet, and the operator creates it")}
	}
	if n.Enforce != "" && n.Enforce != DriverPodSecurity {
		return field.ErrorList{field.Invalid(path, ns, fmt.Sprintf("enforces the Pod Security level %q (label %s), which refuses driver plugins: they need %q",
			n.Enforce, PodSecurityEnforceLabel, DriverPodSecurity))}
	}
	if n.Terminating {
		return field.ErrorList{field.Invalid(path, ns, "is being deleted; wait until it is gone, and the operator creates it again")}
	}
	return nil
}

// DefaultDriverNamespace is spec.namespace when unset.
const DefaultDriverNamespace = "drastack-drivers"

// checkDriverNames refuses a DRA driver name that two things would
// publish under: two spec.drivers entries (each removal would take the
// other's devices), or a driver and a spec.multiHost entry (the publisher
// owns every node-less slice of the name, and the driver's DeviceClass and
// removal taint would cover the publisher's devices).
func checkDriverNames(spec *v1alpha1.DRAStackSpec, f Facts, root *field.Path) field.ErrorList {
	var errs field.ErrorList
	owner := map[string]int{}
	for i := range spec.Drivers {
		d := &spec.Drivers[i]
		p := root.Child("drivers").Index(i).Child("name")
		names := []string{d.Name}
		if i < len(f.DriverNames) && len(f.DriverNames[i]) > 0 {
			names = f.DriverNames[i]
		}
		for _, n := range names {
			under := "is"
			if n != d.Name {
				under = "has a profile that also publishes under " + n + ", which is"
			}
			if j, ok := owner[n]; ok && j != i {
				errs = append(errs, field.Invalid(p, d.Name, fmt.Sprintf("%s a driver name of spec.drivers[%d] (%s) too: two installs of one driver name would remove each other's devices",
					under, j, spec.Drivers[j].Name)))
				continue
			}
			owner[n] = i
			if j := slices.IndexFunc(spec.MultiHost, func(m v1alpha1.MultiHostSpec) bool { return m.Driver == n }); j >= 0 {
				errs = append(errs, field.Invalid(p, d.Name, fmt.Sprintf("%s the driver of spec.multiHost[%d] (%s): the central publisher owns every node-less ResourceSlice of that name, and the driver's DeviceClasses and removal would take over its devices; use another driver name",
					under, j, spec.MultiHost[j].Name)))
			}
		}
	}
	return errs
}

// errorMessage is a field error on one line with its value shortened: the
// reason follows the value in a field.Error, and a long patch or selector
// must not push it out.
func errorMessage(e *field.Error) string {
	return note.Shorten(e.Error(), maxErrorMessage)
}

// maxErrorMessage bounds one error in SpecValid.
const maxErrorMessage = 1000

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
