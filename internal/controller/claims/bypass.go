package claims

import (
	"context"
	"errors"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/drastack/drastack/internal/allocator/verify"
	claimspkg "github.com/drastack/drastack/internal/claims"
)

// EventBypassed is the reason of the Event on a claim with CEL constraints
// that another allocator (kube-scheduler) allocated, because its pod was
// admitted without the gate: the webhook was unreachable (failurePolicy
// Ignore) or gatePods is off.
const EventBypassed = "AllocatedWithoutOperator"

// reportBypass tells, once per claim, that a claim with CEL constraints
// was allocated by someone else, and whether its constraints hold anyway
// (checked by internal/allocator/verify against the current cluster).
// Nothing is changed: the claim may be in use.
func (r *Reconciler) reportBypass(ctx context.Context, c *resourceapi.ResourceClaim) {
	by := claimspkg.AllocatedBy(c)
	if by == "" || by == FieldManager {
		return
	}
	r.mu.Lock()
	seen := r.bypassed[c.UID]
	r.bypassed[c.UID] = true
	r.mu.Unlock()
	if seen {
		return
	}
	in, err := r.snap.inputs(ctx)
	if err != nil {
		log.FromContext(ctx).Error(err, "Checking a claim allocated without the operator failed", "claim", c.Namespace+"/"+c.Name)
		return
	}
	others := in.Allocated[:0:0]
	for _, a := range in.Allocated {
		if a.UID != c.UID {
			others = append(others, a)
		}
	}
	in.Allocated = others
	var broken []string
	for _, err := range verify.Check(in, c, c.Status.Allocation, "") {
		var v *verify.Violation
		if errors.As(err, &v) && v.Rule == verify.RuleCELConstraint {
			broken = append(broken, v.Message)
		}
	}
	if len(broken) == 0 {
		bypassed.WithLabelValues("held").Inc()
		r.event(c, corev1.EventTypeWarning, EventBypassed, "Check", "allocated by %s, not by the operator (its pod was not gated); its CEL constraints hold", by)
		return
	}
	bypassed.WithLabelValues("broken").Inc()
	r.event(c, corev1.EventTypeWarning, EventBypassed, "Check", "allocated by %s, not by the operator (its pod was not gated); its CEL constraints do not hold: %s", by, strings.Join(broken, "; "))
}
