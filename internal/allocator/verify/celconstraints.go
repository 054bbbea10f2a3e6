package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/blang/semver/v4"
	resourceapi "k8s.io/api/resource/v1"
	apiservercel "k8s.io/apiserver/pkg/cel"

	"github.com/drastack/drastack/internal/allocator"
)

// celConstraint is one entry of the annotation.
type celConstraint struct {
	Requests   []string `json:"requests"`
	Expression string   `json:"expression"`
}

// parseCELConstraints reads the annotation strictly: unknown fields and
// empty expressions are errors.
func parseCELConstraints(value string) ([]celConstraint, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(value)))
	dec.DisallowUnknownFields()
	var out []celConstraint
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("not a JSON array of {requests, expression}: %w", err)
	}
	for i, c := range out {
		if strings.TrimSpace(c.Expression) == "" {
			return nil, fmt.Errorf("entry %d has no expression", i)
		}
	}
	return out, nil
}

// checkCELConstraints evaluates every constraint of the annotation on the
// devices of its requests (all requests when none are named), in result
// order. A constraint whose requests got no devices (an unchosen
// subrequest) has nothing to constrain and holds.
func (k *check) checkCELConstraints() {
	value, ok := k.claim.Annotations[allocator.CELConstraintsAnnotation]
	if !ok {
		return
	}
	constraints, err := parseCELConstraints(value)
	if err != nil {
		k.fail(RuleCELConstraint, "", "annotation %s: %v", allocator.CELConstraintsAnnotation, err)
		return
	}
	for i, c := range constraints {
		devs := k.constrained(c.Requests)
		if len(devs) == 0 {
			continue
		}
		ok, err := evalConstraint(c.Expression, devs)
		switch {
		case err != nil:
			k.fail(RuleCELConstraint, "", "constraint #%d: %v", i, err)
		case !ok:
			k.fail(RuleCELConstraint, "", "constraint #%d (%s) is false for devices %s", i, c.Expression, deviceList(devs))
		}
	}
}

func evalConstraint(expr string, devs []result) (bool, error) {
	prog, err := compileConstraint(expr)
	if err != nil {
		return false, err
	}
	list := make([]any, 0, len(devs))
	for _, d := range devs {
		v, err := celDevice(d.Driver, d.dev.Device)
		if err != nil {
			return false, fmt.Errorf("device %s: %w", d.id, err)
		}
		list = append(list, v)
	}
	out, _, err := prog.ContextEval(context.Background(), map[string]any{"devices": list})
	if err != nil {
		return false, fmt.Errorf("evaluate: %w", err)
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("expression returned %s, want bool", out.Type().TypeName())
	}
	return b, nil
}

// celDevice is a device as CEL constraints see it: attributes and capacity
// by domain (the driver's domain for unqualified names), lists as lists.
func celDevice(driver string, d *resourceapi.Device) (map[string]any, error) {
	attrs := map[string]any{}
	for name, a := range d.Attributes {
		v, err := attributeValue(a)
		if err != nil {
			return nil, fmt.Errorf("attribute %s: %w", name, err)
		}
		domain, id := splitName(string(name), driver)
		if attrs[domain] == nil {
			attrs[domain] = map[string]any{}
		}
		attrs[domain].(map[string]any)[id] = v
	}
	capacity := map[string]any{}
	for name, c := range d.Capacity {
		domain, id := splitName(string(name), driver)
		if capacity[domain] == nil {
			capacity[domain] = map[string]any{}
		}
		q := c.Value.DeepCopy()
		capacity[domain].(map[string]any)[id] = apiservercel.Quantity{Quantity: &q}
	}
	return map[string]any{
		"driver":     driver,
		"attributes": newDefaultMap(attrs),
		"capacity":   newDefaultMap(capacity),
	}, nil
}

func splitName(name, driver string) (string, string) {
	if domain, id, ok := strings.Cut(name, "/"); ok {
		return domain, id
	}
	return driver, name
}

func attributeValue(a resourceapi.DeviceAttribute) (any, error) {
	switch {
	case a.IntValue != nil:
		return *a.IntValue, nil
	case a.BoolValue != nil:
		return *a.BoolValue, nil
	case a.StringValue != nil:
		return *a.StringValue, nil
	case a.VersionValue != nil:
		v, err := semver.Parse(*a.VersionValue)
		if err != nil {
			return nil, fmt.Errorf("parse version: %w", err)
		}
		return apiservercel.Semver{Version: v}, nil
	case a.IntValues != nil:
		return a.IntValues, nil
	case a.BoolValues != nil:
		return a.BoolValues, nil
	case a.StringValues != nil:
		return a.StringValues, nil
	case a.VersionValues != nil:
		out := make([]any, len(a.VersionValues))
		for i, s := range a.VersionValues {
			v, err := semver.Parse(s)
			if err != nil {
				return nil, fmt.Errorf("parse version: %w", err)
			}
			out[i] = apiservercel.Semver{Version: v}
		}
		return out, nil
	}
	return nil, fmt.Errorf("attribute has no value")
}

func deviceList(devs []result) string {
	ids := make([]string, len(devs))
	for i, d := range devs {
		ids[i] = d.id.String()
	}
	return strings.Join(ids, ",")
}
