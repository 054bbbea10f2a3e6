package native

import (
	"fmt"

	"k8s.io/utils/ptr"

	dracel "k8s.io/dynamic-resource-allocation/cel"

	"github.com/drastack/drastack/internal/allocator"
)

// Derived attributes (KEP-6080, DRADerivedAttributes): a request may define
// attributes computed by a CEL expression from each device (its driver,
// attributes, capacity and allowMultipleAllocations). In the request's
// matchAttribute and distinctAttribute constraints such an attribute
// replaces the device attribute of the same name. As in kube-scheduler, an
// expression is compiled and evaluated only when a constraint looks the
// attribute up, with kube-scheduler's CEL library (derived-attribute
// compilation: scalars or lists of them), and each expression is evaluated
// once per device.
//
// An expression that does not compile or fails on a device makes the claim
// invalid. kube-scheduler aborts the attempt on a node at the first device
// whose lookup fails, in its search order; the native engine, which
// searches in another order, treats that device as lacking the attribute
// and reports the error when it finds no allocation on the node (as for
// capacity consumptions that cannot be computed, x.capErr). It may
// therefore allocate a claim kube-scheduler reports as failing when the
// failing device comes before a working set in kube-scheduler's order.

// derivedResult is one expression's value on one device.
type derivedResult struct {
	keys []string
	err  error
}

// values returns the values of attribute attr of device d for alternative
// sb: its derived attribute of that name when it defines one, else the
// device's own (attrValues). A derived attribute that cannot be computed
// gives no values and records the error in x.capErr.
func (x *search) values(sb *sub, attr string, d int32) []string {
	if sb.derived != nil {
		if expr, ok := sb.derived[attr]; ok {
			r := x.s.derivedValue(x, expr, d)
			if r.err != nil {
				if x.capErr == nil {
					x.capErr = &allocator.InvalidClaimError{
						Claim: allocator.ClaimKey(x.p.claims[x.p.slots[x.slotOf(sb)].claim]),
						Field: requestField(sb.ri, sb.si) + ".derivedAttributes",
						Err:   fmt.Errorf("derived attribute %s on device %s/%s/%s: %w", attr, x.s.devs[d].id.driver, x.s.devs[d].id.pool, x.s.devs[d].id.device, r.err),
					}
				}
				return noValues
			}
			return r.keys
		}
	}
	return x.s.attrValues(attr, d)
}

// slotOf is the slot that alternative sb belongs to.
func (x *search) slotOf(sb *sub) int {
	for i := range x.p.slots {
		for b := range x.p.slots[i].subs {
			if &x.p.slots[i].subs[b] == sb {
				return i
			}
		}
	}
	return 0
}

// derivedValue evaluates expr on device d once per session.
func (s *Session) derivedValue(x *search, expr string, d int32) derivedResult {
	per := s.derived[expr]
	if per == nil {
		per = make([]*derivedResult, len(s.devs))
		if s.derived == nil {
			s.derived = map[string][]*derivedResult{}
		}
		s.derived[expr] = per
	}
	if r := per[d]; r != nil {
		return *r
	}
	r := &derivedResult{}
	compiled := s.e.selectors.GetOrCompileDerivedAttribute(expr)
	if compiled.Error != nil {
		r.err = fmt.Errorf("compile: %w", compiled.Error)
	} else {
		dev := &s.devs[d]
		a, _, err := compiled.EvaluateDerivedAttribute(x.ctx, dracel.Device{
			Driver:                   dev.id.driver,
			AllowMultipleAllocations: ptr.To(ptr.Deref(dev.dev.AllowMultipleAllocations, false)),
			Attributes:               dev.dev.Attributes,
			Capacity:                 dev.dev.Capacity,
		})
		switch {
		case err != nil && x.ctx.Err() != nil:
			// Interrupted: not a property of the device, not cached.
			return derivedResult{err: err}
		case err != nil:
			r.err = err
		case a == nil:
			r.keys = noValues
		default:
			r.keys = s.attrKeysOf(*a, true, d)
		}
	}
	per[d] = r
	return *r
}
