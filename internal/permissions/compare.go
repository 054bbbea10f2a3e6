package permissions

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Use is what the audit shows of one verb on one resource granted by one
// marker.
type Use struct {
	Marker                 Marker
	Group, Resource, Verb  string
	Count                  int
	Namespaces             []string
	namespaceSet, nameSeen map[string]bool
}

// Key is "verb group/resource".
func (u Use) Key() string { return u.Verb + " " + u.Group + "/" + u.Resource }

// Report is the comparison of the markers with the audit log.
type Report struct {
	// Uses has one entry per verb and resource of every marker, in marker
	// order.
	Uses []Use
	// Unused are the uses with no request whose marker does not say why
	// it is held: the findings.
	Unused []Use
	// Ungranted are allowed requests no marker grants (the API server's
	// default roles allow some to everyone: SelfSubjectReviews, discovery).
	Ungranted []Request
	// Refused are requests the authorizer refused.
	Refused []Request
}

// Compare matches every request of the audit log with the markers that
// grant it. namespaces maps a marker's namespace (config/rbac's "system")
// to the one it is installed in.
func Compare(markers []Marker, reqs []Request, namespaces map[string]string) Report {
	var rep Report
	for _, m := range markers {
		for _, g := range m.Groups {
			for _, r := range m.Resources {
				for _, v := range m.Verbs {
					rep.Uses = append(rep.Uses, Use{Marker: m, Group: g, Resource: r, Verb: v, namespaceSet: map[string]bool{}})
				}
			}
		}
	}
	for _, req := range reqs {
		if !req.Allowed {
			rep.Refused = append(rep.Refused, req)
			continue
		}
		granted := false
		for i := range rep.Uses {
			u := &rep.Uses[i]
			if !grants(u, req, namespaces) {
				continue
			}
			granted = true
			u.Count++
			ns := req.Namespace
			if ns == "" {
				ns = "(cluster)"
			}
			u.namespaceSet[ns] = true
		}
		if !granted {
			rep.Ungranted = append(rep.Ungranted, req)
		}
	}
	for i := range rep.Uses {
		u := &rep.Uses[i]
		for ns := range u.namespaceSet {
			u.Namespaces = append(u.Namespaces, ns)
		}
		sort.Strings(u.Namespaces)
		if u.Count == 0 && !u.Marker.Held() {
			rep.Unused = append(rep.Unused, *u)
		}
	}
	return rep
}

// grants says whether a marker's verb on a resource covers the request, as
// RBAC does: same verb, group and resource (with subresource), a listed
// name if the marker lists names, and the marker's namespace if it is a
// Role's.
func grants(u *Use, req Request, namespaces map[string]string) bool {
	if u.Verb != "*" && !slices.Contains(req.Verbs(), u.Verb) {
		return false
	}
	if u.Group != req.Group && u.Group != "*" {
		return false
	}
	res := req.Resource
	if req.Subresource != "" {
		res += "/" + req.Subresource
	}
	if u.Resource != res && u.Resource != "*" {
		return false
	}
	if len(u.Marker.ResourceNames) > 0 && !slices.Contains(u.Marker.ResourceNames, req.Name) {
		return false
	}
	if u.Marker.Namespace != "" {
		ns, ok := namespaces[u.Marker.Namespace]
		if !ok {
			ns = u.Marker.Namespace
		}
		if req.Namespace != ns {
			return false
		}
	}
	return true
}

// Findings describes the unused grants, one line each, or "" when there
// are none.
func (r Report) Findings() string {
	var b strings.Builder
	for _, u := range r.Unused {
		fmt.Fprintf(&b, "%s: %s is granted but the e2e runs never used it, and the marker's comment does not say why it is held (a sentence starting with \"Held\"): %q\n",
			u.Marker.Where(), u.Key(), u.Marker.Doc)
	}
	return b.String()
}

// Table is the report as a Markdown table: each verb of each marker, how
// often the operator used it and where, and the marker.
func (r Report) Table() string {
	var b strings.Builder
	b.WriteString("| verb | resource | names / namespace | requests | namespaces | marker | held |\n|---|---|---|---|---|---|---|\n")
	for _, u := range r.Uses {
		scope := strings.Join(u.Marker.ResourceNames, ", ")
		if u.Marker.Namespace != "" {
			scope = strings.TrimPrefix(scope+" in "+u.Marker.Namespace, " ")
		}
		nss := u.Namespaces
		if len(nss) > 4 {
			nss = append(slices.Clone(nss[:4]), fmt.Sprintf("+%d", len(u.Namespaces)-4))
		}
		held := ""
		if u.Marker.Held() {
			held = "held"
		}
		group := u.Group
		if group == "" {
			group = "core"
		}
		fmt.Fprintf(&b, "| %s | %s/%s | %s | %d | %s | %s | %s |\n", u.Verb, group, u.Resource, scope, u.Count, strings.Join(nss, " "), u.Marker.Where(), held)
	}
	return b.String()
}
