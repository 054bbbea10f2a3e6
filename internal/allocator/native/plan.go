package native

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/google/cel-go/cel"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

// plan is what a set of claims asks for, resolved against the session:
// one slot per request (in claim order, then request order), each with its
// alternatives (one for `exactly`, the subrequests for `firstAvailable`).
type plan struct {
	claims []*resourceapi.ResourceClaim
	slots  []slot
	// subs backs the slots' alternatives.
	subs     []sub
	match    []string // attribute of each matchAttribute constraint
	distinct []string // attribute of each distinctAttribute constraint
	cels     []celPlan
	// hasAll is set when some request or subrequest asks for All devices:
	// then no node from which an incomplete or invalid pool is visible can
	// be used (see Session.allBlocked).
	hasAll bool
	// strict is set when the plan is searched in kube-scheduler's order
	// (strict.go).
	strict bool
	// deferred is a claim's excess over the per-claim device limit found
	// after a request for All devices: kube-scheduler checks requests in
	// order and gives up on a node at the All request first when a pool
	// it sees is incomplete or invalid, so the claim is invalid only on
	// the other nodes (see search.run). Planning stops there.
	deferred error
}

// errDeferred stops planning once plan.deferred is set.
var errDeferred = errors.New("planning stopped at an error that depends on the node")

type slot struct {
	claim int
	req   int
	subs  []sub
	// firstAvailable: the request lists subrequests (possibly one).
	firstAvailable bool
	// minAfter is the fewest devices the later requests of the same claim
	// can take (an All request at least one), so that an alternative which
	// leaves no room for them under the per-claim limit is skipped without
	// a search, as kube-scheduler does.
	minAfter int
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
	// capacity are the request's capacity requests (nil for none) and fits
	// their fit per device, computed on demand (capacity.go).
	capacity map[resourceapi.QualifiedName]resource.Quantity
	fits     map[int32]*capFit
	// match, distinct and cels index the plan's constraints that apply.
	match, distinct, cels []int
	// ri and si locate the request (si: the subrequest, -1 for exactly),
	// for error messages.
	ri, si int
	// overLimit: an exactly request whose count is above the per-claim
	// limit, which makes the claim invalid (planClaim).
	overLimit bool
	// derived are the request's derived attributes (KEP-6080): attribute
	// name to CEL expression, nil for none.
	derived map[string]string
}

// celPlan is one CEL constraint of one claim.
type celPlan struct {
	claim int
	prog  cel.Program
	expr  string
	// exprID identifies expr in memo keys (Session.exprID).
	exprID uint32
	field  string
	// lastSlot is the last slot the constraint can apply to: the constraint
	// is evaluated when that slot is done, with the whole set chosen.
	lastSlot int
}

func (s *Session) buildPlan(claims []*resourceapi.ResourceClaim) (*plan, error) {
	p := &plan{claims: claims}
	// One backing array for all slots and one for all alternatives: a
	// claim is planned with two allocations instead of one per request.
	nslots, nsubs := 0, 0
	for _, claim := range claims {
		if claim == nil {
			return nil, errors.New("nil claim")
		}
		nslots += len(claim.Spec.Devices.Requests)
		for _, r := range claim.Spec.Devices.Requests {
			nsubs += max(1, len(r.FirstAvailable))
		}
	}
	p.slots = make([]slot, 0, nslots)
	p.subs = make([]sub, 0, nsubs)
	for ci, claim := range claims {
		if err := s.planClaim(p, ci, claim); errors.Is(err, errDeferred) {
			break
		} else if err != nil {
			return nil, err
		}
	}
	p.strict = p.needsStrict()
	return p, nil
}

func (s *Session) planClaim(p *plan, ci int, claim *resourceapi.ResourceClaim) error {
	invalid := func(field string, err error) error {
		return &allocator.InvalidClaimError{Claim: allocator.ClaimKey(claim), Field: field, Err: err}
	}
	first := len(p.slots)
	minDevices := 0
	for ri := range claim.Spec.Devices.Requests {
		r := &claim.Spec.Devices.Requests[ri]
		sl := slot{claim: ci, req: ri}
		if err := s.checkGates(claim, ri); err != nil {
			if p.hasAll {
				// kube-scheduler checks the gates request by request and
				// gives up on a node at an earlier All request first when
				// a pool it sees is incomplete or invalid (see deferred).
				p.deferred = err
				return errDeferred
			}
			return err
		}
		switch {
		case r.Exactly != nil && len(r.FirstAvailable) == 0:
			e := r.Exactly
			sb, err := s.planSub(claim, ri, -1, r.Name, e.DeviceClassName, e.Selectors, e.AllocationMode, e.Count, e.Tolerations, e.Capacity, e.DerivedAttributes)
			if err != nil {
				return err
			}
			sb.admin = ptr.Deref(e.AdminAccess, false)
			sl.subs = p.addSub(sl.subs, sb)
		case r.Exactly == nil && len(r.FirstAvailable) > 0:
			sl.firstAvailable = true
			for si := range r.FirstAvailable {
				fa := &r.FirstAvailable[si]
				sb, err := s.planSub(claim, ri, si, r.Name+"/"+fa.Name, fa.DeviceClassName, fa.Selectors, fa.AllocationMode, fa.Count, fa.Tolerations, fa.Capacity, fa.DerivedAttributes)
				if err != nil {
					return err
				}
				sl.subs = p.addSub(sl.subs, sb)
			}
		default:
			return invalid(fmt.Sprintf("spec.devices.requests[%d]", ri), errors.New("exactly one of exactly and firstAvailable must be set"))
		}
		// The fewest devices any alternative takes. A request for all
		// devices counts as none here: how many it takes is known only on
		// a node, where kube-scheduler first gives up on a pool being
		// updated and only then counts (overLimit).
		least := math.MaxInt32
		for _, sb := range sl.subs {
			p.hasAll = p.hasAll || sb.all
			n := sb.count
			if sb.all {
				n = 0
			}
			least = min(least, n)
		}
		minDevices += least
		p.slots = append(p.slots, sl)
		// As kube-scheduler, request by request: an exactly count above
		// the limit, or the claim's running total passing it.
		var err error
		if len(sl.subs) == 1 && sl.subs[0].si < 0 && sl.subs[0].overLimit {
			err = invalid(requestField(ri, -1)+".count", fmt.Errorf("%d is not between 1 and %d", r.Exactly.Count, resourceapi.AllocationResultsMaxSize))
		} else if minDevices > resourceapi.AllocationResultsMaxSize {
			err = invalid("spec.devices.requests", fmt.Errorf("asks for at least %d devices, more than the %d a claim can hold", minDevices, resourceapi.AllocationResultsMaxSize))
		}
		if err != nil && p.hasAll {
			p.deferred = err
			return errDeferred
		}
		if err != nil {
			return err
		}
	}
	slotsOf := p.slots[first:]
	after := 0
	for si := len(slotsOf) - 1; si >= 0; si-- {
		slotsOf[si].minAfter = after
		least := maxResults + 1
		for _, sb := range slotsOf[si].subs {
			n := sb.count
			if sb.all {
				n = 1
			}
			least = min(least, n)
		}
		after += least
	}
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
		cp := celPlan{claim: ci, expr: c.Expression, exprID: s.exprID(c.Expression), field: field, lastSlot: -1}
		idx := len(p.cels)
		// The most devices the expression can see: a program for that
		// many may skip cost tracking (constraintCompiler.forSize).
		most := 0
		for si := range slotsOf {
			sl := &slotsOf[si]
			reqName := claim.Spec.Devices.Requests[sl.req].Name
			slotMost := 0
			for bi := range sl.subs {
				sb := &sl.subs[bi]
				if applies(c.Requests, reqName, sb.name) {
					sb.cels = append(sb.cels, idx)
					cp.lastSlot = first + si
					n := sb.count
					if sb.all {
						n = resourceapi.AllocationResultsMaxSize
					}
					slotMost = max(slotMost, n)
				}
			}
			most += slotMost
		}
		prog, err := s.e.constraints.compile(c.Expression, min(most, resourceapi.AllocationResultsMaxSize))
		if err != nil {
			return invalid(field, err)
		}
		cp.prog = prog
		p.cels = append(p.cels, cp)
	}
	return nil
}

// checkGates refuses request ri of claim when it uses a field whose
// feature gate is off, in kube-scheduler's order: subrequests
// (DRAPrioritizedList), capacity requests (DRAConsumableCapacity, unless
// the stable allocator would ignore them), then per request or subrequest
// derived attributes (DRADerivedAttributes) and admin access
// (DRAAdminAccess). kube-scheduler fails the pod's scheduling attempt with
// such a claim; for the engine the claim is invalid as written.
func (s *Session) checkGates(claim *resourceapi.ResourceClaim, ri int) error {
	r := &claim.Spec.Devices.Requests[ri]
	invalid := func(field, gate string) error {
		return &allocator.InvalidClaimError{Claim: allocator.ClaimKey(claim), Field: field,
			Err: fmt.Errorf("request %s: the %s feature is disabled", r.Name, gate)}
	}
	if len(r.FirstAvailable) > 0 && !s.f.PrioritizedList {
		return invalid(fmt.Sprintf("spec.devices.requests[%d].firstAvailable", ri), "DRAPrioritizedList")
	}
	if !s.f.ConsumableCapacity && !s.stableOnly {
		if r.Exactly != nil && r.Exactly.Capacity != nil {
			return invalid(requestField(ri, -1)+".capacity", "DRAConsumableCapacity")
		}
		for si := range r.FirstAvailable {
			if r.FirstAvailable[si].Capacity != nil {
				return invalid(requestField(ri, si)+".capacity", "DRAConsumableCapacity")
			}
		}
	}
	check := func(si int, derived, admin bool) error {
		switch {
		case derived && !s.f.DerivedAttributes:
			return invalid(requestField(ri, si)+".derivedAttributes", "DRADerivedAttributes")
		case admin && !s.f.AdminAccess:
			return invalid(requestField(ri, si)+".adminAccess", "DRAAdminAccess")
		}
		return nil
	}
	if r.Exactly != nil && len(r.FirstAvailable) == 0 {
		return check(-1, len(r.Exactly.DerivedAttributes) > 0, r.Exactly.AdminAccess != nil)
	}
	for si := range r.FirstAvailable {
		if err := check(si, len(r.FirstAvailable[si].DerivedAttributes) > 0, false); err != nil {
			return err
		}
	}
	return nil
}

// overLimit applies kube-scheduler's per-claim limit once the devices of
// All requests are known on a node: a claim whose requests need more than
// 32 devices even with the smallest alternative of each, an All request
// counting every matching device the node sees (all(i, b) for slot i,
// alternative b), is an error for the claim, not a shortage. (Up front,
// planClaim counts an All request as one device.)
func (s *Session) overLimit(p *plan, node int, all func(i, b int) int) error {
	if !p.hasAll {
		return nil
	}
	for i := 0; i < len(p.slots); {
		claim, least := p.slots[i].claim, 0
		for ; i < len(p.slots) && p.slots[i].claim == claim; i++ {
			fewest := math.MaxInt32
			for b := range p.slots[i].subs {
				n := p.slots[i].subs[b].count
				if p.slots[i].subs[b].all {
					n = all(i, b)
				}
				fewest = min(fewest, n)
			}
			least += fewest
		}
		if least > maxResults {
			where := "without a node"
			if node >= 0 {
				where = "on node " + s.nodes[node].Name
			}
			return &allocator.InvalidClaimError{Claim: allocator.ClaimKey(p.claims[claim]), Field: "spec.devices.requests",
				Err: fmt.Errorf("asks for at least %d devices %s (requests for all devices counted in full), more than the %d a claim can hold", least, where, maxResults)}
		}
	}
	return nil
}

// addSub appends sb to the alternatives of the slot being planned, which
// are the last entries of p.subs.
func (p *plan) addSub(subs []sub, sb sub) []sub {
	p.subs = append(p.subs, sb)
	return p.subs[len(p.subs)-len(subs)-1 : len(p.subs) : len(p.subs)]
}

// requestField is the path of request ri (subrequest si, or -1).
func requestField(ri, si int) string {
	if si < 0 {
		return fmt.Sprintf("spec.devices.requests[%d].exactly", ri)
	}
	return fmt.Sprintf("spec.devices.requests[%d].firstAvailable[%d]", ri, si)
}

// selectorField is the path of expression idx of sb.cs: the class's
// selectors come first, then the request's.
func (sb *sub) selectorField(idx int) string {
	n := len(sb.class.Spec.Selectors)
	if idx < n {
		return fmt.Sprintf("deviceclasses/%s: spec.selectors[%d].cel.expression", sb.class.Name, idx)
	}
	return fmt.Sprintf("%s.selectors[%d].cel.expression", requestField(sb.ri, sb.si), idx-n)
}

// classInfo is what planning needs of a DeviceClass, computed once per
// session: its selector expressions (or why they cannot be used) and the
// candidates of a request that adds no selectors of its own.
type classInfo struct {
	exprs []string
	err   error
	// bad is the index of the selector err is about.
	bad int
	cs  *candSet
}

func (s *Session) classInfo(class *resourceapi.DeviceClass) *classInfo {
	if ci, ok := s.classInfos[class]; ok {
		return ci
	}
	ci := &classInfo{}
	for i, sel := range class.Spec.Selectors {
		if err := s.selectorError(sel); err != nil {
			ci.err, ci.bad = err, i
			break
		}
		ci.exprs = append(ci.exprs, sel.CEL.Expression)
	}
	if ci.err == nil {
		ci.cs = s.candSetFor(ci.exprs)
	}
	s.classInfos[class] = ci
	return ci
}

// selectorError says why a selector cannot be used; compile results are
// kept per session.
func (s *Session) selectorError(sel resourceapi.DeviceSelector) error {
	if sel.CEL == nil {
		return errors.New("unsupported selector (no CEL expression)")
	}
	err, ok := s.compiled[sel.CEL.Expression]
	if !ok {
		if c := s.e.selectors.GetOrCompile(sel.CEL.Expression); c.Error != nil {
			err = c.Error
		}
		s.compiled[sel.CEL.Expression] = err
	}
	return err
}

// planSub resolves request ri (subrequest si, or -1 for exactly).
func (s *Session) planSub(claim *resourceapi.ResourceClaim, ri, si int, name, className string, selectors []resourceapi.DeviceSelector,
	mode resourceapi.DeviceAllocationMode, count int64, tolerations []resourceapi.DeviceToleration, capacity *resourceapi.CapacityRequirements, derived []resourceapi.DeviceDerivedAttribute) (sub, error) {
	invalid := func(f string, err error) error {
		return &allocator.InvalidClaimError{Claim: allocator.ClaimKey(claim), Field: f, Err: err}
	}
	sb := sub{name: name, tolerations: tolerations, ri: ri, si: si}
	// Without DRAConsumableCapacity a capacity request was refused by
	// checkGates, or is ignored (stableOnly).
	if capacity != nil && len(capacity.Requests) > 0 && s.f.ConsumableCapacity {
		sb.capacity = capacity.Requests
		sb.fits = map[int32]*capFit{}
	}
	// Without DRADerivedAttributes checkGates refused them. With it, a
	// derived attribute replaces the device attribute of the same name in
	// the request's constraints (search.values); a later definition of a
	// name wins, as in kube-scheduler.
	if len(derived) > 0 && s.f.DerivedAttributes {
		sb.derived = make(map[string]string, len(derived))
		for _, a := range derived {
			sb.derived[string(a.Name)] = a.Expression
		}
	}
	switch mode {
	case "", resourceapi.DeviceAllocationModeExactCount:
		// A count above the per-claim limit can never be allocated. In an
		// exactly request that makes the claim invalid; a subrequest is
		// only skipped for the next one (the API asks no more than
		// count > 0 of it), as kube-scheduler does.
		// Capped so that sums over a claim's requests cannot overflow.
		sb.count = int(min(max(count, 1), math.MaxInt32))
		sb.overLimit = si < 0 && count > maxResults
		if count < 0 {
			return sb, invalid(requestField(ri, si)+".count", fmt.Errorf("%d is not between 1 and %d", count, resourceapi.AllocationResultsMaxSize))
		}
	case resourceapi.DeviceAllocationModeAll:
		sb.all = true
	default:
		return sb, invalid(requestField(ri, si)+".allocationMode", fmt.Errorf("unknown allocation mode %q", mode))
	}
	if className == "" {
		return sb, invalid(requestField(ri, si)+".deviceClassName", errors.New("must be set"))
	}
	class, ok := s.classes[className]
	if !ok {
		return sb, fmt.Errorf("%w: claim %s, request %s: device class %q does not exist", allocator.ErrUnsatisfiable, allocator.ClaimKey(claim), name, className)
	}
	sb.class = class
	ci := s.classInfo(class)
	if ci.err != nil {
		return sb, invalid(sb.selectorField(ci.bad), ci.err)
	}
	if len(selectors) == 0 {
		sb.cs = ci.cs
		return sb, nil
	}
	exprs := slices.Clip(ci.exprs)
	for i, sel := range selectors {
		if err := s.selectorError(sel); err != nil {
			return sb, invalid(sb.selectorField(len(ci.exprs)+i), err)
		}
		exprs = append(exprs, sel.CEL.Expression)
	}
	sb.cs = s.candSetFor(exprs)
	return sb, nil
}
