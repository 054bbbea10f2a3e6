package claims

import (
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
)

// Select tells whether the operator allocates a claim with these labels,
// annotations and spec. Hold claims (see HoldLabel) never are.
func Select(cfg Config, labels, annotations map[string]string, spec *resourceapi.ResourceClaimSpec) Why {
	if !cfg.Active || labels[HoldLabel] == "true" {
		return WhyNone
	}
	if _, ok := annotations[allocator.CELConstraintsAnnotation]; ok {
		return WhyCELConstraints
	}
	if labels[AllocationLabel] == AllocationImmediate {
		return WhyImmediateLabel
	}
	if spec != nil && len(cfg.ImmediateClasses) > 0 {
		for _, r := range spec.Devices.Requests {
			if r.Exactly != nil && cfg.immediateClass(r.Exactly.DeviceClassName) {
				return WhyImmediateClass
			}
			for _, sub := range r.FirstAvailable {
				if cfg.immediateClass(sub.DeviceClassName) {
					return WhyImmediateClass
				}
			}
		}
	}
	return WhyNone
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
