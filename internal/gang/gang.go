// Package gang decides which gang a pod belongs to, and what the gang asks
// for, from the pod and (when the pod names one) its PodGroup: the pure half
// of the claim controller's gang handling. The allocation of a gang is the
// engine's (allocator.GangSession); waiting for members, gating and Events
// are the controller's.
//
// A pod is in a gang in one of two ways:
//
//   - the Workload API (scheduling.k8s.io/v1beta1, Kubernetes 1.37 with the
//     GenericWorkload gate): pod.spec.schedulingGroup.podGroupName names a
//     PodGroup of the pod's namespace whose spec.schedulingPolicy.gang sets
//     minCount; its schedulingConstraints.topology[0].key (the
//     TopologyAwareWorkloadScheduling gate) is the node label all members
//     share. A PodGroup with the basic policy makes no gang.
//   - otherwise, the label LabelName on the pod: its value names the gang
//     among the pods of the namespace, AnnotationMinCount the pods it needs
//     (default: one, every pod placed as it comes), AnnotationTopologyKey a
//     node label and AnnotationMatchAttribute a device attribute all members
//     share.
//
// The drastack annotations add to a PodGroup's gang too (a device attribute,
// which the Workload API cannot express), but never change its membership or
// minCount.
package gang

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/drastack/drastack/internal/allocator"
)

// Pod labels and annotations of a drastack gang.
const (
	// LabelName names the pod's gang: pods of one namespace with the same
	// value are one gang. A label, so that the controller can watch and
	// list a gang's pods by it.
	LabelName = "resource.drastack.io/gang"
	// AnnotationMinCount is the number of pods the gang needs before any of
	// them is placed (a positive integer; default 1).
	AnnotationMinCount = "resource.drastack.io/gang-min-count"
	// AnnotationTopologyKey is a node label key: every member runs on a node
	// with the same value of it (a rack, a multi-host domain).
	AnnotationTopologyKey = "resource.drastack.io/gang-topology-key"
	// AnnotationMatchAttribute is a fully qualified device attribute
	// (domain/name): every device of every member has the same value of it
	// (an NVLink clique, a ComputeDomain).
	AnnotationMatchAttribute = "resource.drastack.io/gang-match-attribute"
)

// Source says where a pod's gang comes from.
type Source string

// Sources of gang membership.
const (
	SourcePodGroup Source = "PodGroup"
	SourceLabel    Source = "Label"
)

// Spec is what a pod's gang asks for.
type Spec struct {
	// Namespace and Name identify the gang: the PodGroup, or the label's
	// value.
	Namespace, Name string
	Source          Source
	// MinCount is how many pods must be present before the gang is placed.
	MinCount int
	// Constraints are the gang's constraints for the engine.
	Constraints []allocator.GangConstraint
}

// Key is namespace/name, the gang's name in messages and allocator.Gang.
func (s Spec) Key() string { return s.Namespace + "/" + s.Name }

// FieldError is a gang declaration that cannot be used: the pod or PodGroup
// and the field, for the Event that reports it.
type FieldError struct {
	Object, Field string
	Err           error
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s: %s: %v", e.Object, e.Field, e.Err) }

func (e *FieldError) Unwrap() error { return e.Err }

// PodGroupName returns the PodGroup the pod names, if any.
func PodGroupName(pod *corev1.Pod) (string, bool) {
	if pod.Spec.SchedulingGroup == nil || pod.Spec.SchedulingGroup.PodGroupName == nil || *pod.Spec.SchedulingGroup.PodGroupName == "" {
		return "", false
	}
	return *pod.Spec.SchedulingGroup.PodGroupName, true
}

// Of returns the gang of pod, ok false when it is in none. pg is the
// PodGroup the pod names (PodGroupName), nil when it names none or the
// cluster does not serve the Workload API; a pod that names a PodGroup that
// does not exist (yet) is reported with ok false and no error, so that the
// controller waits for it, as kube-scheduler does.
func Of(pod *corev1.Pod, pg *schedulingv1beta1.PodGroup) (Spec, bool, error) {
	podName := "pod " + pod.Namespace + "/" + pod.Name
	var spec Spec
	if name, named := PodGroupName(pod); named {
		if pg == nil || pg.Name != name || pg.Namespace != pod.Namespace {
			return Spec{}, false, nil
		}
		gang := pg.Spec.SchedulingPolicy.Gang
		if gang == nil {
			return Spec{}, false, nil
		}
		pgName := "podgroup " + pg.Namespace + "/" + pg.Name
		if gang.MinCount < 1 {
			return Spec{}, false, &FieldError{pgName, "spec.schedulingPolicy.gang.minCount", fmt.Errorf("%d is not positive", gang.MinCount)}
		}
		spec = Spec{Namespace: pg.Namespace, Name: pg.Name, Source: SourcePodGroup, MinCount: int(gang.MinCount)}
		if c := pg.Spec.SchedulingConstraints; c != nil {
			for i, t := range c.Topology {
				if err := labelKey(t.Key); err != nil {
					return Spec{}, false, &FieldError{pgName, fmt.Sprintf("spec.schedulingConstraints.topology[%d].key", i), err}
				}
				spec.Constraints = append(spec.Constraints, allocator.GangConstraint{NodeLabel: t.Key})
			}
		}
	} else {
		name, ok := pod.Labels[LabelName]
		if !ok {
			return Spec{}, false, nil
		}
		if name == "" {
			return Spec{}, false, &FieldError{podName, "metadata.labels[" + LabelName + "]", fmt.Errorf("must name the gang")}
		}
		spec = Spec{Namespace: pod.Namespace, Name: name, Source: SourceLabel, MinCount: 1}
		if v, ok := pod.Annotations[AnnotationMinCount]; ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < 1 {
				return Spec{}, false, &FieldError{podName, "metadata.annotations[" + AnnotationMinCount + "]", fmt.Errorf("%q is not a positive integer", v)}
			}
			spec.MinCount = n
		}
		if v, ok := pod.Annotations[AnnotationTopologyKey]; ok {
			if err := labelKey(v); err != nil {
				return Spec{}, false, &FieldError{podName, "metadata.annotations[" + AnnotationTopologyKey + "]", err}
			}
			spec.Constraints = append(spec.Constraints, allocator.GangConstraint{NodeLabel: v})
		}
	}
	if v, ok := pod.Annotations[AnnotationMatchAttribute]; ok {
		if err := qualifiedAttribute(v); err != nil {
			return Spec{}, false, &FieldError{podName, "metadata.annotations[" + AnnotationMatchAttribute + "]", err}
		}
		spec.Constraints = append(spec.Constraints, allocator.GangConstraint{MatchAttribute: v})
	}
	return spec, true, nil
}

// Consistent reports the first member whose gang differs from the others'
// (another MinCount or other constraints): members of one gang must agree,
// or the gang is not placed. specs are the members' Of results.
func Consistent(specs []Spec) error {
	for i := 1; i < len(specs); i++ {
		a, b := specs[0], specs[i]
		if a.Key() != b.Key() {
			return fmt.Errorf("gang %s: member %d belongs to gang %s", a.Key(), i, b.Key())
		}
		if a.MinCount != b.MinCount {
			return fmt.Errorf("gang %s: members disagree on the minimum count (%d and %d)", a.Key(), a.MinCount, b.MinCount)
		}
		if !sameConstraints(a.Constraints, b.Constraints) {
			return fmt.Errorf("gang %s: members disagree on the constraints (%s and %s)", a.Key(), describe(a.Constraints), describe(b.Constraints))
		}
	}
	return nil
}

// Ready reports whether a gang with present members may be placed.
func (s Spec) Ready(present int) bool { return present >= s.MinCount }

func sameConstraints(a, b []allocator.GangConstraint) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].NodeLabel != b[i].NodeLabel || a[i].MatchAttribute != b[i].MatchAttribute || strings.Join(a[i].Requests, ",") != strings.Join(b[i].Requests, ",") {
			return false
		}
	}
	return true
}

func describe(cs []allocator.GangConstraint) string {
	if len(cs) == 0 {
		return "none"
	}
	var parts []string
	for _, c := range cs {
		if c.NodeLabel != "" {
			parts = append(parts, "node label "+c.NodeLabel)
		} else {
			parts = append(parts, "attribute "+c.MatchAttribute)
		}
	}
	return strings.Join(parts, ", ")
}

func labelKey(k string) error {
	if errs := validation.IsQualifiedName(k); len(errs) > 0 {
		return fmt.Errorf("%q is not a label key: %s", k, strings.Join(errs, "; "))
	}
	return nil
}

// qualifiedAttribute checks a fully qualified attribute name, domain/name,
// as DeviceConstraint.matchAttribute takes it.
func qualifiedAttribute(v string) error {
	domain, name, ok := strings.Cut(v, "/")
	if !ok || domain == "" || name == "" {
		return fmt.Errorf("%q is not a fully qualified attribute name (domain/name)", v)
	}
	if errs := validation.IsDNS1123Subdomain(domain); len(errs) > 0 {
		return fmt.Errorf("%q: domain %s", v, strings.Join(errs, "; "))
	}
	if errs := validation.IsCIdentifier(name); len(errs) > 0 || len(name) > 32 {
		return fmt.Errorf("%q: name must be a C identifier of at most 32 characters", v)
	}
	return nil
}
