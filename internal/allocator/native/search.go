package native

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/google/cel-go/common/types/ref"

	"github.com/drastack/drastack/internal/allocator"
)

// search is one depth-first search for the claims of a plan on one node.
//
// Devices of one request are chosen in candidate order with increasing
// positions, so every set is tried once (combinations, not permutations).
// A matchAttribute constraint is decided up front: at the first request it
// applies to, the search branches over the values that enough candidates
// share and keeps only devices with that value from then on. That is exact
// for list attributes too (a non-empty intersection is a shared value) and
// leaves nothing to restore on backtracking except the branch itself.
type search struct {
	s     *Session
	ctx   context.Context
	p     *plan
	node  int
	limit int64
	steps int64

	subChoice []int
	cands     [][][]int32 // per slot and sub; nil until computed for this node
	chosen    []choice
	// tent counts how often each device is tentatively chosen in this
	// search (the session's scratch array; all zero between searches).
	tent     []int32
	matchSet []bool
	matchVal []string
	used     []map[string]int // distinctAttribute: values taken
	celFalse bool
	reason   string
	// strict is set while the strict search runs (strict.go).
	strict *strictState
	// celArgs and celKey are scratch space for evalCEL.
	celArgs []ref.Val
	celKey  []byte
	// capErr is the first capacity consumption that could not be computed
	// (capacity.go); it makes the claim invalid.
	capErr error
	// groupUndo are the compatibility-group intersections the tentative
	// choices replaced (compat.go).
	groupUndo []groupSaved
	// nodeOps: the node declares DRAOptionalNodeOperations.
	nodeOps bool
	// pack: candidates are tried in the Pack policy's order (pack.go);
	// packBuf and packKeys are its scratch space.
	pack     bool
	packBuf  [][][]int32
	packKeys []packKey
	// gang is set when the search places one member of a gang (gang.go):
	// other members' choices are tentatively applied, a complete choice
	// continues with the next member, and the steps count for the gang.
	gang *gangSearch
}

type choice struct {
	slot, sub int
	dev       int32
	// groups is how many compatibility-group entries the choice saved on
	// search.groupUndo (compat.go).
	groups int32
}

func (s *Session) newSearch(ctx context.Context, p *plan, limit int64) *search {
	return &search{s: s, ctx: ctx, p: p, limit: limit}
}

// reset prepares the search for node (an index into Session.nodes, or -1)
// and undoes whatever a previous run left tentatively allocated.
func (x *search) reset(node int) {
	for len(x.chosen) > 0 {
		x.undo()
	}
	x.node = node
	if x.s.compat.dirty {
		x.s.rebuildCompat()
	}
	x.nodeOps = node >= 0 && x.s.declaresNodeOps(node)
	if x.subChoice == nil {
		// The buffers are sized by the plan, which does not change.
		x.subChoice = make([]int, len(x.p.slots))
		x.cands = make([][][]int32, len(x.p.slots))
		for i := range x.p.slots {
			x.cands[i] = make([][]int32, len(x.p.slots[i].subs))
		}
		x.matchSet = make([]bool, len(x.p.match))
		x.matchVal = make([]string, len(x.p.match))
		x.used = make([]map[string]int, len(x.p.distinct))
		for i := range x.used {
			x.used[i] = map[string]int{}
		}
	}
	clear(x.subChoice)
	clear(x.matchSet)
	if x.gang != nil {
		x.gang.preset(x)
	}
	for i := range x.used {
		// Empty after the undo above, but values may linger at zero.
		clear(x.used[i])
	}
	x.tent = x.s.tent
	x.celFalse = false
	x.capErr = nil
	x.reason = ""
	x.strict = nil
}

func (x *search) failf(format string, args ...any) {
	if x.reason == "" {
		x.reason = fmt.Sprintf(format, args...)
	}
}

// run searches on node; on success x.chosen holds the allocation.
func (x *search) run(node int) (bool, error) {
	x.reset(node)
	if x.p.hasAll && x.s.allBlocked(node) {
		x.failf("a request asks for all devices, but a pool visible from the node is incomplete or invalid")
		return false, nil
	}
	if x.p.deferred != nil {
		return false, x.p.deferred
	}
	if err := x.load(); err != nil {
		return false, err
	}
	if err := x.s.overLimit(x.p, x.node, func(i, b int) int { return len(x.cands[i][b]) }); err != nil {
		return false, err
	}
	if x.p.strict {
		ok, err := x.runStrict()
		if err == nil && !ok && x.capErr != nil {
			return false, x.capErr
		}
		return ok, err
	}
	ok, err := x.feasible()
	if err == nil && !ok && x.capErr != nil {
		return false, x.capErr
	}
	if !ok || err != nil {
		return false, err
	}
	ok, err = x.slot(0)
	if errors.Is(err, errTooMany) {
		ok, err = false, nil
	}
	if err == nil && !ok && x.capErr != nil {
		return false, x.capErr
	}
	if err == nil && !ok && x.reason == "" {
		if x.celFalse {
			x.reason = "no combination of devices satisfies the CEL constraints"
		} else {
			x.reason = "constraints and counters leave no complete set of devices" + x.distinctListsIgnored()
		}
	}
	return ok, err
}

// load fetches the candidates of every alternative on x.node, dropping
// devices that can no longer be used. It runs before anything is
// tentatively allocated (see Session.prune). Requests for All devices and
// admin access see every matching device, others only the live ones.
func (x *search) load() error {
	for i := range x.p.slots {
		for b := range x.p.slots[i].subs {
			sb := &x.p.slots[i].subs[b]
			nc, err := x.s.nodeCands(x.ctx, sb.cs, x.node)
			if err != nil {
				return x.p.candidateError(i, b, err)
			}
			if x.gang == nil {
				// A gang prunes before it searches (gang.go): other
				// members' tentative choices must not count as gone.
				x.s.prune(nc)
			}
			if sb.all || sb.admin {
				x.cands[i][b] = nc.all
			} else {
				x.cands[i][b] = nc.live
			}
			if err := x.checkCapacity(i, b); err != nil {
				return err
			}
			if x.pack {
				x.cands[i][b] = x.packOrder(i, b, x.cands[i][b])
			}
		}
	}
	return nil
}

// checkCapacity applies the capacities to the candidates of slot i,
// alternative b, as kube-scheduler does before searching: a request with
// capacity requests that cannot be computed for some candidate makes the
// claim invalid, and a request for all devices does not count devices whose
// capacities could not serve it even when unused.
func (x *search) checkCapacity(i, b int) error {
	sb := &x.p.slots[i].subs[b]
	if sb.capacity == nil && !sb.all {
		return nil
	}
	c := x.cands[i][b]
	var kept []int32
	for k, d := range c {
		f := x.s.fit(sb, d)
		if f.err != nil {
			return x.p.capacityError(x.p.slots[i].claim, sb, x.s.devs[d].id, f.err)
		}
		if !sb.all {
			continue
		}
		if !f.ok && kept == nil {
			kept = append(make([]int32, 0, len(c)), c[:k]...)
		} else if f.ok && kept != nil {
			kept = append(kept, d)
		}
	}
	if kept != nil {
		x.cands[i][b] = kept
	}
	return nil
}

// candidateError reports a failure to select candidates for slot i,
// alternative b: a selector that fails at runtime makes the claim invalid.
func (p *plan) candidateError(i, b int, err error) error {
	sl := &p.slots[i]
	sb := &sl.subs[b]
	key := allocator.ClaimKey(p.claims[sl.claim])
	var se *selectorError
	if errors.As(err, &se) {
		return &allocator.InvalidClaimError{Claim: key, Field: sb.selectorField(se.idx), Err: se.err}
	}
	return fmt.Errorf("claim %s, request %s: %w", key, sb.name, err)
}

// capacityError is the error of alternative sb whose consumption of device
// id's capacities cannot be computed.
func (p *plan) capacityError(claim int, sb *sub, id deviceID, err error) error {
	return &allocator.InvalidClaimError{
		Claim: allocator.ClaimKey(p.claims[claim]),
		Field: requestField(sb.ri, sb.si) + ".capacity.requests",
		Err:   fmt.Errorf("device %s/%s/%s: %w", id.driver, id.pool, id.device, err),
	}
}

// feasible checks cardinality before any search: every request needs some
// alternative with enough usable candidates on this node.
func (x *search) feasible() (bool, error) {
	for i := range x.p.slots {
		sl := &x.p.slots[i]
		ok := false
		for b := range sl.subs {
			c := x.cands[i][b]
			sb := &sl.subs[b]
			if sb.all {
				ok = ok || len(c) > 0
				continue
			}
			if n := x.countUsable(i, sb, c, sb.count); n >= sb.count {
				ok = true
			} else if len(sl.subs) == 1 {
				x.failf("%s", x.shortReason(sb, c, n))
			}
		}
		if !ok {
			x.failf("request %s: not enough matching devices", sl.subs[0].name)
			return false, nil
		}
	}
	return true, nil
}

// shortReason says why alternative sb has only n usable candidates of c:
// a distinctAttribute constraint on an attribute none of them has, or too
// few free devices.
func (x *search) shortReason(sb *sub, c []int32, n int) string {
	for _, m := range sb.distinct {
		if len(c) > 0 && x.noneHas(sb, c, x.p.distinct[m]) {
			return fmt.Sprintf("request %s: constraint distinctAttribute %s: none of the %d matching devices has that attribute", sb.name, x.p.distinct[m], len(c))
		}
	}
	return fmt.Sprintf("request %s: %d matching devices available, %d needed", sb.name, n, sb.count)
}

func (x *search) countUsable(i int, sb *sub, c []int32, enough int) int {
	n := 0
	for _, d := range c {
		if x.usable(i, sb, d) {
			n++
			if n >= enough {
				break
			}
		}
	}
	return n
}

func (x *search) step() error {
	x.steps++
	if x.gang != nil {
		x.gang.steps++
		if x.gang.steps > x.limit {
			return fmt.Errorf("%w: gang %s: gave up after %d steps (devices tried over all members); narrow the members' requests or constraints", allocator.ErrSearchBound, x.gang.name, x.limit)
		}
	}
	if x.steps > x.limit {
		return fmt.Errorf("%w: gave up after %d steps (devices tried); the claims' constraints leave too many combinations to check, narrow them with selectors or a smaller count", allocator.ErrSearchBound, x.limit)
	}
	if x.steps&1023 == 0 {
		if err := x.ctx.Err(); err != nil {
			return fmt.Errorf("allocation aborted: %w", context.Cause(x.ctx))
		}
	}
	return nil
}

// slot tries the alternatives of slot i in order. It returns errTooMany
// when every alternative leaves the claim more devices than a result holds:
// that depends only on the counts chosen for the claim's earlier requests,
// never on which devices were picked, so the callers drop every device
// choice up to the nearest earlier request with another alternative
// (kube-scheduler's errAllocationResultMaxSizeExceeded) instead of trying
// them all.
func (x *search) slot(i int) (bool, error) {
	if i == len(x.p.slots) {
		return x.complete()
	}
	tooMany := true
	for b := range x.p.slots[i].subs {
		x.subChoice[i] = b
		ok, err := x.enterSub(i, b, x.cands[i][b])
		if errors.Is(err, errTooMany) {
			continue
		}
		tooMany = false
		if ok || err != nil {
			return ok, err
		}
	}
	if tooMany {
		return false, errTooMany
	}
	return false, nil
}

// enterSub decides unset matchAttribute values for the alternative, checks
// cardinality and then picks devices.
func (x *search) enterSub(i, b int, c []int32) (bool, error) {
	sb := &x.p.slots[i].subs[b]
	for _, m := range sb.match {
		if x.matchSet[m] {
			continue
		}
		values := x.matchValues(i, sb, c, m)
		if len(values) == 0 {
			if name, n, ok := x.lacking(i, sb, c, m); ok {
				x.failf("request %s: constraint matchAttribute %s: none of the %d matching devices has that attribute", name, x.p.match[m], n)
			} else {
				x.failf("request %s: no value of %s is shared by enough devices%s", sb.name, x.p.match[m], x.listsIgnored(sb, c, x.p.match[m], listsMatchNothing))
			}
		}
		for _, v := range values {
			x.matchSet[m], x.matchVal[m] = true, v
			ok, err := x.enterSub(i, b, c)
			if ok {
				return true, nil
			}
			if err != nil {
				x.matchSet[m] = false
				return false, err
			}
		}
		x.matchSet[m] = false
		return false, nil
	}
	if sb.all {
		return x.pickAll(i, b, c)
	}
	if n := x.claimDevices(x.p.slots[i].claim); n+sb.count+x.p.slots[i].minAfter > maxResults {
		x.failf("request %s: %d devices, with %d already chosen for the claim and at least %d needed by its later requests, exceed the %d devices of one allocation result",
			sb.name, sb.count, n, x.p.slots[i].minAfter, maxResults)
		return false, errTooMany
	}
	if n := x.countUsable(i, sb, c, sb.count); n < sb.count {
		return false, nil
	}
	if len(sb.distinct) > 0 && !x.enoughDistinct(i, sb, c) {
		return false, nil
	}
	return x.pick(i, b, c, 0, 0)
}

func (x *search) pick(i, b int, c []int32, k, start int) (bool, error) {
	sb := &x.p.slots[i].subs[b]
	if k == sb.count {
		return x.finishSlot(i)
	}
	need := sb.count - k
	for p := start; p <= len(c)-need; p++ {
		d := c[p]
		if !x.usable(i, sb, d) {
			continue
		}
		if err := x.step(); err != nil {
			return false, err
		}
		x.apply(i, b, d)
		ok, err := x.pick(i, b, c, k+1, p+1)
		if ok {
			return true, nil
		}
		x.undo()
		if err != nil {
			return false, err
		}
	}
	return false, nil
}

// pickAll takes every candidate; one that cannot be taken fails the request.
func (x *search) pickAll(i, b int, c []int32) (bool, error) {
	sb := &x.p.slots[i].subs[b]
	if len(c) == 0 {
		return false, nil
	}
	if n := x.claimDevices(x.p.slots[i].claim); n+len(c)+x.p.slots[i].minAfter > maxResults {
		x.failf("request %s: all %d devices, with %d already chosen for the claim and at least %d needed by its later requests, exceed the %d devices of one allocation result",
			sb.name, len(c), n, x.p.slots[i].minAfter, maxResults)
		return false, errTooMany
	}
	n := 0
	for _, d := range c {
		if !x.usable(i, sb, d) {
			x.failf("request %s asks for all devices, but some cannot be allocated", sb.name)
			break
		}
		if err := x.step(); err != nil {
			return false, err
		}
		x.apply(i, b, d)
		n++
	}
	var err error
	if n == len(c) {
		var ok bool
		ok, err = x.finishSlot(i)
		if ok {
			return true, nil
		}
	}
	for ; n > 0; n-- {
		x.undo()
	}
	return false, err
}

// finishSlot evaluates the CEL constraints whose devices are now complete.
func (x *search) finishSlot(i int) (bool, error) {
	for ci := range x.p.cels {
		cp := &x.p.cels[ci]
		if cp.lastSlot != i {
			continue
		}
		ok, err := x.evalCEL(ci)
		if err != nil || !ok {
			return false, err
		}
	}
	if i+1 < len(x.p.slots) && x.p.slots[i+1].claim == x.p.slots[i].claim {
		return x.slot(i + 1)
	}
	// A later claim's size does not depend on this claim's choices.
	ok, err := x.slot(i + 1)
	if errors.Is(err, errTooMany) {
		return false, nil
	}
	return ok, err
}

func (x *search) evalCEL(ci int) (bool, error) {
	cp := &x.p.cels[ci]
	vals := x.celArgs[:0]
	key := binary.LittleEndian.AppendUint32(x.celKey[:0], cp.exprID)
	for _, ch := range x.chosen {
		sl := &x.p.slots[ch.slot]
		if sl.claim != cp.claim || !containsInt(sl.subs[ch.sub].cels, ci) {
			continue
		}
		v, content, err := x.s.celValue(ch.dev)
		if err != nil {
			return false, err
		}
		vals = append(vals, v)
		key = binary.LittleEndian.AppendUint32(key, uint32(content))
	}
	x.celArgs, x.celKey = vals, key
	// The expression sees the driver, attributes and capacity of each
	// device, in order, and nothing else: devices that look the same give
	// the same answer. Claims that search the same devices again (a full
	// node, a retry) and nodes with the same kind of devices skip CEL.
	ok, known := x.s.celMemo[string(key)]
	if !known {
		var err error
		ok, err = x.s.e.constraints.eval(x.ctx, cp.prog, vals)
		if err != nil && x.ctx.Err() != nil {
			return false, fmt.Errorf("allocation aborted: %w", err)
		}
		if err != nil {
			return false, &allocator.InvalidClaimError{Claim: allocator.ClaimKey(x.p.claims[cp.claim]), Field: cp.field, Err: err}
		}
		if len(x.s.celMemo) >= maxCELMemo {
			clear(x.s.celMemo)
		}
		x.s.celMemo[string(key)] = ok
	}
	if !ok {
		x.celFalse = true
	}
	return ok, nil
}

// lacking finds the request that makes matchAttribute constraint m fail
// for want of the attribute: alternative sb of slot i (candidates c) or a
// later request of the claim bound by m whose every alternative has no
// candidate with it. It returns the request's name and candidate count.
func (x *search) lacking(i int, sb *sub, c []int32, m int) (string, int, bool) {
	attr := x.p.match[m]
	if x.noneHas(sb, c, attr) {
		return sb.name, len(c), true
	}
	claim := x.p.slots[i].claim
	for j := i + 1; j < len(x.p.slots) && x.p.slots[j].claim == claim; j++ {
		sl := &x.p.slots[j]
		all, n := true, 0
		for b := range sl.subs {
			if !containsInt(sl.subs[b].match, m) || !x.noneHas(&sl.subs[b], x.cands[j][b], attr) {
				all = false
				break
			}
			n += len(x.cands[j][b])
		}
		if all {
			return x.p.claims[claim].Spec.Devices.Requests[sl.req].Name, n, true
		}
	}
	return "", 0, false
}

// noneHas reports whether no device of c has attribute attr, which makes a
// constraint on it fail whatever the counts.
func (x *search) noneHas(sb *sub, c []int32, attr string) bool {
	for _, d := range c {
		if len(x.values(sb, attr, d)) > 0 {
			return false
		}
	}
	return true
}

func (x *search) claimDevices(claim int) int {
	n := 0
	for _, ch := range x.chosen {
		if x.p.slots[ch.slot].claim == claim {
			n++
		}
	}
	return n
}

func containsInt(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
