package native

import (
	"errors"
	"fmt"
	"slices"

	"github.com/google/cel-go/cel"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

// plan is what a set of claims asks for, resolved against the session:
// one slot per request (in claim order, then request order), each with its
// alternatives (one for `exactly`, the subrequests for `firstAvailable`).
type plan struct {
	claims   []*resourceapi.ResourceClaim
	slots    []slot
	match    []string // attribute of each matchAttribute constraint
	distinct []string // attribute of each distinctAttribute constraint
	cels     []celPlan
}

type slot struct {
	claim int
	req   int
	subs  []sub
}

// sub is one way to satisfy a request.
type sub struct {
	// name is the request name in results: "req" or "req/sub".
	name        string
	class       *resourceapi.DeviceClass
	cs          *candSet
	all         bool
	count       int
	admin       bool
	tolerations []resourceapi.DeviceToleration
	// match, distinct and cels index the plan's constraints that apply.
	match, distinct, cels []int
}

// celPlan is one CEL constraint of one claim.
type celPlan struct {
	claim int
	prog  cel.Program
	expr  string
	field string
	// lastSlot is the last slot the constraint can apply to: the constraint
	// is evaluated when that slot is done, with the whole set chosen.
	lastSlot int
}

func (s *Session) buildPlan(claims []*resourceapi.ResourceClaim) (*plan, error) {
	p := &plan{claims: claims}
	for ci, claim := range claims {
		if claim == nil {
			return nil, errors.New("nil claim")
		}
		if err := s.planClaim(p, ci, claim); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func (s *Session) planClaim(p *plan, ci int, claim *resourceapi.ResourceClaim) error {
	key := allocator.ClaimKey(claim)
	invalid := func(field string, err error) error {
		return &allocator.InvalidClaimError{Claim: key, Field: field, Err: err}
	}
	first := len(p.slots)
	minDevices := 0
	for ri := range claim.Spec.Devices.Requests {
		r := &claim.Spec.Devices.Requests[ri]
		field := fmt.Sprintf("spec.devices.requests[%d]", ri)
		sl := slot{claim: ci, req: ri}
		switch {
		case r.Exactly != nil && len(r.FirstAvailable) == 0:
			e := r.Exactly
			sb, err := s.planSub(claim, r.Name, field+".exactly", e.DeviceClassName, e.Selectors, e.AllocationMode, e.Count, e.Tolerations, e.Capacity != nil, len(e.DerivedAttributes) > 0)
			if err != nil {
				return err
			}
			sb.admin = ptr.Deref(e.AdminAccess, false)
			sl.subs = append(sl.subs, sb)
		case r.Exactly == nil && len(r.FirstAvailable) > 0:
			for si := range r.FirstAvailable {
				fa := &r.FirstAvailable[si]
				sb, err := s.planSub(claim, r.Name+"/"+fa.Name, fmt.Sprintf("%s.firstAvailable[%d]", field, si), fa.DeviceClassName, fa.Selectors, fa.AllocationMode, fa.Count, fa.Tolerations, fa.Capacity != nil, len(fa.DerivedAttributes) > 0)
				if err != nil {
					return err
				}
				sl.subs = append(sl.subs, sb)
			}
		default:
			return invalid(field, errors.New("exactly one of exactly and firstAvailable must be set"))
		}
		least := 1
		for i, sb := range sl.subs {
			if !sb.all && (i == 0 || sb.count < least) {
				least = sb.count
			}
		}
		minDevices += least
		p.slots = append(p.slots, sl)
	}
	if minDevices > resourceapi.AllocationResultsMaxSize {
		return invalid("spec.devices.requests", fmt.Errorf("asks for at least %d devices, more than the %d a claim can hold", minDevices, resourceapi.AllocationResultsMaxSize))
	}
	slotsOf := p.slots[first:]
	applies := func(requests []string, reqName, subName string) bool {
		return len(requests) == 0 || slices.Contains(requests, reqName) || slices.Contains(requests, subName)
	}
	for i, c := range claim.Spec.Devices.Constraints {
		var attr string
		var list *[]string
		switch {
		case c.MatchAttribute != nil && c.DistinctAttribute == nil:
			attr, list = string(*c.MatchAttribute), &p.match
		case c.DistinctAttribute != nil && c.MatchAttribute == nil:
			attr, list = string(*c.DistinctAttribute), &p.distinct
		default:
			return invalid(fmt.Sprintf("spec.devices.constraints[%d]", i), errors.New("exactly one of matchAttribute and distinctAttribute must be set"))
		}
		idx := len(*list)
		*list = append(*list, attr)
		for si := range slotsOf {
			sl := &slotsOf[si]
			reqName := claim.Spec.Devices.Requests[sl.req].Name
			for bi := range sl.subs {
				if !applies(c.Requests, reqName, sl.subs[bi].name) {
					continue
				}
				if list == &p.match {
					sl.subs[bi].match = append(sl.subs[bi].match, idx)
				} else {
					sl.subs[bi].distinct = append(sl.subs[bi].distinct, idx)
				}
			}
		}
	}
	cons, err := parseCELConstraints(claim)
	if err != nil {
		return err
	}
	for i, c := range cons {
		field := fmt.Sprintf("%s[%d].expression", annotationField, i)
		prog, err := s.e.constraints.compile(c.Expression)
		if err != nil {
			return invalid(field, err)
		}
		cp := celPlan{claim: ci, prog: prog, expr: c.Expression, field: field, lastSlot: -1}
		idx := len(p.cels)
		for si := range slotsOf {
			sl := &slotsOf[si]
			reqName := claim.Spec.Devices.Requests[sl.req].Name
			for bi := range sl.subs {
				if applies(c.Requests, reqName, sl.subs[bi].name) {
					sl.subs[bi].cels = append(sl.subs[bi].cels, idx)
					cp.lastSlot = first + si
				}
			}
		}
		p.cels = append(p.cels, cp)
	}
	return nil
}

func (s *Session) planSub(claim *resourceapi.ResourceClaim, name, field, className string, selectors []resourceapi.DeviceSelector,
	mode resourceapi.DeviceAllocationMode, count int64, tolerations []resourceapi.DeviceToleration, capacity, derived bool) (sub, error) {
	key := allocator.ClaimKey(claim)
	invalid := func(f string, err error) error {
		return &allocator.InvalidClaimError{Claim: key, Field: f, Err: err}
	}
	sb := sub{name: name, tolerations: tolerations}
	switch {
	case capacity:
		return sb, fmt.Errorf("claim %s, request %s: capacity requests (consumable capacity): %w", key, name, allocator.ErrNotSupported)
	case derived:
		return sb, fmt.Errorf("claim %s, request %s: derived attributes: %w", key, name, allocator.ErrNotSupported)
	}
	switch mode {
	case "", resourceapi.DeviceAllocationModeExactCount:
		sb.count = int(max(count, 1))
		if count < 0 || count > resourceapi.AllocationResultsMaxSize {
			return sb, invalid(field+".count", fmt.Errorf("%d is not between 1 and %d", count, resourceapi.AllocationResultsMaxSize))
		}
	case resourceapi.DeviceAllocationModeAll:
		sb.all = true
	default:
		return sb, invalid(field+".allocationMode", fmt.Errorf("unknown allocation mode %q", mode))
	}
	if className == "" {
		return sb, invalid(field+".deviceClassName", errors.New("must be set"))
	}
	class, ok := s.classes[className]
	if !ok {
		return sb, fmt.Errorf("claim %s, request %s: device class %q does not exist: %w", key, name, className, allocator.ErrUnsatisfiable)
	}
	sb.class = class
	var exprs []string
	for i, sel := range class.Spec.Selectors {
		f := fmt.Sprintf("deviceclasses/%s: spec.selectors[%d].cel.expression", class.Name, i)
		if sel.CEL == nil {
			return sb, invalid(f, errors.New("unsupported selector (no CEL expression)"))
		}
		if c := s.e.selectors.GetOrCompile(sel.CEL.Expression); c.Error != nil {
			return sb, invalid(f, c.Error)
		}
		exprs = append(exprs, sel.CEL.Expression)
	}
	for i, sel := range selectors {
		f := fmt.Sprintf("%s.selectors[%d].cel.expression", field, i)
		if sel.CEL == nil {
			return sb, invalid(f, errors.New("unsupported selector (no CEL expression)"))
		}
		if c := s.e.selectors.GetOrCompile(sel.CEL.Expression); c.Error != nil {
			return sb, invalid(f, c.Error)
		}
		exprs = append(exprs, sel.CEL.Expression)
	}
	sb.cs = s.candSetFor(exprs)
	return sb, nil
}
