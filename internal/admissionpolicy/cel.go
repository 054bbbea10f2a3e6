package admissionpolicy

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// CEL building blocks. Every expression the policies use is assembled here
// from Go values, so that a key or a field list is written once.

// str is a CEL string literal.
func str(s string) string { return strconv.Quote(s) }

// strList is a CEL list of string literals.
func strList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = str(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// label is the value of a label of the object expression obj, "" when it
// has none.
// canary says whether obj is one of the join barrier's canary objects
// (internal/handover: labelled component canary and managed by drastack).
func canary(obj string) string {
	return fmt.Sprintf("(%s == %s && %s == %s)", label(obj, labelComponent), str(componentCanary), label(obj, labelManagedBy), str(managedByValue))
}

// canaryIn says whether the request writes a canary object in the
// operator's namespace ns: the new object on a create, the old one on a
// delete.
func canaryIn(ns string) string {
	return fmt.Sprintf(`request.?namespace.orValue("") == %s && (request.operation == "DELETE" ? %s : %s)`, str(ns), canary("oldObject"), canary("object"))
}

func label(obj, key string) string {
	return fmt.Sprintf("%s.metadata.?labels[?%s].orValue(\"\")", obj, str(key))
}

// annotation is the value of an annotation of the metadata expression
// meta, and whether it is there.
func hasAnnotation(meta, key string) string {
	return fmt.Sprintf("%s.?annotations[?%s].hasValue()", meta, str(key))
}

// isUser matches requests of one user.
func isUser(username string) string {
	return "request.userInfo.username == " + str(username)
}

// jsonFields are the JSON names of the fields of the struct type t (its
// inline members' fields included), but except. Fields a future API
// version adds are not known to this build; the policies that compare
// objects field by field say so.
func jsonFields(t reflect.Type, except ...string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" && strings.Contains(opts, "inline") || f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				out = append(out, jsonFields(ft, except...)...)
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		if !slices.Contains(except, name) {
			out = append(out, name)
		}
	}
	return out
}

// changedFields is a CEL list of the names (with prefix) of the fields
// whose values differ between the object expressions a and b. A field
// absent from both is equal; absent from one only is a change.
func changedFields(a, b, prefix string, fields []string) string {
	parts := make([]string, len(fields))
	for i, f := range fields {
		parts[i] = fmt.Sprintf("%s.?%s == %s.?%s ? \"\" : %s", a, f, b, f, str(prefix+f))
	}
	return "[" + strings.Join(parts, ", ") + "].filter(f, f != \"\")"
}

// changedFieldsBut is changedFields for metadata (a and b are metadata
// expressions) where the annotation key may change: a change of only that
// annotation is no change of "annotations".
func changedFieldsBut(a, b, prefix string, fields []string, key string) string {
	parts := make([]string, len(fields))
	for i, f := range fields {
		if f != "annotations" {
			parts[i] = fmt.Sprintf("%s.?%s == %s.?%s ? \"\" : %s", a, f, b, f, str(prefix+f))
			continue
		}
		na := a + ".?annotations.orValue({})"
		oa := b + ".?annotations.orValue({})"
		parts[i] = fmt.Sprintf("(%s.all(k, k == %s || (k in %s && %s[k] == %s[k])) && %s.all(k, k == %s || k in %s)) ? \"\" : %s",
			na, str(key), oa, oa, na, oa, str(key), na, str(prefix+f))
	}
	return "[" + strings.Join(parts, ", ") + "].filter(f, f != \"\")"
}

// metadataFields are the metadata fields a client can change on update
// (name, namespace and uid cannot change; resourceVersion, generation and
// managedFields are the API server's).
var metadataFields = []string{"labels", "annotations", "finalizers", "ownerReferences"}
