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
// The comparison is reflect.DeepEqual, as upstream's allocator tests make
// it: it also sees what an equality by meaning would miss, such as a
// resource.Quantity that was converted to another internal form or had its
// string cached by a method called through a pointer into the object.
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

// changed returns an error naming the first object of in and claims that
// differs from the copy, with the difference; nil when none does. It
// compares a fresh copy of them, not the objects themselves: DeepCopy
// rebuilds a resource.Quantity's big integer, so a copy is never
// reflect.DeepEqual to an original whose zero value keeps an empty rather
// than a nil digit slice (as the generator's exact arithmetic leaves some),
// while everything else a copy keeps as it was.
func (c inputCopy) changed(in allocator.Inputs, claims []*resourceapi.ResourceClaim) error {
	now := copyInputs(in, claims)
	type pair struct {
		what        string
		want, got   any
		wantN, gotN int
	}
	pairs := []pair{
		{"slices", c.in.Slices, now.in.Slices, len(c.in.Slices), len(now.in.Slices)},
		{"classes", c.in.Classes, now.in.Classes, len(c.in.Classes), len(now.in.Classes)},
		{"nodes", c.in.Nodes, now.in.Nodes, len(c.in.Nodes), len(now.in.Nodes)},
		{"allocated claims", c.in.Allocated, now.in.Allocated, len(c.in.Allocated), len(now.in.Allocated)},
		{"taint rules", c.in.TaintRules, now.in.TaintRules, len(c.in.TaintRules), len(now.in.TaintRules)},
		{"features", c.in.Features, now.in.Features, 0, 0},
		{"claims", c.claims, now.claims, len(c.claims), len(now.claims)},
	}
	for _, p := range pairs {
		if p.wantN != p.gotN {
			return fmt.Errorf("%s: %d objects became %d", p.what, p.wantN, p.gotN)
		}
		want, got := reflect.ValueOf(p.want), reflect.ValueOf(p.got)
		if want.Kind() != reflect.Slice {
			if !reflect.DeepEqual(p.want, p.got) {
				return fmt.Errorf("%s changed%s", p.what, where(reflect.ValueOf(p.want), reflect.ValueOf(p.got)))
			}
			continue
		}
		for i := 0; i < want.Len(); i++ {
			w, g := want.Index(i).Interface(), got.Index(i).Interface()
			if !reflect.DeepEqual(w, g) {
				return fmt.Errorf("%s[%d] changed%s", p.what, i, where(reflect.ValueOf(w), reflect.ValueOf(g)))
			}
		}
	}
	return nil
}

// where says where a and b differ, for an error message.
func where(a, b reflect.Value) string {
	if d := firstDifference(a, b, ""); d != "" {
		return " at " + d
	}
	return ""
}

// firstDifference is the path of the first field where a and b differ,
// unexported fields included (reflect.DeepEqual compares them too), with
// both values; "" when they do not differ.
func firstDifference(a, b reflect.Value, path string) string {
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
		if a.Kind() == reflect.Pointer && a.Pointer() == b.Pointer() {
			return ""
		}
		return firstDifference(a.Elem(), b.Elem(), path)
	case reflect.Struct:
		for i := 0; i < a.NumField(); i++ {
			if d := firstDifference(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name); d != "" {
				return d
			}
		}
		return ""
	case reflect.Slice, reflect.Array:
		if a.Kind() == reflect.Slice && a.IsNil() != b.IsNil() {
			return fmt.Sprintf("%s: nil %v, now nil %v", path, a.IsNil(), b.IsNil())
		}
		if a.Len() != b.Len() {
			return fmt.Sprintf("%s: length %d, now %d", path, a.Len(), b.Len())
		}
		for i := 0; i < a.Len(); i++ {
			if d := firstDifference(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i)); d != "" {
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
			if d := firstDifference(a.MapIndex(k), bv, fmt.Sprintf("%s[%v]", path, k)); d != "" {
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
		return fmt.Sprintf("%s: a %s differs", path, a.Kind())
	}
	return ""
}
