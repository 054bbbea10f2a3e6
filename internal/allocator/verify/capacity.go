package verify

import (
	"math"
	"math/big"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// Consumable capacity (KEP-5075), re-derived on purpose without the native
// engine's code: every quantity becomes an exact rational (math/big), and a
// request policy's step arithmetic is done on whole units rounded up, as
// kube-scheduler does without fractional capacity ranges, and exactly with
// them (DRAFractionalCapacityRange) when every bound of the range is a
// whole number of milli-units and the step at least 1m.

func isShared(d *resourceapi.Device) bool { return ptr.Deref(d.AllowMultipleAllocations, false) }

// rat is q as an exact rational.
func rat(q resource.Quantity) *big.Rat {
	d := q.AsDec()
	r := new(big.Rat).SetInt(d.UnscaledBig())
	scale := int64(d.Scale())
	p := new(big.Int).Exp(big.NewInt(10), big.NewInt(abs(scale)), nil)
	if scale > 0 {
		return r.Quo(r, new(big.Rat).SetInt(p))
	}
	return r.Mul(r, new(big.Rat).SetInt(p))
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// ceil is the smallest integer not below r.
func ceil(r *big.Rat) *big.Int {
	q, m := new(big.Int).DivMod(r.Num(), r.Denom(), new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return q
}

// wantConsumed is what request req (nil: none) consumes of capacity c, and
// whether the capacity's policy allows it.
func wantConsumed(req *resource.Quantity, c resourceapi.DeviceCapacity, frac bool) (*big.Rat, bool) {
	p := c.RequestPolicy
	if req == nil {
		if p != nil && p.Default != nil {
			return rat(*p.Default), true
		}
		return rat(c.Value), allowed(rat(c.Value), p, frac)
	}
	v := rat(*req)
	switch {
	case p == nil:
	case p.ValidRange != nil && p.ValidRange.Min != nil:
		lo := rat(*p.ValidRange.Min)
		switch {
		case v.Cmp(lo) < 0:
			v = lo
		case p.ValidRange.Step != nil && milliRange(p.ValidRange, frac):
			// lo + n*step for the smallest whole n, exactly.
			step := rat(*p.ValidRange.Step)
			n := ceil(new(big.Rat).Quo(new(big.Rat).Sub(v, lo), step))
			v = new(big.Rat).Add(lo, new(big.Rat).Mul(new(big.Rat).SetInt(n), step))
		case p.ValidRange.Step != nil:
			// lo + n*step for the smallest whole n, in whole units.
			lowest, step := ceil(lo), ceil(rat(*p.ValidRange.Step))
			n := new(big.Int).Sub(ceil(v), lowest)
			n = ceil(new(big.Rat).SetFrac(n, step))
			v = new(big.Rat).SetInt(n.Mul(n, step).Add(n, lowest))
		}
	case p.ValidValues != nil:
		for _, vv := range p.ValidValues {
			if w := rat(vv); v.Cmp(w) <= 0 {
				v = w
				break
			}
		}
	}
	if p != nil && p.Default != nil && v.Cmp(rat(*p.Default)) == 0 {
		return v, true
	}
	return v, allowed(v, p, frac)
}

// milliRange reports whether a range's arithmetic is exact: with the gate
// (frac), when min, max and step are whole numbers of milli-units within
// int64 and the step is at least 1m.
func milliRange(r *resourceapi.CapacityRequestPolicyRange, frac bool) bool {
	if !frac {
		return false
	}
	limit := new(big.Rat).SetInt64(math.MaxInt64)
	for _, q := range []*resource.Quantity{r.Min, r.Max, r.Step} {
		if q == nil {
			continue
		}
		m := new(big.Rat).Mul(rat(*q), big.NewRat(1000, 1))
		if !m.IsInt() || new(big.Rat).Abs(m).Cmp(limit) > 0 {
			return false
		}
	}
	return r.Step == nil || rat(*r.Step).Cmp(big.NewRat(1, 1000)) >= 0
}

// allowed reports whether policy p allows consuming v.
func allowed(v *big.Rat, p *resourceapi.CapacityRequestPolicy, frac bool) bool {
	switch {
	case p == nil:
		return true
	case p.ValidRange != nil:
		r := p.ValidRange
		if r.Max != nil && v.Cmp(rat(*r.Max)) > 0 {
			return false
		}
		if r.Step != nil && r.Min != nil && milliRange(r, frac) {
			return new(big.Rat).Quo(new(big.Rat).Sub(v, rat(*r.Min)), rat(*r.Step)).IsInt()
		}
		if r.Step != nil && r.Min != nil {
			off := new(big.Int).Sub(ceil(v), ceil(rat(*r.Min)))
			return new(big.Int).Mod(off, ceil(rat(*r.Step))).Sign() == 0
		}
	case len(p.ValidValues) > 0:
		for _, vv := range p.ValidValues {
			if v.Cmp(rat(vv)) == 0 {
				return true
			}
		}
		return false
	}
	return true
}

// checkCapacity checks every result against its device's capacities: the
// request names only capacities the device has, each consumption is allowed
// by the policy, a shared device's result is a share with a fresh ID and
// the right consumed capacity, and a shared device's shares (recorded and
// new) do not consume more than any capacity.
func (k *check) checkCapacity() {
	if !k.features.ConsumableCapacity {
		// Without the gate no device is shared and capacities are not
		// consumed (kube-scheduler ignores or refuses capacity requests).
		return
	}
	ids := map[deviceID]map[string]bool{}
	total := map[deviceID]map[resourceapi.QualifiedName]*big.Rat{}
	for _, res := range k.results {
		if res.dev == nil || res.req == nil {
			continue
		}
		d := res.dev.Device
		id := res.id.String()
		var requests map[resourceapi.QualifiedName]resource.Quantity
		if res.req.capacity != nil {
			requests = res.req.capacity.Requests
		}
		for name := range requests {
			if _, ok := d.Capacity[name]; !ok {
				k.fail(RuleCapacity, id, "request %q asks for capacity %s, which the device does not have", res.req.name, name)
			}
		}
		want := map[resourceapi.QualifiedName]*big.Rat{}
		for name, c := range d.Capacity {
			var req *resource.Quantity
			if q, ok := requests[name]; ok {
				req = &q
			}
			v, ok := wantConsumed(req, c, k.features.FractionalCapacityRange)
			if !ok {
				k.fail(RuleCapacity, id, "request %q consumes %s of capacity %s, which its request policy does not allow", res.req.name, v.RatString(), name)
			}
			if v.Cmp(rat(c.Value)) > 0 {
				k.fail(RuleCapacity, id, "request %q consumes %s of capacity %s, more than its %s", res.req.name, v.RatString(), name, c.Value.String())
			}
			want[name] = v
		}
		if !isShared(d) {
			if res.ShareID != nil || res.ConsumedCapacity != nil {
				k.fail(RuleShare, id, "device is not shared but the result has share ID %v and consumed capacity %v", ptr.Deref(res.ShareID, ""), res.ConsumedCapacity)
			}
			continue
		}
		k.checkShare(res, want, ids)
		if total[res.id] == nil {
			total[res.id] = map[resourceapi.QualifiedName]*big.Rat{}
			for _, s := range k.shares[res.id] {
				for name, q := range s.ConsumedCapacity {
					addTo(total[res.id], name, rat(q))
				}
			}
		}
		for name, v := range want {
			addTo(total[res.id], name, v)
		}
	}
	for id, t := range total {
		d := k.devices[id].Device
		for name, v := range t {
			if c, ok := d.Capacity[name]; ok && v.Cmp(rat(c.Value)) > 0 {
				k.fail(RuleCapacity, id.String(), "shares consume %s of capacity %s, more than its %s", v.RatString(), name, c.Value.String())
			}
		}
	}
}

// checkShare checks one share's ID (set, and not used by another share of
// the device) and its consumed capacity (every capacity of the device, as
// want says).
func (k *check) checkShare(res result, want map[resourceapi.QualifiedName]*big.Rat, ids map[deviceID]map[string]bool) {
	id := res.id.String()
	if res.ShareID == nil {
		k.fail(RuleShare, id, "a shared device is allocated without a share ID")
	} else {
		if ids[res.id] == nil {
			ids[res.id] = map[string]bool{}
			for _, s := range k.shares[res.id] {
				ids[res.id][string(*s.ShareID)] = true
			}
		}
		if ids[res.id][string(*res.ShareID)] {
			k.fail(RuleShare, id, "share ID %s is already used for this device", *res.ShareID)
		}
		ids[res.id][string(*res.ShareID)] = true
	}
	if len(res.ConsumedCapacity) != len(want) {
		k.fail(RuleShare, id, "consumed capacity %v names %d capacities, the device has %d", res.ConsumedCapacity, len(res.ConsumedCapacity), len(want))
	}
	for name, v := range want {
		got, ok := res.ConsumedCapacity[name]
		if !ok || rat(got).Cmp(v) != 0 {
			k.fail(RuleShare, id, "consumed capacity %s is %s, want %s", name, got.String(), v.RatString())
		}
	}
}

func addTo(m map[resourceapi.QualifiedName]*big.Rat, name resourceapi.QualifiedName, v *big.Rat) {
	if m[name] == nil {
		m[name] = new(big.Rat)
	}
	m[name].Add(m[name], v)
}

// couldServe reports whether device d, unused, could serve request req as
// far as capacities go: it has every capacity the request names, and each
// consumption is allowed by the policy and within the capacity.
func couldServe(req *request, d *resourceapi.Device, frac bool) bool {
	var requests map[resourceapi.QualifiedName]resource.Quantity
	if req.capacity != nil {
		requests = req.capacity.Requests
	}
	for name := range requests {
		if _, ok := d.Capacity[name]; !ok {
			return false
		}
	}
	for name, c := range d.Capacity {
		var q *resource.Quantity
		if v, ok := requests[name]; ok {
			q = &v
		}
		v, ok := wantConsumed(q, c, frac)
		if !ok || v.Cmp(rat(c.Value)) > 0 {
			return false
		}
	}
	return true
}
