package permissions

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/drastack/drastack/internal/admissionpolicy"
)

// fences names, per API group and resource, the admission policies that
// narrow the operator's writes to it (the fence of internal/admissionpolicy,
// whose comments say how).
var fences = map[string][]string{
	"/pods":                                                      {admissionpolicy.PodGates},
	"/namespaces":                                                {admissionpolicy.OwnedObjects, admissionpolicy.DriverNamespace},
	"/serviceaccounts":                                           {admissionpolicy.OwnedObjects},
	"apps/daemonsets":                                            {admissionpolicy.OwnedObjects},
	"apps/deployments":                                           {admissionpolicy.OwnedObjects},
	"rbac.authorization.k8s.io/roles":                            {admissionpolicy.OwnedObjects},
	"rbac.authorization.k8s.io/clusterroles":                     {admissionpolicy.OwnedObjects},
	"rbac.authorization.k8s.io/rolebindings":                     {admissionpolicy.OwnedObjects, admissionpolicy.RoleBindings},
	"rbac.authorization.k8s.io/clusterrolebindings":              {admissionpolicy.OwnedObjects, admissionpolicy.RoleBindings},
	"resource.k8s.io/deviceclasses":                              {admissionpolicy.OwnedObjects},
	"resource.k8s.io/devicetaintrules":                           {admissionpolicy.OwnedObjects},
	"resource.k8s.io/resourceclaims":                             {admissionpolicy.ClaimsAndSlices},
	"resource.k8s.io/resourceslices":                             {admissionpolicy.ClaimsAndSlices},
	"drastack.io/drastacks":                                      {admissionpolicy.StackFinalizers},
	"admissionregistration.k8s.io/mutatingwebhookconfigurations": {admissionpolicy.WebhookCABundle},
}

// unfenced says why a resource the operator writes has no policy.
var unfenced = map[string]string{
	"admissionregistration.k8s.io/validatingadmissionpolicies":       "none possible: the API server applies no admission policy to admission policies",
	"admissionregistration.k8s.io/validatingadmissionpolicybindings": "none possible: the API server applies no admission policy to admission policies",
	"resource.k8s.io/resourceclaims/status":                          "none: the allocation is the operator's job",
	"resource.k8s.io/resourceclaims/binding":                         "none: the allocation is the operator's job",
	"/pods/status":                                                   "none: the GangPlaced condition of the gang members it places (a policy cannot tell one condition from another in a status patch cheaply)",
	"drastack.io/drastacks/status":                                   "none: the operator's own report",
	"drastack.io/devicepools":                                        "none: the operator's own objects",
	"drastack.io/devicepools/status":                                 "none: the operator's own report",
	"events.k8s.io/events":                                           "none: Events of its objects, in their namespaces",
	"/events":                                                        "none: Events of its objects, in their namespaces",
	"coordination.k8s.io/leases":                                     "RBAC: its own namespace, its leases by name",
	"apiextensions.k8s.io/customresourcedefinitions":                 "RBAC: patch and delete only of the definitions the profiles install, by name (a create cannot be limited by name); the driver lifecycle never adopts a definition it did not create",
}

// FencedBy names what narrows the operator's writes to a resource: the
// policies, or why there is none.
func FencedBy(group, resource string) string {
	key := group + "/" + resource
	for _, gr := range admissionpolicy.HeldResources {
		if gr.Group == group && gr.Resource == resource {
			return admissionpolicy.HeldToGrant + " (never written)"
		}
	}
	if p, ok := fences[key]; ok {
		return strings.Join(p, ", ")
	}
	if why, ok := unfenced[key]; ok {
		return why
	}
	return ""
}

// DocTable is the table of docs/permissions.md: every permission of the
// operator, grouped by API group and resource, with the code that needs
// each verb (the markers' comments) and what fences its writes.
func DocTable(markers []Marker) string {
	type row struct {
		group, resource string
		lines           []string
		verbs           []string
	}
	rows := map[string]*row{}
	var keys []string
	for _, m := range markers {
		for _, g := range m.Groups {
			for _, r := range m.Resources {
				key := g + "/" + r
				rw, ok := rows[key]
				if !ok {
					rw = &row{group: g, resource: r}
					rows[key] = rw
					keys = append(keys, key)
				}
				scope := ""
				if len(m.ResourceNames) > 0 {
					scope = " (only " + strings.Join(m.ResourceNames, ", ") + ")"
				}
				if m.Namespace != "" {
					scope += " (its own namespace)"
				}
				rw.lines = append(rw.lines, fmt.Sprintf("%s%s: %s", strings.Join(m.Verbs, ", "), scope, escape(m.Doc)))
				for _, v := range m.Verbs {
					if !slices.Contains(rw.verbs, v) {
						rw.verbs = append(rw.verbs, v)
					}
				}
			}
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("| resource | verbs | who needs it, and why | writes fenced by |\n|---|---|---|---|\n")
	for _, k := range keys {
		rw := rows[k]
		group := rw.group
		if group == "" {
			group = "core"
		}
		fence := "reads only: no admission policy sees them"
		if slices.ContainsFunc(rw.verbs, IsWrite) {
			fence = FencedBy(rw.group, rw.resource)
		}
		fmt.Fprintf(&b, "| `%s/%s` | %s | %s | %s |\n", group, rw.resource, strings.Join(rw.verbs, ", "), strings.Join(rw.lines, "<br>"), fence)
	}
	return b.String()
}

// escape keeps a comment inside a Markdown table cell.
func escape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// Markers around the generated table in docs/permissions.md.
const (
	DocBegin = "<!-- BEGIN GENERATED: go test ./internal/permissions -run TestDocTable -update -->"
	DocEnd   = "<!-- END GENERATED -->"
)
