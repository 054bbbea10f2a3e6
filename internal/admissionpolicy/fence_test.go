package admissionpolicy

import (
	"testing"

	"github.com/drastack/drastack/internal/central"
	claimsctrl "github.com/drastack/drastack/internal/controller/claims"
	"github.com/drastack/drastack/internal/handover"
)

func gatedPod(gates ...string) map[string]any {
	var gs l
	for _, g := range gates {
		gs = append(gs, m{"name": g})
	}
	return obj("p", "team-a", map[string]string{"app": "x"}, m{"spec": m{
		"containers":      l{m{"name": "c", "image": "registry.k8s.io/pause:3.10"}},
		"schedulingGates": gs,
	}})
}

func TestPodGates(t *testing.T) {
	pod := gatedPod("example.com/other", schedulingGate)
	withoutOurs := edit(pod, func(o m) { o["spec"].(m)["schedulingGates"] = l{m{"name": "example.com/other"}} })
	onlyOurs := gatedPod(schedulingGate)
	noGates := edit(onlyOurs, func(o m) { delete(o["spec"].(m), "schedulingGates") })
	run(t, PodGates, []tcase{
		{"lift its own gate", update(operator, "", "pods", "team-a", pod, withoutOurs), allowed, ""},
		{"lift its only gate (the field goes)", update(operator, "", "pods", "team-a", onlyOurs, noGates), allowed, ""},
		{"no change", update(operator, "", "pods", "team-a", pod, pod), allowed, ""},
		{"lift another gate", update(operator, "", "pods", "team-a", pod,
			edit(pod, func(o m) { o["spec"].(m)["schedulingGates"] = l{m{"name": schedulingGate}} })),
			denied, "may only remove its own scheduling gate resource.drastack.io/allocation, not change the gates from [example.com/other, resource.drastack.io/allocation] to [resource.drastack.io/allocation]"},
		{"lift every gate", update(operator, "", "pods", "team-a", pod, edit(pod, func(o m) { delete(o["spec"].(m), "schedulingGates") })),
			denied, "may only remove its own scheduling gate"},
		{"change a label", update(operator, "", "pods", "team-a", pod, edit(pod, func(o m) { o["metadata"].(m)["labels"] = m{"app": "y"} })),
			denied, "may change only spec.schedulingGates of a pod, not metadata.labels"},
		{"add an annotation with the gate", update(operator, "", "pods", "team-a", pod, edit(withoutOurs, func(o m) { o["metadata"].(m)["annotations"] = m{"a": "b"} })),
			denied, "not metadata.annotations"},
		{"change the image", update(operator, "", "pods", "team-a", pod, edit(pod, func(o m) {
			o["spec"].(m)["containers"] = l{m{"name": "c", "image": "evil:1"}}
		})), denied, "not spec.containers"},
		{"add a toleration and a node selector", update(operator, "", "pods", "team-a", pod, edit(pod, func(o m) {
			o["spec"].(m)["tolerations"] = l{m{"operator": "Exists"}}
			o["spec"].(m)["nodeSelector"] = m{"k": "v"}
		})), denied, "not spec.nodeSelector, spec.tolerations"},
		{"create a pod", create(operator, "", "pods", "team-a", pod), denied, "never creates or deletes pods"},
		{"create a canary pod in its namespace", create(operator, "", "pods", DefaultIdentity.Namespace, canaryObj("c", DefaultIdentity.Namespace)), allowed, ""},
		{"delete a canary pod in its namespace", del(operator, "", "pods", DefaultIdentity.Namespace, canaryObj("c", DefaultIdentity.Namespace)), allowed, ""},
		{"create a canary-labelled pod elsewhere", create(operator, "", "pods", "team-a", canaryObj("c", "team-a")), denied, "never creates or deletes pods"},
		{"delete a pod", del(operator, "", "pods", "team-a", pod), denied, "never creates or deletes pods"},
		{"someone else changes a label", update(admin, "", "pods", "team-a", pod, edit(pod, func(o m) { o["metadata"].(m)["labels"] = m{"app": "y"} })), notMatched, ""},
		{"a pod's status is another resource", req{op: "UPDATE", user: operator, resource: "pods", sub: "status", namespace: "team-a", name: "p", obj: pod, old: pod}, notMatched, ""},
	})
}

func TestOwnedObjects(t *testing.T) {
	centralClass := central.Class("central-gpu.example.com")
	ns := func(name string, labels map[string]string) map[string]any { return obj(name, "", labels, nil) }
	kubeSystem := ns("kube-system", map[string]string{"kubernetes.io/metadata.name": "kube-system"})
	drivers := ns("drastack-drivers", map[string]string{labelStack: "default", labelComponent: "namespace"})
	ds := func(namespace string, labels map[string]string) map[string]any {
		return obj("gpu-example-com-kubelet-plugin", namespace, labels, m{"spec": m{"template": m{}}})
	}
	central := obj("drastack-central-gpu", "", map[string]string{labelComponent: "central", labelManagedBy: managedByValue},
		m{"spec": m{"taint": m{"key": centralTaintKey, "effect": "NoSchedule"}}})
	foreignRule := obj("admin-maintenance", "", nil, m{"spec": m{"taint": m{"key": "example.com/maintenance", "effect": "NoSchedule"}}})
	stackNS := map[string]string{labelStack: "default"}
	probeClass := obj("drastack-probe-extended-resource", "", nil, m{"spec": m{"extendedResourceName": "example.com/x"}})
	run(t, OwnedObjects, []tcase{
		{"create the canary DeviceClass", create(operator, "resource.k8s.io", "deviceclasses", "", canaryObj("drastack-canary", "")), allowed, ""},
		{"delete a canary rule", del(operator, "resource.k8s.io", "devicetaintrules", "", canaryObj("drastack-canary-r1", "")), allowed, ""},
		{"a canary-labelled DaemonSet is not owned", inNamespace(create(operator, "apps", "daemonsets", "drastack-drivers", ds("drastack-drivers", map[string]string{labelComponent: componentCanary, labelManagedBy: managedByValue})), stackNS),
			denied, "only objects that carry its ownership labels"},
		{"delete kube-system", del(operator, "", "namespaces", "", kubeSystem), denied,
			"may create and delete only namespaces labelled drastack.io/stack, and change only namespaces it labels or labelled: not kube-system"},
		{"delete its driver namespace", del(operator, "", "namespaces", "", drivers), allowed, ""},
		{"create its driver namespace", create(operator, "", "namespaces", "", drivers), allowed, ""},
		{"create a namespace without its label", create(operator, "", "namespaces", "", ns("x", nil)), denied, "namespaces labelled"},
		{"release a shared namespace (drop its labels)", update(operator, "", "namespaces", "", drivers, ns("drastack-drivers", nil)), allowed, ""},
		{"take in a namespace by labelling it", update(operator, "", "namespaces", "", ns("drastack-drivers", nil), drivers), allowed, ""},
		{"relabel kube-system without its label", update(operator, "", "namespaces", "", kubeSystem,
			edit(kubeSystem, func(o m) { o["metadata"].(m)["labels"].(m)["pod-security.kubernetes.io/enforce"] = "privileged" })), denied, "not kube-system"},
		{"create its DaemonSet in its namespace", inNamespace(create(operator, "apps", "daemonsets", "drastack-drivers", ds("drastack-drivers", stackLabels)), stackNS), allowed, ""},
		{"create a labelled DaemonSet in kube-system", inNamespace(create(operator, "apps", "daemonsets", "kube-system", ds("kube-system", stackLabels)), nil),
			denied, "writes namespaced objects only in namespaces labelled drastack.io/stack: not daemonsets kube-system/gpu-example-com-kubelet-plugin"},
		{"create an unlabelled DaemonSet in its namespace", inNamespace(create(operator, "apps", "daemonsets", "drastack-drivers", ds("drastack-drivers", nil)), stackNS),
			denied, "may create only objects that carry its ownership labels"},
		{"take over a DaemonSet by labelling it", inNamespace(update(operator, "apps", "daemonsets", "drastack-drivers", ds("drastack-drivers", nil), ds("drastack-drivers", stackLabels)), stackNS),
			denied, "may update only objects that carry its ownership labels"},
		{"strip its labels off its DaemonSet", inNamespace(update(operator, "apps", "daemonsets", "drastack-drivers", ds("drastack-drivers", stackLabels), ds("drastack-drivers", nil)), stackNS),
			denied, "before and after the write"},
		{"delete a foreign DaemonSet", inNamespace(del(operator, "apps", "daemonsets", "kube-system", ds("kube-system", nil)), nil), denied, "may delete only objects"},
		{"delete its ClusterRole", del(operator, "rbac.authorization.k8s.io", "clusterroles", "", obj("gpu-example-com-kubelet-plugin", "", stackLabels, nil)), allowed, ""},
		{"delete cluster-admin", del(operator, "rbac.authorization.k8s.io", "clusterroles", "", obj("cluster-admin", "", nil, nil)), denied, "not clusterroles cluster-admin"},
		{"delete a central DeviceTaintRule", del(operator, "resource.k8s.io", "devicetaintrules", "", central), allowed, ""},
		{"create a central DeviceTaintRule", create(operator, "resource.k8s.io", "devicetaintrules", "", central), allowed, ""},
		{"delete an administrator's DeviceTaintRule", del(operator, "resource.k8s.io", "devicetaintrules", "", foreignRule), denied, "not devicetaintrules admin-maintenance"},
		// The claim controller's central classes carry central.Class's labels.
		{"create a central DeviceClass", create(operator, "resource.k8s.io", "deviceclasses", "", obj("central-gpu.example.com", "", centralClass.Labels, nil)), allowed, ""},
		{"delete a central DeviceClass", del(operator, "resource.k8s.io", "deviceclasses", "", obj("central-gpu.example.com", "", centralClass.Labels, nil)), allowed, ""},
		{"central labels count only on DeviceTaintRules and DeviceClasses", create(operator, "rbac.authorization.k8s.io", "clusterroles", "",
			obj("c", "", map[string]string{labelComponent: "central", labelManagedBy: managedByValue}, nil)), denied, "ownership labels"},
		{"the cluster probe's dry-run DeviceClass", dryRun(create(operator, "resource.k8s.io", "deviceclasses", "", probeClass)), notMatched, ""},
		{"the probe's DeviceClass for real", create(operator, "resource.k8s.io", "deviceclasses", "", probeClass), denied, "ownership labels"},
		{"a dry run is no exemption otherwise", dryRun(del(operator, "", "namespaces", "", kubeSystem)), denied, "not kube-system"},
		{"someone else deletes kube-system", del(admin, "", "namespaces", "", kubeSystem), notMatched, ""},
	})
}

func TestDriverNamespace(t *testing.T) {
	labelled := func(name string) map[string]any {
		return obj(name, "", map[string]string{labelStack: "default"}, nil)
	}
	stack := func(ns string) map[string]any {
		spec := m{}
		if ns != "" {
			spec["namespace"] = ns
		}
		return obj("default", "", nil, m{"spec": spec})
	}
	run(t, DriverNamespace, []tcase{
		{"create the default driver namespace", withParams(create(operator, "", "namespaces", "", labelled("drastack-drivers")), stack("")), allowed, ""},
		{"create the spec's namespace", withParams(create(operator, "", "namespaces", "", labelled("gpu-drivers")), stack("gpu-drivers")), allowed, ""},
		{"create another namespace", withParams(create(operator, "", "namespaces", "", labelled("evil")), stack("gpu-drivers")),
			denied, "only the driver namespace of DRAStack default (spec.namespace gpu-drivers), not evil"},
		{"take in kube-system", withParams(update(operator, "", "namespaces", "", obj("kube-system", "", nil, nil), labelled("kube-system")), stack("")),
			denied, "not kube-system"},
		{"take in the spec's existing namespace", withParams(update(operator, "", "namespaces", "", obj("gpu-drivers", "", nil, nil), labelled("gpu-drivers")), stack("gpu-drivers")), allowed, ""},
		{"release a namespace it labelled", withParams(update(operator, "", "namespaces", "", labelled("old"), obj("old", "", nil, nil)), stack("")), notMatched, ""},
		{"without a DRAStack it is not evaluated", create(operator, "", "namespaces", "", labelled("evil")), notMatched, ""},
		{"someone else", withParams(create(admin, "", "namespaces", "", obj("evil", "", nil, nil)), stack("")), notMatched, ""},
	})
}

func TestRoleBindings(t *testing.T) {
	crb := func(name, role string, subjects ...m) map[string]any {
		s := l{}
		for _, x := range subjects {
			s = append(s, x)
		}
		return obj(name, "", stackLabels, m{"roleRef": m{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}, "subjects": s})
	}
	sa := func(ns string) m {
		return m{"kind": "ServiceAccount", "name": "gpu-example-com-kubelet-plugin", "namespace": ns}
	}
	rb := func(subjects ...m) map[string]any {
		o := crb("gpu-nvidia-com-controller", "gpu-nvidia-com-controller", subjects...)
		o["metadata"].(m)["namespace"] = "drastack-drivers"
		o["roleRef"].(m)["kind"] = "Role"
		return o
	}
	const g = "rbac.authorization.k8s.io"
	run(t, RoleBindings, []tcase{
		{"bind the role of its name", create(operator, g, "clusterrolebindings", "", crb("gpu-example-com-kubelet-plugin", "gpu-example-com-kubelet-plugin", sa("drastack-drivers"))), allowed, ""},
		{"bind another role", create(operator, g, "clusterrolebindings", "", crb("gpu-example-com-kubelet-plugin", "some-role", sa("drastack-drivers"))),
			denied, "gpu-example-com-kubelet-plugin refers to ClusterRole some-role"},
		{"bind cluster-admin by its name", create(operator, g, "clusterrolebindings", "", crb("cluster-admin", "cluster-admin", sa("drastack-drivers"))),
			denied, "never binds built-in roles: cluster-admin"},
		{"bind a system role", create(operator, g, "clusterrolebindings", "", crb("system:node", "system:node", sa("drastack-drivers"))), denied, "built-in"},
		{"bind to a group", update(operator, g, "clusterrolebindings", "", crb("r", "r", sa("x")),
			crb("r", "r", m{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:authenticated"})), denied, "never to users or groups"},
		{"a RoleBinding for its namespace", create(operator, g, "rolebindings", "drastack-drivers", rb(sa("drastack-drivers"))), allowed, ""},
		{"a RoleBinding naming no namespace", create(operator, g, "rolebindings", "drastack-drivers", rb(m{"kind": "ServiceAccount", "name": "x"})), allowed, ""},
		{"a RoleBinding for another namespace", create(operator, g, "rolebindings", "drastack-drivers", rb(sa("kube-system"))), denied, "only ServiceAccounts of its own namespace"},
		{"someone else", create(admin, g, "clusterrolebindings", "", crb("a", "cluster-admin")), notMatched, ""},
	})
}

func TestHeldToGrant(t *testing.T) {
	node := obj("n1", "", nil, m{"spec": m{}})
	run(t, HeldToGrant, []tcase{
		{"update a node", update(operator, "", "nodes", "", node, edit(node, func(o m) { o["spec"].(m)["unschedulable"] = true })),
			denied, "holds write access to nodes only to grant it to the drivers it installs"},
		{"create a ComputeDomainClique", create(operator, "resource.nvidia.com", "computedomaincliques", "drastack-drivers", obj("c", "drastack-drivers", nil, nil)), denied, "computedomaincliques"},
		{"delete a claim template", del(operator, "resource.k8s.io", "resourceclaimtemplates", "team-a", obj("t", "team-a", nil, nil)), denied, "resourceclaimtemplates"},
		{"update a ComputeDomain's status", req{op: "UPDATE", user: operator, group: "resource.nvidia.com", resource: "computedomains", sub: "status", name: "d", obj: obj("d", "x", nil, nil), old: obj("d", "x", nil, nil)},
			denied, "computedomains/status"},
		{"someone else", update(admin, "", "nodes", "", node, node), notMatched, ""},
	})
}

func TestClaimsAndSlices(t *testing.T) {
	claim := obj("c", "team-a", map[string]string{"app": "x"}, m{"spec": m{"devices": m{"requests": l{m{"name": "r", "exactly": m{"deviceClassName": "gpu"}}}}}})
	withFinalizers := func(fs ...string) map[string]any {
		return edit(claim, func(o m) {
			var f l
			for _, x := range fs {
				f = append(f, x)
			}
			o["metadata"].(m)["finalizers"] = f
		})
	}
	slice := func(node string) map[string]any {
		spec := m{"driver": "tpu.example.com", "pool": m{"name": "p"}}
		if node != "" {
			spec["nodeName"] = node
		} else {
			spec["nodeSelector"] = m{}
		}
		return obj("s", "", nil, m{"spec": spec})
	}
	const r = "resource.k8s.io"
	run(t, ClaimsAndSlices, []tcase{
		{"a dry-run claim (the cluster probe)", dryRun(create(operator, r, "resourceclaims", "default", claim)), allowed, ""},
		{"a claim for real", create(operator, r, "resourceclaims", "default", claim), denied, "only as server-side dry runs"},
		{"a canary claim in its namespace", create(operator, r, "resourceclaims", DefaultIdentity.Namespace, canaryObj("c", DefaultIdentity.Namespace)), allowed, ""},
		{"delete a canary claim in its namespace", del(operator, r, "resourceclaims", DefaultIdentity.Namespace, canaryObj("c", DefaultIdentity.Namespace)), allowed, ""},
		{"a canary-labelled claim elsewhere", create(operator, r, "resourceclaims", "team-a", canaryObj("c", "team-a")), denied, "only as server-side dry runs"},
		{"delete a claim", del(operator, r, "resourceclaims", "team-a", claim), denied, "never deletes ResourceClaims"},
		{"add the delete-protection finalizer", update(operator, r, "resourceclaims", "team-a", claim, withFinalizers(claimFinalizer)), allowed, ""},
		{"remove it", update(operator, r, "resourceclaims", "team-a", withFinalizers("x.io/keep", claimFinalizer), withFinalizers("x.io/keep")), allowed, ""},
		{"write the fence annotation (a new term's sweep)", update(operator, r, "resourceclaims", "team-a", claim,
			edit(claim, func(o m) { o["metadata"].(m)["annotations"] = m{fenceAnnotation: "t2/41"} })), allowed, ""},
		{"change the fence annotation and another", update(operator, r, "resourceclaims", "team-a", claim,
			edit(claim, func(o m) { o["metadata"].(m)["annotations"] = m{fenceAnnotation: "t2/41", "x.io/a": "b"} })), denied, "not metadata.annotations"},
		{"remove another finalizer", update(operator, r, "resourceclaims", "team-a", withFinalizers("x.io/keep"), withFinalizers()), denied, "adds or removes only the finalizer"},
		{"change a label", update(operator, r, "resourceclaims", "team-a", claim, edit(claim, func(o m) { o["metadata"].(m)["labels"] = m{"app": "y"} })),
			denied, "only by its finalizer resource.kubernetes.io/delete-protection, not metadata.labels"},
		{"delete a claim", del(operator, r, "resourceclaims", "team-a", claim), denied, "never deletes"},
		{"the status is another resource", req{op: "UPDATE", user: operator, group: r, resource: "resourceclaims", sub: "status", namespace: "team-a", name: "c", obj: claim, old: claim}, notMatched, ""},
		{"publish a node-less slice", create(operator, r, "resourceslices", "", slice("")), allowed, ""},
		{"update a node-less slice", update(operator, r, "resourceslices", "", slice(""), slice("")), allowed, ""},
		{"publish a node's slice", create(operator, r, "resourceslices", "", slice("node-1")), denied, "only node-less ResourceSlices"},
		{"dry-run a node's slice (the cluster probe)", dryRun(create(operator, r, "resourceslices", "", slice("node-1"))), allowed, ""},
		{"someone else", create(admin, r, "resourceclaims", "default", claim), notMatched, ""},
	})
}

func TestStackFinalizers(t *testing.T) {
	stack := obj("default", "", nil, m{"spec": m{"namespace": "drastack-drivers"}})
	fin := func(fs ...string) map[string]any {
		return edit(stack, func(o m) {
			var f l
			for _, x := range fs {
				f = append(f, x)
			}
			o["metadata"].(m)["finalizers"] = f
		})
	}
	run(t, StackFinalizers, []tcase{
		{"add its finalizer", update(operator, "drastack.io", "drastacks", "", stack, fin("drastack.io/driver-cleanup")), allowed, ""},
		{"write the fence annotation (a new term's sweep)", update(operator, "drastack.io", "drastacks", "", stack,
			edit(stack, func(o m) { o["metadata"].(m)["annotations"] = m{fenceAnnotation: "t3/7"} })), allowed, ""},
		{"drop another annotation with it", update(operator, "drastack.io", "drastacks", "", edit(stack, func(o m) { o["metadata"].(m)["annotations"] = m{"x.io/a": "b"} }),
			edit(stack, func(o m) { o["metadata"].(m)["annotations"] = m{fenceAnnotation: "t3/7"} })), denied, "not metadata.annotations"},
		{"remove its finalizer, keep another", update(operator, "drastack.io", "drastacks", "", fin("x.io/f", "drastack.io/claims-cleanup"), fin("x.io/f")), allowed, ""},
		{"remove another's finalizer", update(operator, "drastack.io", "drastacks", "", fin("x.io/f"), fin()), denied, "only its own finalizers"},
		{"change the spec", update(operator, "drastack.io", "drastacks", "", stack, edit(stack, func(o m) { o["spec"].(m)["namespace"] = "kube-system" })),
			denied, "only by its own finalizers, not spec"},
		{"delete it", del(operator, "drastack.io", "drastacks", "", stack), denied, "never creates or deletes"},
		{"its status is another resource", req{op: "UPDATE", user: operator, group: "drastack.io", resource: "drastacks", sub: "status", name: "default", obj: stack, old: stack}, notMatched, ""},
	})
}

func TestWebhookCABundle(t *testing.T) {
	cfg := obj("drastack-mutating-webhook-configuration", "", nil, m{"webhooks": l{
		m{"name": "claim-gate.drastack.io", "failurePolicy": "Ignore", "clientConfig": m{"service": m{"name": "s", "namespace": "drastack-system"}}},
		m{"name": "claim-finalizer.drastack.io", "failurePolicy": "Ignore", "clientConfig": m{"service": m{"name": "s", "namespace": "drastack-system"}}},
	}})
	hook := func(o m, i int) m { return o["webhooks"].(l)[i].(m) }
	const a = "admissionregistration.k8s.io"
	run(t, WebhookCABundle, []tcase{
		{"set the caBundle", update(operator, a, "mutatingwebhookconfigurations", "", cfg, edit(cfg, func(o m) {
			hook(o, 0)["clientConfig"].(m)["caBundle"] = "Q0E="
			hook(o, 1)["clientConfig"].(m)["caBundle"] = "Q0E="
		})), allowed, ""},
		{"turn a webhook to Fail", update(operator, a, "mutatingwebhookconfigurations", "", cfg, edit(cfg, func(o m) { hook(o, 0)["failurePolicy"] = "Fail" })),
			denied, "only by the caBundle"},
		{"send it elsewhere", update(operator, a, "mutatingwebhookconfigurations", "", cfg, edit(cfg, func(o m) {
			hook(o, 1)["clientConfig"] = m{"url": "https://evil.example.com"}
		})), denied, "only by the caBundle"},
		{"add a webhook", update(operator, a, "mutatingwebhookconfigurations", "", cfg, edit(cfg, func(o m) {
			o["webhooks"] = append(o["webhooks"].(l), m{"name": "x.io", "clientConfig": m{"url": "https://evil.example.com"}})
		})), denied, "only by the caBundle"},
		{"label it", update(operator, a, "mutatingwebhookconfigurations", "", cfg, edit(cfg, func(o m) { o["metadata"].(m)["labels"] = m{"a": "b"} })),
			denied, "not metadata.labels"},
		{"delete it", del(operator, a, "mutatingwebhookconfigurations", "", cfg), denied, "never creates or deletes"},
		{"someone else", del(admin, a, "mutatingwebhookconfigurations", "", cfg), notMatched, ""},
	})
}

func TestProbe(t *testing.T) {
	ev := func(n string) map[string]any { return obj(n, "drastack-system", nil, m{"reason": "AdmissionProbe"}) }
	run(t, Probe, []tcase{
		{"the probe", dryRun(create(operator, "events.k8s.io", "events", "drastack-system", ev("drastack-admission-probe-0123456789ab"))),
			denied, "drastack admission probe 0123456789ab: the admission policies are in force"},
		{"the probe of another set", dryRun(create(operator, "events.k8s.io", "events", "drastack-system", ev("drastack-admission-probe-ffffffffffff"))), notMatched, ""},
		{"another event", create(operator, "events.k8s.io", "events", "team-a", ev("claim.123")), notMatched, ""},
	})
}

// canaryObj is an object labelled as one of the join barrier's canary
// objects (internal/handover CanaryLabels).
func canaryObj(name, namespace string) map[string]any {
	return obj(name, namespace, map[string]string{labelComponent: componentCanary, labelManagedBy: managedByValue}, m{"spec": m{}})
}

// TestCanaryLabelsAreTheBarriers: the policies' exception for canary
// objects names the labels internal/handover gives them.
func TestCanaryLabelsAreTheBarriers(t *testing.T) {
	l := handover.CanaryLabels("r1")
	if l[labelComponent] != componentCanary || l[labelManagedBy] != managedByValue {
		t.Errorf("handover.CanaryLabels = %v, the policies expect %s=%s and %s=%s", l, labelComponent, componentCanary, labelManagedBy, managedByValue)
	}
}

// TestFenceAnnotationIsTheSweeps: the exception names the annotation the
// claim controller's sweep writes.
func TestFenceAnnotationIsTheSweeps(t *testing.T) {
	if fenceAnnotation != claimsctrl.FenceAnnotation {
		t.Errorf("the policies let the operator write %s, the sweep writes %s", fenceAnnotation, claimsctrl.FenceAnnotation)
	}
}
