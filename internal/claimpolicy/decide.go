package claimpolicy

import (
	"encoding/json"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
)

// Action is what the controller does with a claim now.
type Action string

// Actions of Decide.
const (
	// ActionIgnore: not the operator's claim; kube-scheduler allocates it.
	ActionIgnore Action = "Ignore"
	// ActionAllocate: the operator's claim, unallocated: allocate it.
	ActionAllocate Action = "Allocate"
	// ActionAllocated: already allocated; only a placement that failed
	// (see Replace) can make the operator touch it again.
	ActionAllocated Action = "Allocated"
	// ActionLeave: the operator's claim, but it must not be touched: it is
	// being deleted, or reserved by a consumer although not allocated (a
	// state only another component can resolve).
	ActionLeave Action = "Leave"
)

// Decision is Decide's answer.
type Decision struct {
	Action Action
	// Why the claim is the operator's (WhyNone for ActionIgnore).
	Why Why
	// Detail explains ActionLeave.
	Detail string
}

// Decide tells what to do with a claim under cfg. It never asks to touch a
// claim that is allocated, reserved or being deleted.
func Decide(cfg Config, c *resourceapi.ResourceClaim) Decision {
	why := SelectClaim(cfg, c)
	switch {
	case why == WhyNone:
		return Decision{Action: ActionIgnore}
	case c.Status.Allocation != nil:
		return Decision{Action: ActionAllocated, Why: why}
	case c.DeletionTimestamp != nil:
		return Decision{Action: ActionLeave, Why: why, Detail: "the claim is being deleted"}
	case len(c.Status.ReservedFor) > 0:
		return Decision{Action: ActionLeave, Why: why, Detail: "the claim is reserved for a consumer but not allocated"}
	}
	return Decision{Action: ActionAllocate, Why: why}
}

// AllocatedBy returns the field manager that wrote the claim's
// status.allocation, read from metadata.managedFields ("" when none
// owns it, or the claim is not allocated). The operator writes the
// allocation under its own field manager and kube-scheduler under
// "kube-scheduler", so this tells who allocated a claim without any
// extra label.
func AllocatedBy(c *resourceapi.ResourceClaim) string {
	if c.Status.Allocation == nil {
		return ""
	}
	for _, mf := range c.ManagedFields {
		if mf.FieldsV1 == nil || len(mf.FieldsV1.Raw) == 0 {
			continue
		}
		var fields struct {
			Status map[string]json.RawMessage `json:"f:status"`
		}
		if err := json.Unmarshal(mf.FieldsV1.Raw, &fields); err != nil {
			continue
		}
		if _, ok := fields.Status["f:allocation"]; ok {
			return mf.Manager
		}
	}
	return ""
}

// Movable reports whether the operator may take back a claim's
// allocation: it allocated the claim itself (under fieldManager), no
// consumer uses it yet, and it is not being deleted.
func Movable(c *resourceapi.ResourceClaim, fieldManager string) bool {
	return c.Status.Allocation != nil && len(c.Status.ReservedFor) == 0 && c.DeletionTimestamp == nil &&
		AllocatedBy(c) == fieldManager
}

// HasFinalizer reports whether the claim carries the delete-protection
// finalizer that must be in place before status.allocation is written.
func HasFinalizer(c *resourceapi.ResourceClaim) bool {
	return slices.Contains(c.Finalizers, Finalizer)
}
