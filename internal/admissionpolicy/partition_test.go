package admissionpolicy

import (
	"testing"
)

func TestTaintRules(t *testing.T) {
	rule := func(name, key string, labels map[string]string) map[string]any {
		return obj(name, "", labels, m{"spec": m{"deviceSelector": m{"driver": "gpu.example.com"}, "taint": m{"key": key, "effect": "NoSchedule"}}})
	}
	centralLabels := map[string]string{labelComponent: "central", labelManagedBy: managedByValue}
	central := rule("drastack-central-gpu", centralTaintKey, centralLabels)
	removal := rule("gpu-example-com-removal", removalTaintKey, map[string]string{labelStack: "default", labelComponent: "removal", labelManagedBy: managedByValue})
	mine := rule("maintenance", "example.com/maintenance", nil)
	const r = "resource.k8s.io"
	run(t, TaintRules, []tcase{
		{"an administrator deletes a central rule", del(admin, r, "devicetaintrules", "", central), denied,
			"DeviceTaintRule drastack-central-gpu is the drastack operator's (taint key resource.drastack.io/central or drastack.io/driver-removal, or its labels): only the operator (system:serviceaccount:drastack-system:drastack-controller-manager) may delete it"},
		{"an administrator edits a removal rule", update(admin, r, "devicetaintrules", "", removal, edit(removal, func(o m) { o["spec"].(m)["taint"].(m)["effect"] = "None" })), denied, "may update it"},
		{"an administrator strips the central labels", update(admin, r, "devicetaintrules", "", central, edit(central, func(o m) { delete(o["metadata"].(m), "labels") })), denied, ""},
		{"a tenant creates a rule with the central key", create("alice", r, "devicetaintrules", "", rule("x", centralTaintKey, nil)), denied, "may create it"},
		{"a rule with the central labels but another key", create("alice", r, "devicetaintrules", "", rule("x", "example.com/k", centralLabels)), denied, ""},
		{"an administrator's own rule", create(admin, r, "devicetaintrules", "", mine), allowed, ""},
		{"an administrator deletes its own rule", del(admin, r, "devicetaintrules", "", mine), allowed, ""},
		{"the garbage collector deletes a central rule", del("system:serviceaccount:kube-system:generic-garbage-collector", r, "devicetaintrules", "", central), allowed, ""},
		{"kube-controller-manager's own identity too", del("system:kube-controller-manager", r, "devicetaintrules", "", central), allowed, ""},
		{"but the garbage collector cannot edit one", update("system:serviceaccount:kube-system:generic-garbage-collector", r, "devicetaintrules", "", central, central), denied, ""},
		{"the operator is not matched", del(operator, r, "devicetaintrules", "", central), notMatched, ""},
		// The README's Force recipe.
		{"an administrator marks a removal rule Force", update(admin, r, "devicetaintrules", "", removal, forced(removal)), allowed, ""},
		{"and changes it back", update(admin, r, "devicetaintrules", "", forced(removal), removal), allowed, ""},
		{"but not with another annotation", update(admin, r, "devicetaintrules", "", removal,
			edit(forced(removal), func(o m) { o["metadata"].(m)["annotations"].(m)["x"] = "y" })), denied, "may update it"},
		{"nor with a change of the taint", update(admin, r, "devicetaintrules", "", removal,
			edit(forced(removal), func(o m) { o["spec"].(m)["taint"].(m)["effect"] = "None" })), denied, "may update it"},
		{"nor on a central rule", update(admin, r, "devicetaintrules", "", central, forced(central)), denied, "may update it"},
	})
}

// forced is a DeviceTaintRule with the removal-policy annotation Force.
func forced(rule map[string]any) map[string]any {
	return edit(rule, func(o m) { o["metadata"].(m)["annotations"] = m{annotationRemovalPolicy: "Force"} })
}

// claim is a ResourceClaim with the given requests, labels and annotations.
func claim(labels, annotations map[string]string, requests ...m) map[string]any {
	rs := l{}
	for _, r := range requests {
		rs = append(rs, r)
	}
	o := obj("c", "team-a", labels, m{"spec": m{"devices": m{"requests": rs}}})
	if annotations != nil {
		a := m{}
		for k, v := range annotations {
			a[k] = v
		}
		o["metadata"].(m)["annotations"] = a
	}
	return o
}

// template wraps a claim's metadata and spec into a ResourceClaimTemplate.
func template(c map[string]any) map[string]any {
	meta := c["metadata"].(m)
	inner := m{}
	if v, ok := meta["labels"]; ok {
		inner["labels"] = v
	}
	if v, ok := meta["annotations"]; ok {
		inner["annotations"] = v
	}
	return obj("t", "team-a", nil, m{"spec": m{"metadata": inner, "spec": c["spec"]}})
}

func exact(name, class string, tolerations ...m) m {
	e := m{"deviceClassName": class}
	if len(tolerations) > 0 {
		ts := l{}
		for _, t := range tolerations {
			ts = append(ts, t)
		}
		e["tolerations"] = ts
	}
	return m{"name": name, "exactly": e}
}

func firstAvailable(name string, subs ...m) m {
	s := l{}
	for _, x := range subs {
		s = append(s, x)
	}
	return m{"name": name, "firstAvailable": s}
}

func sub(name, class string, tolerations ...m) m {
	x := m{"name": name, "deviceClassName": class}
	if len(tolerations) > 0 {
		ts := l{}
		for _, t := range tolerations {
			ts = append(ts, t)
		}
		x["tolerations"] = ts
	}
	return x
}

func TestClaimTolerations(t *testing.T) {
	byKey := m{"key": centralTaintKey, "operator": "Exists", "effect": "NoSchedule"}
	everything := m{"operator": "Exists"}
	everyNoSchedule := m{"operator": "Exists", "effect": "NoSchedule"}
	everyNoExecute := m{"operator": "Exists", "effect": "NoExecute"}
	other := m{"key": "example.com/unhealthy", "operator": "Exists"}
	const r = "resource.k8s.io"
	admin := func(c m) m { c["exactly"].(m)["adminAccess"] = true; return c }
	tol := claim(nil, nil, exact("gpu", "gpu.example.com", byKey))
	run(t, ClaimTolerations, []tcase{
		{"the central key", create("alice", r, "resourceclaims", "team-a", tol), denied,
			"requests gpu of c tolerate the taint resource.drastack.io/central (by its key, or every key with operator Exists)"},
		{"every taint", create("alice", r, "resourceclaims", "team-a", claim(nil, nil, exact("a", "x"), exact("gpu", "x", everything))), denied, "requests gpu of c"},
		{"every NoSchedule taint", create("alice", r, "resourceclaims", "team-a", claim(nil, nil, exact("gpu", "x", everyNoSchedule))), denied, ""},
		{"the central key with another effect still counts", create("alice", r, "resourceclaims", "team-a", claim(nil, nil, exact("gpu", "x", m{"key": centralTaintKey, "effect": "NoExecute", "operator": "Exists"}))), denied, ""},
		{"every NoExecute taint does not tolerate it", create("alice", r, "resourceclaims", "team-a", claim(nil, nil, exact("gpu", "x", everyNoExecute))), allowed, ""},
		{"another key", create("alice", r, "resourceclaims", "team-a", claim(nil, nil, exact("gpu", "x", other))), allowed, ""},
		{"no tolerations", create("alice", r, "resourceclaims", "team-a", claim(nil, nil, exact("gpu", "x"))), allowed, ""},
		{"a subrequest", create("alice", r, "resourceclaims", "team-a", claim(nil, nil, firstAvailable("gpu", sub("big", "x"), sub("small", "y", everything)))), denied, "requests gpu of c"},
		{"admin access is let through", create("alice", r, "resourceclaims", "team-a", claim(nil, nil, admin(exact("monitor", "x", everything)))), allowed, ""},
		{"a template", create("alice", r, "resourceclaimtemplates", "team-a", template(tol)), denied, "requests gpu of t"},
		{"an update that keeps the spec (kube-controller-manager drops a finalizer)", update("system:serviceaccount:kube-system:resource-claim-controller", r, "resourceclaims", "team-a", tol,
			edit(tol, func(o m) { o["metadata"].(m)["finalizers"] = l{} })), notMatched, ""},
		{"the operator too", dryRun(create(operator, r, "resourceclaims", "team-a", tol)), denied, ""},
	})
}

func TestCentralClasses(t *testing.T) {
	stack := obj("default", "", nil, m{"spec": m{"claims": m{"central": l{
		m{"driver": "gpu.example.com", "pools": l{"node-7"}},
		m{"driver": "gpu.example.com", "classes": l{"gpu-topology", "gpu-ring"}},
		m{"driver": "tpu.example.com", "classes": l{"tpu.example.com"}},
	}}}})
	cel := map[string]string{celAnnotation: `size(devices) == 2`}
	immediate := map[string]string{allocationLabel: immediateValue}
	const r = "resource.k8s.io"
	on := func(rq req) req { return withParams(rq, stack) }
	good := claim(nil, cel, exact("a", "gpu-topology"), firstAvailable("b", sub("x", "gpu-ring"), sub("y", "tpu.example.com")))
	run(t, CentralClasses, []tcase{
		{"a CEL claim on central classes", on(create("alice", r, "resourceclaims", "team-a", good)), allowed, ""},
		{"a CEL claim with a non-central class", on(create("alice", r, "resourceclaims", "team-a", claim(nil, cel, exact("a", "gpu-topology"), exact("b", "gpu.example.com")))), denied,
			"c asks for the drastack operator's allocation (the annotation resource.drastack.io/cel-constraints or the label resource.drastack.io/allocation=Immediate), so every request must name a class of spec.claims.central[].classes of DRAStack default (now: gpu-topology, gpu-ring, tpu.example.com); requests b do not"},
		{"one subrequest off the partition", on(create("alice", r, "resourceclaims", "team-a", claim(nil, cel, firstAvailable("b", sub("x", "gpu-ring"), sub("y", "gpu.example.com"))))), denied, "requests b do not"},
		{"an Immediate template", on(create("alice", r, "resourceclaimtemplates", "team-a", template(claim(immediate, nil, exact("a", "standard"))))), denied, "t asks for"},
		{"an Immediate template on central classes", on(create("alice", r, "resourceclaimtemplates", "team-a", template(claim(immediate, nil, exact("a", "tpu.example.com"))))), allowed, ""},
		{"another value of the label asks for nothing", on(create("alice", r, "resourceclaims", "team-a", claim(map[string]string{allocationLabel: "Later"}, nil, exact("a", "standard")))), notMatched, ""},
		{"a plain claim", on(create("alice", r, "resourceclaims", "team-a", claim(nil, nil, exact("a", "standard")))), notMatched, ""},
		{"adding the annotation later", on(update("alice", r, "resourceclaims", "team-a", claim(nil, nil, exact("a", "standard")), claim(nil, cel, exact("a", "standard")))), denied, "requests a do not"},
		{"an update that leaves the annotation", on(update("system:serviceaccount:kube-system:resource-claim-controller", r, "resourceclaims", "team-a",
			claim(nil, cel, exact("a", "standard")), edit(claim(nil, cel, exact("a", "standard")), func(o m) { o["metadata"].(m)["finalizers"] = l{} }))), notMatched, ""},
		{"no central entry has classes", withParams(create("alice", r, "resourceclaims", "team-a", good), obj("default", "", nil, m{"spec": m{}})), denied, "(now: ); requests a, b do not"},
		{"without a DRAStack it is not evaluated", create("alice", r, "resourceclaims", "team-a", claim(nil, cel, exact("a", "standard"))), notMatched, ""},
	})
}
