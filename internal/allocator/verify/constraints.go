package verify

import (
	"context"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"
)

// valueSet is an attribute's values as a set: a scalar is a one-element
// list. Values of different types never compare equal, so kind is part of
// every element.
type valueSet map[string]bool

// attributeValues looks up a fully qualified attribute on a device of
// driver. Devices may publish their driver's own attributes without the
// domain, so "driver/name" also finds "name".
func attributeValues(attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, driver string, name resourceapi.FullyQualifiedName) (resourceapi.DeviceAttribute, bool) {
	a, ok := attrs[resourceapi.QualifiedName(name)]
	if !ok {
		domain, id, found := strings.Cut(string(name), "/")
		if !found || domain != driver {
			return a, false
		}
		if a, ok = attrs[resourceapi.QualifiedName(id)]; !ok {
			return a, false
		}
	}
	return a, true
}

// listValue stands, while DRAListTypeAttributes is off, for every value of
// an attribute with list values: kube-scheduler then compares scalars only,
// so such a value matches no other device (checkMatch) and conflicts with
// no scalar but with any other list value (checkDistinct).
const listValue = "list"

// valuesOf is attribute a as the constraints of the checker's gates see it.
func (k *check) valuesOf(a resourceapi.DeviceAttribute) valueSet {
	if !k.features.ListTypeAttributes && (len(a.IntValues) > 0 || len(a.BoolValues) > 0 || len(a.StringValues) > 0 || len(a.VersionValues) > 0) {
		return valueSet{listValue: true}
	}
	return toValueSet(a)
}

// toValueSet is an attribute's values as a set.
func toValueSet(a resourceapi.DeviceAttribute) valueSet {
	s := valueSet{}
	switch {
	case a.IntValue != nil:
		s["int:"+strconv.FormatInt(*a.IntValue, 10)] = true
	case a.BoolValue != nil:
		s["bool:"+strconv.FormatBool(*a.BoolValue)] = true
	case a.StringValue != nil:
		s["string:"+*a.StringValue] = true
	case a.VersionValue != nil:
		s["version:"+*a.VersionValue] = true
	}
	for _, v := range a.IntValues {
		s["int:"+strconv.FormatInt(v, 10)] = true
	}
	for _, v := range a.BoolValues {
		s["bool:"+strconv.FormatBool(v)] = true
	}
	for _, v := range a.StringValues {
		s["string:"+v] = true
	}
	for _, v := range a.VersionValues {
		s["version:"+v] = true
	}
	return s
}

// valuesFor is attribute name of a result's device as its request sees
// it: the request's derived attribute of that name (the last definition),
// evaluated with Kubernetes' CEL library, or the device's own attribute.
func (k *check) valuesFor(res result, name resourceapi.FullyQualifiedName) (valueSet, bool, error) {
	for i := len(res.req.derived) - 1; i >= 0; i-- {
		da := res.req.derived[i]
		if da.Name != name {
			continue
		}
		compiled := derivedCache.GetOrCompileDerivedAttribute(da.Expression)
		if compiled.Error != nil {
			return nil, false, compiled.Error
		}
		d := res.dev.Device
		a, _, err := compiled.EvaluateDerivedAttribute(context.Background(), dracel.Device{
			Driver: res.Driver, AllowMultipleAllocations: d.AllowMultipleAllocations, Attributes: d.Attributes, Capacity: d.Capacity,
		})
		if err != nil {
			return nil, false, err
		}
		if a == nil {
			return nil, false, nil
		}
		s := k.valuesOf(*a)
		return s, len(s) > 0, nil
	}
	a, ok := attributeValues(res.dev.Device.Attributes, res.Driver, name)
	if !ok {
		return nil, false, nil
	}
	s := k.valuesOf(a)
	return s, len(s) > 0, nil
}

// derivedCache compiles derived attribute expressions for valuesFor.
var derivedCache = dracel.NewCache(100, dracel.Features{EnableListTypeAttributes: true, EnableConsumableCapacity: true})

// constrained returns the results a constraint applies to: those of the
// named requests (a request name covers its subrequests), or all.
func (k *check) constrained(requests []string) []result {
	var out []result
	for _, res := range k.results {
		if res.dev == nil || res.req == nil {
			continue
		}
		if len(requests) == 0 || slices.Contains(requests, res.req.name) || slices.Contains(requests, res.req.parent) {
			out = append(out, res)
		}
	}
	return out
}

// checkConstraints checks matchAttribute (every device has the attribute
// and all value sets share at least one value) and distinctAttribute (every
// device has it and the value sets are pairwise disjoint).
func (k *check) checkConstraints() {
	for _, c := range k.claim.Spec.Devices.Constraints {
		switch {
		case c.MatchAttribute != nil:
			k.checkMatch(*c.MatchAttribute, k.constrained(c.Requests))
		case c.DistinctAttribute != nil:
			k.checkDistinct(*c.DistinctAttribute, k.constrained(c.Requests))
		}
	}
}

func (k *check) checkMatch(name resourceapi.FullyQualifiedName, results []result) {
	var common valueSet
	for i, res := range results {
		vals, ok, err := k.valuesFor(res, name)
		if err != nil {
			k.fail(RuleMatchAttribute, res.id.String(), "derived attribute %s cannot be computed: %v", name, err)
			return
		}
		if !ok {
			k.fail(RuleMatchAttribute, res.id.String(), "device has no attribute %s", name)
			return
		}
		if vals[listValue] && len(results) > 1 {
			k.fail(RuleMatchAttribute, res.id.String(), "attribute %s has list values, which match no other device while DRAListTypeAttributes is off", name)
			return
		}
		if i == 0 {
			common = vals
			continue
		}
		next := valueSet{}
		for v := range common {
			if vals[v] {
				next[v] = true
			}
		}
		if len(next) == 0 {
			k.fail(RuleMatchAttribute, res.id.String(), "attribute %s %v shares no value with the devices before it (%v)", name, sorted(vals), sorted(common))
			return
		}
		common = next
	}
}

// checkDistinct also holds, while DRAListTypeAttributes is off, what
// kube-scheduler does then: it takes a device with list values only as the
// first device of the constraint, so such a device must belong to the
// first of the constrained requests that got devices. (Which device of
// that request kube-scheduler places first is not checked.)
func (k *check) checkDistinct(name resourceapi.FullyQualifiedName, results []result) {
	var seen []valueSet
	first := -1
	for _, res := range results {
		if i := k.requestIndex(res.req.parent); first < 0 || i < first {
			first = i
		}
	}
	for _, res := range results {
		vals, ok, err := k.valuesFor(res, name)
		if err != nil {
			k.fail(RuleDistinctAttribute, res.id.String(), "derived attribute %s cannot be computed: %v", name, err)
			return
		}
		if !ok {
			k.fail(RuleDistinctAttribute, res.id.String(), "device has no attribute %s", name)
			return
		}
		if vals[listValue] && k.requestIndex(res.req.parent) != first {
			k.fail(RuleDistinctAttribute, res.id.String(), "attribute %s has list values, which kube-scheduler takes only on the first device of the constraint while DRAListTypeAttributes is off", name)
			return
		}
		for _, other := range seen {
			for v := range vals {
				if other[v] {
					k.fail(RuleDistinctAttribute, res.id.String(), "attribute %s value %s is also on another device", name, v)
					return
				}
			}
		}
		seen = append(seen, vals)
	}
}

// requestIndex is the position of the top-level request name in the claim.
func (k *check) requestIndex(name string) int {
	return slices.IndexFunc(k.claim.Spec.Devices.Requests, func(r resourceapi.DeviceRequest) bool { return r.Name == name })
}

func sorted(s valueSet) []string {
	out := make([]string, 0, len(s))
	for v := range s {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}
