package topology

import (
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
)

// checkExtraAttributes validates the extra attributes of a Spec and returns
// them keyed by their normalized name (a name in the driver's domain loses
// the domain, as the API treats both spellings as one attribute), with the
// number of attribute values they add to every device.
func checkExtraAttributes(driver string, attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) (map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, int, []error) {
	var errs []error
	out := make(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, len(attrs))
	spelled := map[resourceapi.QualifiedName]resourceapi.QualifiedName{}
	values := 0
	names := make([]resourceapi.QualifiedName, 0, len(attrs))
	for name := range attrs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		norm, err := normalizeAttributeName(driver, name)
		if err != nil {
			errs = append(errs, fmt.Errorf("attribute %q: %w", name, err))
			continue
		}
		if slices.Contains(reservedAttributes, norm) {
			errs = append(errs, fmt.Errorf("attribute %q: the name is written by the multi-host publisher itself", name))
			continue
		}
		if other, dup := spelled[norm]; dup {
			errs = append(errs, fmt.Errorf("attributes %q and %q: the same attribute of driver %s spelled twice", other, name, driver))
			continue
		}
		spelled[norm] = name
		attr := attrs[name]
		n, err := checkAttributeValue(attr)
		if err != nil {
			errs = append(errs, fmt.Errorf("attribute %q: %w", name, err))
			continue
		}
		values += n
		out[norm] = *attr.DeepCopy()
	}
	return out, values, errs
}

// normalizeAttributeName checks a qualified name ("id" or "domain/id") and
// drops the domain when it is the driver's.
func normalizeAttributeName(driver string, name resourceapi.QualifiedName) (resourceapi.QualifiedName, error) {
	domain, id, qualified := strings.Cut(string(name), "/")
	if !qualified {
		id, domain = domain, ""
	}
	if qualified {
		if msgs := content.IsDNS1123Subdomain(domain); len(msgs) > 0 || len(domain) > maxDomainLength {
			return "", fmt.Errorf("domain %q must be a DNS subdomain of at most %d characters", domain, maxDomainLength)
		}
	}
	if msgs := content.IsCIdentifier(id); len(msgs) > 0 || len(id) > maxIDLength {
		return "", fmt.Errorf("%q must be a C identifier of at most %d characters", id, maxIDLength)
	}
	if domain == "" || domain == driver {
		return resourceapi.QualifiedName(id), nil
	}
	return name, nil
}

// checkAttributeValue checks that exactly one value field is set, that
// strings fit, and returns how many values the attribute counts toward the
// per-device limit (one for a scalar, the length of a list).
func checkAttributeValue(a resourceapi.DeviceAttribute) (int, error) {
	set := 0
	values := 1
	for _, isSet := range []bool{a.IntValue != nil, a.BoolValue != nil, a.StringValue != nil, a.VersionValue != nil} {
		if isSet {
			set++
		}
	}
	lists := [][]string{a.StringValues, a.VersionValues}
	for _, isSet := range []bool{a.IntValues != nil, a.BoolValues != nil, a.StringValues != nil, a.VersionValues != nil} {
		if isSet {
			set++
		}
	}
	if set != 1 {
		return 0, fmt.Errorf("exactly one value must be set, found %d", set)
	}
	if n := len(a.IntValues) + len(a.BoolValues) + len(a.StringValues) + len(a.VersionValues); n > 0 {
		values = n
	} else if a.IntValues != nil || a.BoolValues != nil || a.StringValues != nil || a.VersionValues != nil {
		return 0, fmt.Errorf("a list value must not be empty")
	}
	for _, s := range []*string{a.StringValue, a.VersionValue} {
		if s != nil && len(*s) > maxAttributeValueLength {
			return 0, fmt.Errorf("value is longer than %d characters", maxAttributeValueLength)
		}
	}
	for _, list := range lists {
		for _, s := range list {
			if len(s) > maxAttributeValueLength {
				return 0, fmt.Errorf("list value %q is longer than %d characters", s, maxAttributeValueLength)
			}
		}
	}
	return values, nil
}
