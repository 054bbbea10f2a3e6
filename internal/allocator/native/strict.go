package native

import (
	"errors"
	"fmt"
	"slices"
)

// The strict search answers claims that ask for All devices under a
// matchAttribute or distinctAttribute constraint exactly as kube-scheduler
// does, including where kube-scheduler gives up early.
//
// kube-scheduler treats an All request whose next device breaks a claim
// constraint as an error that ends the whole attempt on the node, even when
// another choice for an earlier request, or another subrequest, would have
// worked ("it does not make sense to declare a claim where a constraint
// prevents getting all devices"). Whether that happens depends on the order
// in which its depth-first search reaches states, so the answer can only be
// reproduced by searching in that order without pruning: requests in claim
// order, subrequests in order, devices in pool order (pools by driver and
// name, pools with binding conditions last), slice name order and device
// order, constraints narrowed device by device.
//
// Decision: the native engine follows kube-scheduler here (see also
// Session.allBlocked), because kube-scheduler is what users see: a claim
// the native engine allocates must be one kube-scheduler would allocate on
// the same node. Such claims are rare (an All request is normally alone in
// its claim or unconstrained), so giving up the native pruning for them
// costs nothing in practice; the search bound still applies. Plans with
// CEL constraints, which kube-scheduler does not support, keep the native
// search.

// errAbort ends the strict search on a node (kube-scheduler's "cannot add
// device ... because a claim constraint would not be satisfied").
var errAbort = errors.New("a device of a request for all devices breaks a claim constraint")

// errTooMany is kube-scheduler's signal that the rest of a claim needs more
// devices than an allocation result holds; it backtracks past every device
// choice up to the nearest firstAvailable request or claim boundary.
var errTooMany = errors.New("allocation result would exceed its maximum size")

// strictState is the part of the strict search that the native search does
// not keep: the running intersection of every matchAttribute constraint.
type strictState struct {
	// inter[m] is the stack of intersections of constraint m, one entry per
	// device added under it; the last entry is the current intersection.
	inter [][][]string
	// order[i][b] is the candidate list of slot i, alternative b, in
	// kube-scheduler's order.
	order [][][]int32
}

// needsStrict reports whether a plan must be searched the strict way: some
// request for All devices is bound by a matchAttribute or distinctAttribute
// constraint, and no CEL constraint is involved.
func (p *plan) needsStrict() bool {
	if len(p.cels) > 0 {
		return false
	}
	for i := range p.slots {
		for _, sb := range p.slots[i].subs {
			if sb.all && (len(sb.match) > 0 || len(sb.distinct) > 0) {
				return true
			}
		}
	}
	return false
}

// runStrict is run for plans that need the strict search.
func (x *search) runStrict() (bool, error) {
	x.strict = &strictState{inter: make([][][]string, len(x.p.match)), order: make([][][]int32, len(x.p.slots))}
	for i := range x.p.slots {
		x.strict.order[i] = make([][]int32, len(x.p.slots[i].subs))
		for b := range x.p.slots[i].subs {
			o := slices.Clone(x.cands[i][b])
			slices.SortFunc(o, x.s.schedulerOrder)
			x.strict.order[i][b] = o
		}
	}
	ok, err := x.strictOne(0, 0, 0, false, 0)
	switch {
	case errors.Is(err, errAbort):
		// The reason the search stopped, whatever failed before.
		x.reason = err.Error()
		return false, nil
	case errors.Is(err, errTooMany):
		x.failf("%v", err)
		return false, nil
	}
	return ok, err
}

// schedulerOrder is the order in which kube-scheduler tries devices: pools
// without binding conditions first, then snapshot order (pools by driver
// and name, slices by name, devices as listed).
func (s *Session) schedulerOrder(a, b int32) int {
	ba, bb := s.pools[s.devs[a].pool].bindingConditions, s.pools[s.devs[b].pool].bindingConditions
	switch {
	case !ba && bb:
		return -1
	case ba && !bb:
		return 1
	}
	return int(a - b)
}

// strictOne places device k of slot i, alternative b (inSub: the
// alternative is fixed), trying candidates from position start on.
func (x *search) strictOne(i, b, k int, inSub bool, start int) (bool, error) {
	if err := x.step(); err != nil {
		return false, err
	}
	if i == len(x.p.slots) {
		return x.complete()
	}
	sl := &x.p.slots[i]
	if sl.firstAvailable && !inSub {
		allTooMany := true
		for b := range sl.subs {
			x.subChoice[i] = b
			ok, err := x.strictOne(i, b, 0, true, 0)
			if errors.Is(err, errTooMany) {
				continue
			}
			allTooMany = false
			if ok || err != nil {
				return ok, err
			}
		}
		if allTooMany {
			return false, errTooMany
		}
		return false, nil
	}
	x.subChoice[i] = b
	sb := &sl.subs[b]
	order := x.strict.order[i][b]
	if sb.all && len(order) == 0 {
		x.failf("request %s: no matching devices", sb.name)
		return false, nil
	}
	n := sb.count
	if sb.all {
		n = len(order)
	}
	if k >= n {
		return x.strictNextSlot(i)
	}
	if n-k > maxResults-x.claimDevices(sl.claim) {
		return false, errTooMany
	}
	if sb.all {
		d := order[k]
		ok, broken := x.strictUsable(i, sb, d)
		if broken {
			return false, fmt.Errorf("request %s: device %s/%s/%s: %w", sb.name, x.s.devs[d].id.driver, x.s.devs[d].id.pool, x.s.devs[d].id.device, errAbort)
		}
		if !ok {
			x.failf("request %s asks for all devices, but some cannot be allocated", sb.name)
			return false, nil
		}
		x.strictApply(i, b, d)
		ok, err := x.strictOne(i, b, k+1, inSub, 0)
		if err != nil || !ok {
			x.strictUndo()
		}
		return ok, err
	}
	for p := start; p < len(order); p++ {
		d := order[p]
		if ok, _ := x.strictUsable(i, sb, d); !ok {
			continue
		}
		x.strictApply(i, b, d)
		ok, err := x.strictOne(i, b, k+1, inSub, p+1)
		if err == nil && ok {
			return true, nil
		}
		x.strictUndo()
		if err != nil {
			return false, err
		}
	}
	return false, nil
}

// strictNextSlot moves on to the next request; at the end of a claim an
// oversized later claim only fails this branch.
func (x *search) strictNextSlot(i int) (bool, error) {
	if i+1 < len(x.p.slots) && x.p.slots[i+1].claim == x.p.slots[i].claim {
		return x.strictOne(i+1, 0, 0, false, 0)
	}
	ok, err := x.strictOne(i+1, 0, 0, false, 0)
	if errors.Is(err, errTooMany) {
		return false, nil
	}
	return ok, err
}

// strictUsable is kube-scheduler's check of one device: ok when it can be
// added; broken when everything but a claim constraint allows it.
func (x *search) strictUsable(i int, sb *sub, d int32) (ok, broken bool) {
	s := x.s
	if !x.free(i, sb, d) || !x.allowed(d) {
		return false, false
	}
	dev := &s.devs[d]
	if !s.countersFree(d, x.tent[d]) {
		return false, false
	}
	if dev.hardTaints && !tolerated(dev.dev.Taints, sb.tolerations) {
		return false, false
	}
	for _, m := range sb.match {
		vals := x.values(sb, x.p.match[m], d)
		if len(vals) == 0 {
			return false, true
		}
		if st := x.strict.inter[m]; len(st) > 0 && (!intersects(st[len(st)-1], vals) || isListKey(vals)) {
			// A list value (DRAListTypeAttributes off) matches nothing,
			// not even the same shared device again.
			return false, true
		}
	}
	for _, m := range sb.distinct {
		vals := x.values(sb, x.p.distinct[m], d)
		if len(vals) == 0 {
			return false, true
		}
		for _, v := range vals {
			if x.used[m][v] > 0 {
				return false, true
			}
		}
		if !x.listFirst(i, m, d, vals) {
			return false, true
		}
	}
	// Capacity is checked last, after the constraints, as kube-scheduler
	// does for a request for all devices.
	if !x.capacityFree(i, sb, d) {
		return false, false
	}
	return true, false
}

func (x *search) strictApply(i, b int, d int32) {
	sb := &x.p.slots[i].subs[b]
	for _, m := range sb.match {
		vals := x.values(sb, x.p.match[m], d)
		st := x.strict.inter[m]
		if len(st) > 0 {
			var narrowed []string
			for _, v := range st[len(st)-1] {
				if containsStr(vals, v) {
					narrowed = append(narrowed, v)
				}
			}
			vals = narrowed
		}
		x.strict.inter[m] = append(st, vals)
	}
	x.apply(i, b, d)
}

func (x *search) strictUndo() {
	ch := x.chosen[len(x.chosen)-1]
	for _, m := range x.p.slots[ch.slot].subs[ch.sub].match {
		x.strict.inter[m] = x.strict.inter[m][:len(x.strict.inter[m])-1]
	}
	x.undo()
}

func intersects(a, b []string) bool {
	for _, v := range a {
		if containsStr(b, v) {
			return true
		}
	}
	return false
}
