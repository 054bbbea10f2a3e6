package bundle

import (
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// defaultContainerAnnotation names the main container of a pod template;
// kubebuilder's scaffold sets it on the manager.
const defaultContainerAnnotation = "kubectl.kubernetes.io/default-container"

// managerContainer is the container whose image becomes the bundle image
// when the template does not name its default container.
const managerContainer = "manager"

// installPlan is spec.install.spec of the CSV plus the input objects it
// absorbed, which are therefore not written as bundle files.
type installPlan struct {
	deployments        []interface{}
	permissions        []interface{}
	clusterPermissions []interface{}
	folded             map[*unstructured.Unstructured]bool
}

// accountRef identifies a ServiceAccount. An empty namespace matches any
// namespace, as kustomize leaves it empty when no namespace is configured.
type accountRef struct{ namespace, name string }

func (a accountRef) matches(b accountRef) bool {
	return a.name == b.name && (a.namespace == "" || b.namespace == "" || a.namespace == b.namespace)
}

// roleKey identifies a Role or ClusterRole (namespace empty).
type roleKey struct{ kind, namespace, name string }

// planInstall folds the Deployments, their ServiceAccounts and the RBAC
// bound to those ServiceAccounts into the CSV's install strategy, the way
// OLM expects: a ClusterRoleBinding's rules become clusterPermissions, a
// RoleBinding's rules become (namespaced) permissions, both keyed by
// serviceAccountName. RBAC that also serves other subjects stays a file.
func planInstall(deployments, objs []*unstructured.Unstructured, image string) (*installPlan, error) {
	plan := &installPlan{folded: map[*unstructured.Unstructured]bool{}}
	if len(deployments) == 0 {
		return nil, fmt.Errorf("no Deployment in the input: the bundle needs the manager")
	}

	var accounts []accountRef
	imageSet := 0
	sorted := append([]*unstructured.Unstructured(nil), deployments...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].GetName() < sorted[j].GetName() })
	for _, d := range sorted {
		entry, account, set, err := deploymentEntry(d, image)
		if err != nil {
			return nil, err
		}
		imageSet += set
		plan.deployments = append(plan.deployments, entry)
		accounts = append(accounts, account)
	}
	if imageSet == 0 {
		return nil, fmt.Errorf("no Deployment has a %q container or a %s annotation: cannot set the image", managerContainer, defaultContainerAnnotation)
	}
	isManager := func(a accountRef) bool {
		for _, m := range accounts {
			if m.matches(a) {
				return true
			}
		}
		return false
	}

	roles := map[roleKey]*unstructured.Unstructured{}
	for _, obj := range objs {
		switch obj.GetKind() {
		case "ServiceAccount":
			if isManager(accountRef{obj.GetNamespace(), obj.GetName()}) {
				plan.folded[obj] = true // OLM creates it from serviceAccountName
			}
		case "Role", "ClusterRole":
			if obj.GroupVersionKind().Group == rbacGroup {
				roles[keyOf(obj)] = obj
			}
		}
	}

	// A binding is folded when it binds only manager accounts to a role that
	// is in the input; a role is folded when only folded bindings use it.
	type grant struct {
		account accountRef
		cluster bool
		role    roleKey
	}
	var grants []grant
	usedByFiles := map[roleKey]bool{}
	for _, obj := range objs {
		kind := obj.GetKind()
		if obj.GroupVersionKind().Group != rbacGroup || (kind != "RoleBinding" && kind != "ClusterRoleBinding") {
			continue
		}
		role, subjects, nonAccounts, err := readBinding(obj)
		if err != nil {
			return nil, err
		}
		managed := 0
		for _, s := range subjects {
			if isManager(s) {
				managed++
			}
		}
		_, known := roles[role]
		if managed == 0 || !known {
			usedByFiles[role] = true
			continue
		}
		if managed != len(subjects) || nonAccounts > 0 {
			return nil, fmt.Errorf("%s %q binds the manager's service account together with other subjects: split it so the manager's part can move into the CSV", kind, obj.GetName())
		}
		plan.folded[obj] = true
		for _, s := range subjects {
			grants = append(grants, grant{account: s, cluster: kind == "ClusterRoleBinding", role: role})
		}
	}
	for key, role := range roles {
		if !usedByFiles[key] {
			for _, g := range grants {
				if g.role == key {
					plan.folded[role] = true
				}
			}
		}
	}

	type acc struct {
		rules []interface{}
		seen  map[roleKey]bool
	}
	cluster, namespaced := map[string]*acc{}, map[string]*acc{}
	for _, g := range grants {
		target := namespaced
		if g.cluster {
			target = cluster
		}
		a := target[g.account.name]
		if a == nil {
			a = &acc{rules: []interface{}{}, seen: map[roleKey]bool{}}
			target[g.account.name] = a
		}
		if a.seen[g.role] {
			continue
		}
		a.seen[g.role] = true
		rules, _, err := unstructured.NestedSlice(roles[g.role].Object, "rules")
		if err != nil {
			return nil, fmt.Errorf("%s %q: rules: %w", g.role.kind, g.role.name, err)
		}
		a.rules = append(a.rules, rules...)
	}
	toEntries := func(m map[string]*acc) []interface{} {
		names := make([]string, 0, len(m))
		for n := range m {
			names = append(names, n)
		}
		sort.Strings(names)
		out := make([]interface{}, 0, len(names))
		for _, n := range names {
			out = append(out, map[string]interface{}{"serviceAccountName": n, "rules": m[n].rules})
		}
		return out
	}
	plan.clusterPermissions = toEntries(cluster)
	plan.permissions = toEntries(namespaced)
	return plan, nil
}

const rbacGroup = "rbac.authorization.k8s.io"

func keyOf(role *unstructured.Unstructured) roleKey {
	if role.GetKind() == "ClusterRole" {
		return roleKey{kind: "ClusterRole", name: role.GetName()}
	}
	return roleKey{kind: "Role", namespace: role.GetNamespace(), name: role.GetName()}
}

// readBinding returns the role a binding grants, its ServiceAccount subjects
// and how many subjects of other kinds (users, groups) it has.
func readBinding(b *unstructured.Unstructured) (roleKey, []accountRef, int, error) {
	what := fmt.Sprintf("%s %q", b.GetKind(), b.GetName())
	kind, err := requiredString(b.Object, "roleRef", "kind")
	if err != nil {
		return roleKey{}, nil, 0, fmt.Errorf("%s: %w", what, err)
	}
	name, err := requiredString(b.Object, "roleRef", "name")
	if err != nil {
		return roleKey{}, nil, 0, fmt.Errorf("%s: %w", what, err)
	}
	role := roleKey{kind: kind, name: name}
	switch {
	case kind == "Role" && b.GetKind() == "RoleBinding":
		role.namespace = b.GetNamespace()
	case kind == "ClusterRole":
	default:
		return roleKey{}, nil, 0, fmt.Errorf("%s: cannot refer to a %s", what, kind)
	}
	raw, _, err := unstructured.NestedSlice(b.Object, "subjects")
	if err != nil {
		return roleKey{}, nil, 0, fmt.Errorf("%s: subjects: %w", what, err)
	}
	subjects := make([]accountRef, 0, len(raw))
	nonAccounts := 0
	for i, s := range raw {
		sm, ok := s.(map[string]interface{})
		if !ok {
			return roleKey{}, nil, 0, fmt.Errorf("%s: subjects[%d] is not an object", what, i)
		}
		skind, _, _ := unstructured.NestedString(sm, "kind")
		sname, _, _ := unstructured.NestedString(sm, "name")
		sns, _, _ := unstructured.NestedString(sm, "namespace")
		if skind != "ServiceAccount" {
			nonAccounts++
			continue
		}
		if sns == "" && b.GetKind() == "RoleBinding" {
			sns = b.GetNamespace()
		}
		subjects = append(subjects, accountRef{namespace: sns, name: sname})
	}
	return role, subjects, nonAccounts, nil
}

// deploymentEntry is one element of spec.install.spec.deployments: the
// Deployment's name, labels and spec, with the manager container's image
// replaced by image. It also returns the pod's ServiceAccount and how many
// containers got the image (0 or 1).
func deploymentEntry(d *unstructured.Unstructured, image string) (map[string]interface{}, accountRef, int, error) {
	what := fmt.Sprintf("Deployment %q", d.GetName())
	spec, found, err := unstructured.NestedMap(d.Object, "spec")
	if err != nil || !found {
		return nil, accountRef{}, 0, fmt.Errorf("%s: spec missing or not an object", what)
	}
	account := accountRef{namespace: d.GetNamespace(), name: "default"}
	for _, field := range []string{"serviceAccount", "serviceAccountName"} {
		if n, _, _ := unstructured.NestedString(spec, "template", "spec", field); n != "" {
			account.name = n
		}
	}

	target := managerContainer
	if n, _, _ := unstructured.NestedString(spec, "template", "metadata", "annotations", defaultContainerAnnotation); n != "" {
		target = n
	}
	containers, _, err := unstructured.NestedSlice(spec, "template", "spec", "containers")
	if err != nil {
		return nil, accountRef{}, 0, fmt.Errorf("%s: containers: %w", what, err)
	}
	set := 0
	for i, c := range containers {
		cm, ok := c.(map[string]interface{})
		if !ok {
			return nil, accountRef{}, 0, fmt.Errorf("%s: containers[%d] is not an object", what, i)
		}
		if name, _, _ := unstructured.NestedString(cm, "name"); name == target {
			cm["image"] = image
			set++
		}
	}
	if err := unstructured.SetNestedSlice(spec, containers, "template", "spec", "containers"); err != nil {
		return nil, accountRef{}, 0, fmt.Errorf("%s: containers: %w", what, err)
	}

	entry := map[string]interface{}{"name": d.GetName(), "spec": spec}
	if labels := d.GetLabels(); len(labels) > 0 {
		l := make(map[string]interface{}, len(labels))
		for k, v := range labels {
			l[k] = v
		}
		entry["label"] = l
	}
	return entry, account, set, nil
}
