package native

import (
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// Shared devices and consumable capacity (KEP-5075), as kube-scheduler
// 1.36/1.37 applies them with DRAConsumableCapacity on (the default) and
// DRAFractionalCapacityRange off:
//
//   - Every device's capacities are checked for every request, shared or
//     not: a request naming a capacity the device lacks skips the device;
//     each capacity is consumed as the request and the capacity's
//     requestPolicy say (fitCapacity); a consumption the policy does not
//     allow, or more than the capacity left, skips the device.
//   - A device with allowMultipleAllocations is never exclusive: each
//     request that gets it takes a share (a share ID and the consumption of
//     every capacity in the result), and shares add up against the
//     capacities. Its counters are charged once, by the first share.
//   - A capacity request or a step that cannot be represented in int64
//     arithmetic, or a negative consumption, is an error of the claim (the
//     allocator aborts rather than skipping the device).
//
// Quantities are compared and added exactly (resource.Quantity), never as
// floating point.

// devCap is one capacity of a device.
type devCap struct {
	name   resourceapi.QualifiedName
	value  resource.Quantity
	policy *resourceapi.CapacityRequestPolicy
}

// deviceCaps lists a device's capacities by name.
func deviceCaps(dev *resourceapi.Device) []devCap {
	if len(dev.Capacity) == 0 {
		return nil
	}
	out := make([]devCap, 0, len(dev.Capacity))
	for name, c := range dev.Capacity {
		out = append(out, devCap{name: name, value: c.Value, policy: c.RequestPolicy})
	}
	slices.SortFunc(out, func(a, b devCap) int {
		switch {
		case a.name < b.name:
			return -1
		case a.name > b.name:
			return 1
		}
		return 0
	})
	return out
}

// capFit is what one request would consume of one device, on its own.
type capFit struct {
	// ok: the device has every capacity the request names, the request
	// policy allows each consumption and each fits into the capacity.
	ok bool
	// consumed is the consumption of each capacity of the device, in the
	// order of device.caps (empty when !ok because a capacity is missing).
	consumed []resource.Quantity
	// err makes the claim invalid (see errNotRepresentable).
	err error
}

// fitAlways is the fit of a device without capacities for a request
// without capacity requests.
var fitAlways = &capFit{ok: true}

// errNotRepresentable: a capacity request, or the step it rounds up to,
// passes int64; kube-scheduler aborts the allocation then.
var errNotRepresentable = errors.New("capacity request cannot be represented in the device's range arithmetic")

// errNegativeCapacity: a consumption is negative (an object stored before
// validation forbade it); kube-scheduler aborts the allocation then.
var errNegativeCapacity = errors.New("capacity value is negative")

// fitCapacity computes the fit of a request (requests nil: none) on a
// device with capacities caps.
//
// frac is DRAFractionalCapacityRange: range arithmetic in milli-units
// where the range allows it (useMilli).
func fitCapacity(requests map[resourceapi.QualifiedName]resource.Quantity, caps []devCap, frac bool) *capFit {
	if len(caps) == 0 && len(requests) == 0 {
		return fitAlways
	}
	for name := range requests {
		if !slices.ContainsFunc(caps, func(c devCap) bool { return c.name == name }) {
			return &capFit{}
		}
	}
	f := &capFit{ok: true, consumed: make([]resource.Quantity, len(caps))}
	// Every consumption is resolved before any is judged, so that an error
	// does not depend on the order of the capacities.
	for k := range caps {
		var req *resource.Quantity
		if q, ok := requests[caps[k].name]; ok {
			req = &q
		}
		v, err := consumed(req, caps[k], frac)
		if err == nil && v.Sign() < 0 {
			err = errNegativeCapacity
		}
		if err != nil {
			return &capFit{err: fmt.Errorf("capacity %q: %w", caps[k].name, err)}
		}
		f.consumed[k] = v
	}
	for k := range caps {
		// Cmp through a pointer may convert its receiver to another
		// internal form; compare a copy, so that the consumption in the
		// result is the request as written, as kube-scheduler's is.
		v := f.consumed[k]
		if violatesPolicy(v, caps[k].policy, frac) || v.Cmp(caps[k].value) > 0 {
			f.ok = false
		}
	}
	return f
}

// consumed is what a request (nil: none) takes of capacity c: without a
// request the policy's default, or the whole capacity; with one, the
// request rounded up as the policy says.
func consumed(req *resource.Quantity, c devCap, frac bool) (resource.Quantity, error) {
	p := c.policy
	if req == nil {
		if p != nil && p.Default != nil {
			return p.Default.DeepCopy(), nil
		}
		return c.value.DeepCopy(), nil
	}
	switch {
	case p == nil:
		return req.DeepCopy(), nil
	case p.ValidRange != nil && p.ValidRange.Min != nil:
		return roundUpToRange(*req, p.ValidRange, frac)
	case p.ValidValues != nil:
		for _, v := range p.ValidValues {
			if req.Cmp(v) <= 0 {
				return v.DeepCopy(), nil
			}
		}
	}
	return req.DeepCopy(), nil
}

// roundUpToRange rounds req up to the range: at least min, and with a step
// to min plus a whole number of steps. With a step, the arithmetic is on
// whole units rounded up (Quantity.Value), as kube-scheduler's is without
// fractional capacity ranges; with them (frac) it is on milli-units when
// the range allows (useMilli), and a request that is not a whole number of
// milli-units cannot be represented then.
func roundUpToRange(req resource.Quantity, r *resourceapi.CapacityRequestPolicyRange, frac bool) (resource.Quantity, error) {
	if req.Cmp(*r.Min) < 0 {
		return r.Min.DeepCopy(), nil
	}
	if r.Step == nil {
		return req.DeepCopy(), nil
	}
	if useMilli(r, frac) {
		value, ok := milliValue(req)
		if !ok {
			return resource.Quantity{}, fmt.Errorf("%w: request %s is not a representable milli value", errNotRepresentable, req.String())
		}
		step, lowest := r.Step.MilliValue(), r.Min.MilliValue()
		steps := (value - lowest) / step
		if (value-lowest)%step != 0 {
			steps++
		}
		if steps > (math.MaxInt64-lowest)/step {
			return resource.Quantity{}, fmt.Errorf("%w: rounding request %s up to the next step passes the milli-value range", errNotRepresentable, req.String())
		}
		v := lowest + step*steps
		if v%1000 == 0 {
			return *resource.NewQuantity(v/1000, r.Step.Format), nil
		}
		return *resource.NewMilliQuantity(v, r.Step.Format), nil
	}
	if req.CmpInt64(math.MaxInt64) > 0 {
		return resource.Quantity{}, fmt.Errorf("%w: request %s exceeds MaxInt64", errNotRepresentable, req.String())
	}
	value, step, lowest := req.Value(), r.Step.Value(), r.Min.Value()
	if step <= 0 {
		return resource.Quantity{}, fmt.Errorf("%w: step %s is not positive", errNotRepresentable, r.Step.String())
	}
	steps := (value - lowest) / step
	if (value-lowest)%step != 0 {
		steps++
	}
	if lowest >= 0 && steps > (math.MaxInt64-lowest)/step {
		return resource.Quantity{}, fmt.Errorf("%w: rounding request %s up to the next step passes MaxInt64", errNotRepresentable, req.String())
	}
	return *resource.NewQuantity(lowest+step*steps, r.Step.Format), nil
}

// violatesPolicy reports whether consuming v breaks policy p. The default
// is always allowed. (kube-scheduler compares with the default as a Go
// value, which can only differ from this numeric comparison for a default
// the range or list does not allow, which API validation rejects.)
func violatesPolicy(v resource.Quantity, p *resourceapi.CapacityRequestPolicy, frac bool) bool {
	switch {
	case p == nil:
		return false
	case p.Default != nil && v.Cmp(*p.Default) == 0:
		return false
	case p.ValidRange != nil:
		r := p.ValidRange
		if r.Max != nil && v.Cmp(*r.Max) > 0 {
			return true
		}
		if r.Step != nil && useMilli(r, frac) {
			value, ok := milliValue(v)
			if !ok {
				return true
			}
			lowest := int64(0)
			if r.Min != nil {
				lowest = r.Min.MilliValue()
			}
			return (value-lowest)%r.Step.MilliValue() != 0
		}
		if r.Step != nil {
			lowest := int64(0)
			if r.Min != nil {
				lowest = r.Min.Value()
			}
			step := r.Step.Value()
			return step <= 0 || (v.Value()-lowest)%step != 0
		}
	case len(p.ValidValues) > 0:
		return !slices.ContainsFunc(p.ValidValues, func(q resource.Quantity) bool { return v.Cmp(q) == 0 })
	}
	return false
}

// useMilli reports whether range arithmetic is on milli-units: with
// DRAFractionalCapacityRange (frac), when min, max and step are each a
// whole number of milli-units that fits an int64 and the step is at least
// 1m, as kube-scheduler decides.
func useMilli(r *resourceapi.CapacityRequestPolicyRange, frac bool) bool {
	if !frac {
		return false
	}
	for _, q := range []*resource.Quantity{r.Min, r.Max, r.Step} {
		if q == nil {
			continue
		}
		if _, ok := milliValue(*q); !ok {
			return false
		}
	}
	if r.Step != nil && r.Step.MilliValue() < 1 {
		return false
	}
	return true
}

// milliValue is q in milli-units when that is exact.
func milliValue(q resource.Quantity) (int64, bool) {
	m := q.MilliValue()
	return m, q.Cmp(*resource.NewMilliQuantity(m, q.Format)) == 0
}

// fit returns the fit of alternative sb on device d, computed once per
// plan (or, without capacity requests, once per session).
func (s *Session) fit(sb *sub, d int32) *capFit {
	dev := &s.devs[d]
	if sb.capacity == nil {
		if len(dev.caps) == 0 {
			return fitAlways
		}
		if f := s.defaultFits[d]; f != nil {
			return f
		}
		f := fitCapacity(nil, dev.caps, s.f.FractionalCapacityRange)
		s.defaultFits[d] = f
		return f
	}
	if f, ok := sb.fits[dev.capsID]; ok {
		return f
	}
	f := fitCapacity(sb.capacity, dev.caps, s.f.FractionalCapacityRange)
	sb.fits[dev.capsID] = f
	return f
}

// internCaps returns the ID of a device's capacities and request policies
// (device.capsID); a device without capacities has ID 0.
func (s *Session) internCaps(caps []devCap) int32 {
	var key []byte
	q := func(v *resource.Quantity) {
		if v == nil {
			key = append(key, '-')
		} else {
			key = appendQuantity(key, *v)
		}
	}
	for k := range caps {
		c := &caps[k]
		key = append(append(key, c.name...), 0)
		q(&c.value)
		if p := c.policy; p != nil {
			key = append(key, 'p')
			q(p.Default)
			key = binary.AppendUvarint(append(key, 'v'), uint64(len(p.ValidValues)))
			for i := range p.ValidValues {
				q(&p.ValidValues[i])
			}
			if r := p.ValidRange; r != nil {
				key = append(key, 'r')
				q(r.Min)
				q(r.Max)
				q(r.Step)
			}
		}
		key = append(key, 0)
	}
	if s.capsIDs == nil {
		s.capsIDs = map[string]int32{}
	}
	id, ok := s.capsIDs[string(key)]
	if !ok {
		id = int32(len(s.capsIDs)) + 1
		s.capsIDs[string(key)] = id
	}
	return id
}

// capacityLeft reports whether f fits into what the shares of device d
// (recorded and tentative) leave of its capacities.
func (s *Session) capacityLeft(d int32, f *capFit) bool {
	if !f.ok {
		return false
	}
	used := s.capUsed[d]
	if used == nil {
		return true
	}
	caps := s.devs[d].caps
	for k := range caps {
		total := used[k].DeepCopy()
		total.Add(f.consumed[k])
		if total.Cmp(caps[k].value) > 0 {
			return false
		}
	}
	return true
}

// addShare adds (sign +1) or removes (sign -1) a share's consumption of
// shared device d.
func (s *Session) addShare(d int32, consumed []resource.Quantity, sign int) {
	if len(consumed) == 0 {
		return
	}
	used := s.capUsed[d]
	if used == nil {
		used = make([]resource.Quantity, len(s.devs[d].caps))
		s.capUsed[d] = used
	}
	for k := range consumed {
		if sign > 0 {
			used[k].Add(consumed[k])
		} else {
			used[k].Sub(consumed[k])
		}
	}
}

// recordShare adds what a recorded share consumes (by capacity name) to
// device d.
func (s *Session) recordShare(d int32, consumed map[resourceapi.QualifiedName]resource.Quantity) {
	caps := s.devs[d].caps
	if len(consumed) == 0 || len(caps) == 0 {
		return
	}
	q := make([]resource.Quantity, len(caps))
	for k := range caps {
		if v, ok := consumed[caps[k].name]; ok {
			q[k] = v
		}
	}
	s.addShare(d, q, +1)
}

// countersFree reports whether device d may be taken as far as counters
// go: a shared device that already has a share (tent: tentative shares of
// the search) was charged then and is not checked again, as in
// kube-scheduler; any other device needs its pool not overdrawn and every
// counter it consumes to have enough left.
func (s *Session) countersFree(d int32, tent int32) bool {
	dev := &s.devs[d]
	if dev.multi && s.shares[d]+tent > 0 {
		return true
	}
	if dev.usesCounters && s.pools[dev.pool].overdrawn > 0 {
		return false
	}
	return s.countersLeft(dev)
}

// consumedMap is the ConsumedCapacity of a share: every capacity of the
// device with what the request consumes of it; nil for none.
func consumedMap(caps []devCap, f *capFit) map[resourceapi.QualifiedName]resource.Quantity {
	if len(caps) == 0 || len(f.consumed) == 0 {
		return nil
	}
	out := make(map[resourceapi.QualifiedName]resource.Quantity, len(caps))
	for k := range caps {
		out[caps[k].name] = f.consumed[k].DeepCopy()
	}
	return out
}

// shareID is the share ID of the n-th share of a device in one claim's
// result. kube-scheduler draws a random UUID; the native engine derives a
// UUID (version 5 layout) from the claim, the request, the device and n,
// so that the same inputs give the same result. A claim holds a share of
// a device once per request at most, and its shares are released before
// it is allocated again, so the ID is unique among a device's shares.
func shareID(claim, request string, id deviceID, n int) *types.UID {
	in := make([]byte, 0, 64+len(claim)+len(request)+len(id.driver)+len(id.pool)+len(id.device))
	in = append(in, "drastack.io/share"...)
	for _, part := range []string{claim, request, id.driver, id.pool, id.device} {
		in = append(append(in, 0), part...)
	}
	in = strconv.AppendInt(append(in, 0), int64(n), 10)
	h := sha1.Sum(in)
	h[6] = h[6]&0x0f | 0x50
	h[8] = h[8]&0x3f | 0x80
	var out [36]byte
	hex.Encode(out[0:8], h[0:4])
	hex.Encode(out[9:13], h[4:6])
	hex.Encode(out[14:18], h[6:8])
	hex.Encode(out[19:23], h[8:10])
	hex.Encode(out[24:36], h[10:16])
	out[8], out[13], out[18], out[23] = '-', '-', '-', '-'
	uid := types.UID(out[:])
	return &uid
}

// servable counts the devices of c whose capacities could serve sb when
// unused: a request for all devices gets only those, as in kube-scheduler.
func (s *Session) servable(sb *sub, c []int32) int {
	n := 0
	for _, d := range c {
		if f := s.fit(sb, d); f.ok {
			n++
		}
	}
	return n
}
