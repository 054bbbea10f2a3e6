package claimpolicy

import (
	"slices"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
)

// Why says why the operator allocates a claim; the empty Why means it does
// not (kube-scheduler does).
type Why string

// Reasons a claim is the operator's, in the order they are checked.
const (
	// WhyNone: kube-scheduler allocates the claim when a pod needs it.
	WhyNone Why = ""
	// WhyCELConstraints: the claim carries KEP-5254 CEL constraints, which
	// only the operator's native engine evaluates.
	WhyCELConstraints Why = "CELConstraints"
	// WhyImmediateLabel: the claim is labelled
	// resource.drastack.io/allocation=Immediate.
	WhyImmediateLabel Why = "ImmediateLabel"
	// WhyImmediateClass: a request of the claim uses one of
	// spec.claims.immediateClasses.
	WhyImmediateClass Why = "ImmediateClass"
	// WhyCentralClass: a request of the claim uses a class of
	// spec.claims.central: only the operator can allocate its devices.
	WhyCentralClass Why = "CentralClass"
	// WhyToleratesCentral: a request tolerates the central taint, which
	// would let kube-scheduler give it central devices. The operator's
	// admission policies refuse such claims; one that exists anyway (made
	// before the policies) is the operator's, so that its pod is gated and
	// kube-scheduler never allocates it.
	WhyToleratesCentral Why = "ToleratesCentral"
)

// Immediate reports whether claims selected for this reason are allocated
// as soon as they exist, without waiting for a pod (and so are never
// placed again: nothing tells where their consumer will run).
func (w Why) Immediate() bool { return w == WhyImmediateLabel || w == WhyImmediateClass }

// Select tells whether the operator allocates a claim with these labels,
// annotations and spec.
func Select(cfg Config, labels, annotations map[string]string, spec *resourceapi.ResourceClaimSpec) Why {
	if !cfg.Active {
		return WhyNone
	}
	if _, ok := annotations[allocator.CELConstraintsAnnotation]; ok {
		return WhyCELConstraints
	}
	if labels[AllocationLabel] == AllocationImmediate {
		return WhyImmediateLabel
	}
	if spec != nil && usesClass(spec, cfg.immediateClass) {
		return WhyImmediateClass
	}
	if spec != nil && usesClass(spec, cfg.centralClass) {
		return WhyCentralClass
	}
	if spec != nil && ToleratesCentral(spec) {
		return WhyToleratesCentral
	}
	return WhyNone
}

// centralTaintKey is the key of the central taint (central.TaintKey).
const centralTaintKey = "resource.drastack.io/central"

// ToleratesCentral reports whether a request or subrequest of spec
// tolerates the central taint (NoSchedule, key resource.drastack.io/central):
// a toleration of that key, or of every key.
func ToleratesCentral(spec *resourceapi.ResourceClaimSpec) bool {
	tolerates := func(ts []resourceapi.DeviceToleration) bool {
		for _, t := range ts {
			keyOK := t.Key == centralTaintKey || (t.Key == "" && t.Operator == resourceapi.DeviceTolerationOpExists)
			valueOK := t.Operator == resourceapi.DeviceTolerationOpExists || t.Value == ""
			effectOK := t.Effect == "" || t.Effect == resourceapi.DeviceTaintEffectNoSchedule
			if keyOK && valueOK && effectOK {
				return true
			}
		}
		return false
	}
	for _, r := range spec.Devices.Requests {
		if r.Exactly != nil && tolerates(r.Exactly.Tolerations) {
			return true
		}
		for _, sub := range r.FirstAvailable {
			if tolerates(sub.Tolerations) {
				return true
			}
		}
	}
	return false
}

// IsImmediate reports whether the operator allocates the claim as soon as
// it exists (the Immediate label or an immediate class), whatever else
// makes it the operator's.
func IsImmediate(cfg Config, c *resourceapi.ResourceClaim) bool {
	return cfg.Active && c != nil && (c.Labels[AllocationLabel] == AllocationImmediate || usesClass(&c.Spec, cfg.immediateClass))
}

// usesClass reports whether a request or subrequest of spec names a class
// for which in is true.
func usesClass(spec *resourceapi.ResourceClaimSpec, in func(string) bool) bool {
	for _, r := range spec.Devices.Requests {
		if r.Exactly != nil && in(r.Exactly.DeviceClassName) {
			return true
		}
		for _, sub := range r.FirstAvailable {
			if in(sub.DeviceClassName) {
				return true
			}
		}
	}
	return false
}

// SelectClaim is Select for a ResourceClaim.
func SelectClaim(cfg Config, c *resourceapi.ResourceClaim) Why {
	if c == nil {
		return WhyNone
	}
	return Select(cfg, c.Labels, c.Annotations, &c.Spec)
}

// SelectTemplate tells whether the claims kube-controller-manager creates
// from a template will be the operator's: it copies the template's
// spec.metadata labels and annotations onto them, and spec.spec becomes
// their spec.
func SelectTemplate(cfg Config, t *resourceapi.ResourceClaimTemplate) Why {
	if t == nil {
		return WhyNone
	}
	return Select(cfg, t.Spec.Labels, t.Spec.Annotations, &t.Spec.Spec)
}

// Scope lists the DeviceClasses that make a claim the operator's under
// cfg (its central and immediate classes), sorted: what the allocation
// fence records for a term (docs/allocation-protocol.md, section 2).
func Scope(cfg Config) []string {
	return sortedSet(append(slices.Clone(cfg.CentralClasses), cfg.ImmediateClasses...))
}

// InScope reports whether a claim is the operator's under some
// configuration whose Scope is scope: it carries CEL constraints or the
// Immediate label, or a request names a class of scope. The fence's sweep
// fences what an earlier term may still write with it.
func InScope(scope []string, c *resourceapi.ResourceClaim) bool {
	if c == nil {
		return false
	}
	if _, ok := c.Annotations[allocator.CELConstraintsAnnotation]; ok {
		return true
	}
	if c.Labels[AllocationLabel] == AllocationImmediate || ToleratesCentral(&c.Spec) {
		return true
	}
	return usesClass(&c.Spec, func(class string) bool { return slices.Contains(scope, class) })
}
