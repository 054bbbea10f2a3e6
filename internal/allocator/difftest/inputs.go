package difftest

import (
	"fmt"
	"reflect"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
)

// inputCopy is a deep copy of everything an engine is given for one case:
// allocator.Inputs says engines must not modify any of it, and Run checks
// that they do not after every call.
//
// The comparison is field by field, unexported fields included, as
// reflect.DeepEqual and upstream's allocator tests make it: it also sees
// what an equality by meaning would miss, such as a resource.Quantity that
// was converted to another internal form or had its string cached by a
// method called through a pointer into the object.
type inputCopy struct {
	in     allocator.Inputs
	claims []*resourceapi.ResourceClaim
}

func copyInputs(in allocator.Inputs, claims []*resourceapi.ResourceClaim) inputCopy {
	c := inputCopy{in: allocator.Inputs{Features: in.Features}}
	for _, s := range in.Slices {
		c.in.Slices = append(c.in.Slices, s.DeepCopy())
	}
	for _, cl := range in.Classes {
		c.in.Classes = append(c.in.Classes, cl.DeepCopy())
	}
	for _, n := range in.Nodes {
		c.in.Nodes = append(c.in.Nodes, n.DeepCopy())
	}
	for _, a := range in.Allocated {
		c.in.Allocated = append(c.in.Allocated, a.DeepCopy())
	}
	for i := range in.TaintRules {
		c.in.TaintRules = append(c.in.TaintRules, *in.TaintRules[i].DeepCopy())
	}
	if in.Features != nil {
		f := *in.Features
		c.in.Features = &f
	}
	for _, cl := range claims {
		c.claims = append(c.claims, cl.DeepCopy())
	}
	return c
}

// changed returns an error naming the first field of in and claims that
// differs from the copy, "slices[1].Spec.Devices[0].Name: "a", now "b"";
// nil when none does.
func (c inputCopy) changed(in allocator.Inputs, claims []*resourceapi.ResourceClaim) error {
	pairs := []struct {
		what      string
		want, got any
	}{
		{"slices", c.in.Slices, in.Slices},
		{"classes", c.in.Classes, in.Classes},
		{"nodes", c.in.Nodes, in.Nodes},
		{"allocated claims", c.in.Allocated, in.Allocated},
		{"taint rules", c.in.TaintRules, in.TaintRules},
		{"features", c.in.Features, in.Features},
		{"claims", c.claims, claims},
	}
	for _, p := range pairs {
		if d := firstDifference(reflect.ValueOf(p.want), reflect.ValueOf(p.got), "", true); d != "" {
			return fmt.Errorf("%s%s", p.what, d)
		}
	}
	return nil
}

// firstDifference is the path of the first field where a and b differ,
// with both values; "" when they do not. Unexported fields count too, as
// for reflect.DeepEqual, with one exception: there (exported false) a nil
// and an empty slice are alike, because DeepCopy rebuilds a
// resource.Quantity's big integer, whose zero may keep either, so a copy
// would otherwise differ from its original.
func firstDifference(a, b reflect.Value, path string, exported bool) string {
	if !a.IsValid() || !b.IsValid() {
		if a.IsValid() != b.IsValid() {
			return path + ": set, now unset (or the reverse)"
		}
		return ""
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			if a.IsNil() != b.IsNil() {
				return fmt.Sprintf("%s: nil %v, now nil %v", path, a.IsNil(), b.IsNil())
			}
			return ""
		}
		return firstDifference(a.Elem(), b.Elem(), path, exported)
	case reflect.Struct:
		for i := 0; i < a.NumField(); i++ {
			f := a.Type().Field(i)
			if d := firstDifference(a.Field(i), b.Field(i), path+"."+f.Name, exported && f.IsExported()); d != "" {
				return d
			}
		}
		return ""
	case reflect.Slice, reflect.Array:
		if a.Kind() == reflect.Slice && a.IsNil() != b.IsNil() && (exported || a.Len() > 0 || b.Len() > 0) {
			return fmt.Sprintf("%s: nil %v, now nil %v", path, a.IsNil(), b.IsNil())
		}
		if a.Len() != b.Len() {
			return fmt.Sprintf("%s: length %d, now %d", path, a.Len(), b.Len())
		}
		for i := 0; i < a.Len(); i++ {
			if d := firstDifference(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i), exported); d != "" {
				return d
			}
		}
		return ""
	case reflect.Map:
		if a.IsNil() != b.IsNil() {
			return fmt.Sprintf("%s: nil %v, now nil %v", path, a.IsNil(), b.IsNil())
		}
		if a.Len() != b.Len() {
			return fmt.Sprintf("%s: %d entries, now %d", path, a.Len(), b.Len())
		}
		for _, k := range a.MapKeys() {
			bv := b.MapIndex(k)
			if !bv.IsValid() {
				return fmt.Sprintf("%s[%v]: removed", path, k)
			}
			if d := firstDifference(a.MapIndex(k), bv, fmt.Sprintf("%s[%v]", path, k), exported); d != "" {
				return d
			}
		}
		return ""
	case reflect.String:
		if a.String() != b.String() {
			return fmt.Sprintf("%s: %q, now %q", path, a.String(), b.String())
		}
	case reflect.Bool:
		if a.Bool() != b.Bool() {
			return fmt.Sprintf("%s: %v, now %v", path, a.Bool(), b.Bool())
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if a.Int() != b.Int() {
			return fmt.Sprintf("%s: %d, now %d", path, a.Int(), b.Int())
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if a.Uint() != b.Uint() {
			return fmt.Sprintf("%s: %d, now %d", path, a.Uint(), b.Uint())
		}
	case reflect.Float32, reflect.Float64:
		if a.Float() != b.Float() {
			return fmt.Sprintf("%s: %v, now %v", path, a.Float(), b.Float())
		}
	default:
		return fmt.Sprintf("%s: a %s, which this check cannot compare", path, a.Kind())
	}
	return ""
}
