package admissionpolicy

import (
	"fmt"
	"reflect"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// The fence: policies that match only the operator's own requests. Each
// narrows a permission of its RBAC (config/rbac) to what its code does;
// docs/permissions.md lists them next to the permissions.

// podGates: the operator patches pods only to lift its scheduling gate
// (internal/controller/claims liftGate). Every other field of the spec and
// every metadata field a client can change must stay as it was, and the
// gates may only lose the operator's own. Pod spec fields a newer API
// version adds are not compared (the list comes from this build's
// k8s.io/api); the API server itself keeps almost all of a pod's spec
// immutable anyway.
func podGates(u, ns string) Pair {
	spec := jsonFields(reflect.TypeFor[corev1.PodSpec](), "schedulingGates")
	isUpdate := `request.operation == "UPDATE"`
	return newPair(PodGates, admissionregistrationv1.ValidatingAdmissionPolicySpec{
		MatchConstraints: matching(rules("", []string{"pods"}, writes...)),
		MatchConditions:  []admissionregistrationv1.MatchCondition{operatorOnly(u)},
		Variables: []admissionregistrationv1.Variable{
			{Name: "changed", Expression: isUpdate + " ? " +
				changedFields("object.metadata", "oldObject.metadata", "metadata.", metadataFields) + " + " +
				changedFields("object.spec", "oldObject.spec", "spec.", spec) + " : []"},
			{Name: "oldGates", Expression: isUpdate + ` ? oldObject.spec.?schedulingGates.orValue([]).map(g, g.name) : []`},
			{Name: "newGates", Expression: isUpdate + ` ? object.spec.?schedulingGates.orValue([]).map(g, g.name) : []`},
		},
		Validations: []admissionregistrationv1.Validation{
			{
				// The join barrier's canary pods (internal/handover), in the
				// operator's own namespace, are the exception.
				Expression: isUpdate + ` || (` + canaryIn(ns) + `)`,
				Message:    "the drastack operator never creates or deletes pods (but the join barrier's canary pods in its own namespace)",
			},
			{
				Expression:        `size(variables.changed) == 0`,
				MessageExpression: `"the drastack operator may change only spec.schedulingGates of a pod, not " + variables.changed.join(", ")`,
			},
			{
				Expression: fmt.Sprintf(`variables.newGates == variables.oldGates || variables.newGates == variables.oldGates.filter(g, g != %s)`, str(schedulingGate)),
				MessageExpression: fmt.Sprintf(`"the drastack operator may only remove its own scheduling gate %s, not change the gates from [" + variables.oldGates.join(", ") + "] to [" + variables.newGates.join(", ") + "]"`,
					schedulingGate),
			},
		},
	}, nil)
}

// ownedResources are the kinds the driver lifecycle and the claim
// controller write, which must carry the operator's ownership labels.
var ownedResources = []struct {
	group     string
	resources []string
}{
	{"", []string{"namespaces", "serviceaccounts"}},
	{"apps", []string{"daemonsets", "deployments"}},
	{"rbac.authorization.k8s.io", []string{"roles", "rolebindings", "clusterroles", "clusterrolebindings"}},
	{"resource.k8s.io", []string{"deviceclasses", "devicetaintrules"}},
}

// ownedExpr says whether the object expression o is the operator's: the
// driver lifecycle labels every object it renders with drastack.io/stack
// (removal DeviceTaintRules included); the claim controller labels its
// central DeviceTaintRules and central DeviceClasses (internal/central),
// and the join barrier its canary rule and class (internal/handover), with
// app.kubernetes.io/managed-by=drastack and drastack.io/component central
// or canary.
func ownedExpr(o string) string {
	return fmt.Sprintf(`(%s != "" || (request.resource.resource in ["devicetaintrules", "deviceclasses"] && %s == %s && %s in [%s, %s]))`,
		label(o, labelStack), label(o, labelManagedBy), str(managedByValue), label(o, labelComponent), str("central"), str(componentCanary))
}

// ownedObjects: the operator creates, changes and deletes namespaces,
// ServiceAccounts, workloads, RBAC objects, DeviceClasses and
// DeviceTaintRules only when they carry its ownership labels (before and
// after the write: it never takes over someone else's object, nor turns
// its own into someone else's), and namespaced ones only in namespaces
// that carry drastack.io/stack. A namespace is the one exception: one that
// others manage too keeps its existence when the last driver goes, the
// operator only releases its labels (internal/controller/driver
// cleanupNamespaces), and may take in an existing one (see
// driverNamespace). The cluster probe's dry-run DeviceClass
// (internal/clusterprobe, named drastack-probe-*) stores nothing and is let
// through.
func ownedObjects(u string) Pair {
	var match []admissionregistrationv1.NamedRuleWithOperations
	for _, r := range ownedResources {
		match = append(match, rules(r.group, r.resources, writes...))
	}
	target := `request.resource.resource + " " + (request.?namespace.orValue("") == "" ? "" : request.?namespace.orValue("") + "/") + request.?name.orValue("")`
	return newPair(OwnedObjects, admissionregistrationv1.ValidatingAdmissionPolicySpec{
		MatchConstraints: matching(match...),
		MatchConditions: []admissionregistrationv1.MatchCondition{
			operatorOnly(u),
			{Name: "not-a-probe", Expression: fmt.Sprintf(`!(request.?dryRun.orValue(false) && request.operation == "CREATE" && object.metadata.name.startsWith(%s))`, str(probeObjectPrefix))},
		},
		Variables: []admissionregistrationv1.Variable{
			{Name: "oldOwned", Expression: `request.operation != "CREATE" && ` + ownedExpr("oldObject")},
			{Name: "newOwned", Expression: `request.operation != "DELETE" && ` + ownedExpr("object")},
		},
		Validations: []admissionregistrationv1.Validation{
			{
				Expression: `request.resource.resource == "namespaces" || ` +
					`((request.operation == "CREATE" || variables.oldOwned) && (request.operation == "DELETE" || variables.newOwned))`,
				MessageExpression: `"the drastack operator may " + request.operation.lowerAscii() + " only objects that carry its ownership labels (` +
					labelStack + `, or ` + labelManagedBy + `=` + managedByValue + ` with ` + labelComponent + ` central or canary on DeviceTaintRules and DeviceClasses), before and after the write: not " + ` + target,
			},
			{
				Expression: `request.resource.resource != "namespaces" || (request.operation == "CREATE" ? variables.newOwned : ` +
					`request.operation == "DELETE" ? variables.oldOwned : (variables.oldOwned || variables.newOwned))`,
				MessageExpression: `"the drastack operator may create and delete only namespaces labelled ` + labelStack + `, and change only namespaces it labels or labelled: not " + request.?name.orValue("")`,
			},
			{
				// A namespace's own request names it as its namespace, with
				// no namespace object.
				Expression:        `request.resource.resource == "namespaces" || request.?namespace.orValue("") == "" || ` + label("namespaceObject", labelStack) + ` != ""`,
				MessageExpression: `"the drastack operator writes namespaced objects only in namespaces labelled ` + labelStack + `: not " + ` + target,
			},
		},
	}, nil)
}

// stackParams makes a policy read the DRAStack.
var stackParams = &admissionregistrationv1.ParamKind{APIVersion: v1alpha1.GroupVersion.String(), Kind: "DRAStack"}

// stackParamRef binds a policy to the DRAStack default. Without one, the
// policy is not evaluated (Allow): Deny would refuse every request the
// binding matches, whatever the match conditions say, since the API server
// collects params before it evaluates them.
func stackParamRef() *admissionregistrationv1.ParamRef {
	return &admissionregistrationv1.ParamRef{
		Name:                    stackName,
		ParameterNotFoundAction: ptr.To(admissionregistrationv1.AllowAction),
	}
}

// driverNamespace: the namespace the operator creates, or takes in by
// labelling it (one that already existed), is the DRAStack's
// spec.namespace, never another (internal/controller/driver
// applyNamespace). While there is no DRAStack the policy is not evaluated
// (see stackParamRef); the driver lifecycle has nothing to install then.
func driverNamespace(u string) Pair {
	ns := `params.spec.?namespace.orValue(` + str(defaultDriverNamespace) + `)`
	return newPair(DriverNamespace, admissionregistrationv1.ValidatingAdmissionPolicySpec{
		ParamKind:        stackParams,
		MatchConstraints: matching(rules("", []string{"namespaces"}, opCreate, opUpdate)),
		MatchConditions: []admissionregistrationv1.MatchCondition{
			operatorOnly(u),
			{Name: "takes-in", Expression: `request.operation == "CREATE" || ` + label("oldObject", labelStack) + ` == ""`},
		},
		Validations: []admissionregistrationv1.Validation{{
			Expression:        `object.metadata.name == ` + ns,
			MessageExpression: `"the drastack operator may create or take in only the driver namespace of DRAStack ` + stackName + ` (spec.namespace " + ` + ns + ` + "), not " + object.metadata.name`,
		}},
	}, stackParamRef())
}

// builtinRoles are roles no driver profile binds: the aggregated
// user-facing ones (system: roles are refused by prefix).
var builtinRoles = []string{"cluster-admin", "admin", "edit", "view"}

// roleBindings: a binding the operator writes binds the role of its own
// name, as every driver profile's binding does (a test of this package
// checks all of internal/driver's profiles), and only to ServiceAccounts; a
// RoleBinding only to those of its namespace. With ownedObjects (the
// binding carries the operator's labels) and RBAC's own escalation check
// (it can bind only roles whose every rule it holds), the operator cannot
// hand its permissions to users, groups or the ServiceAccounts of other
// namespaces, nor bind a built-in role.
func roleBindings(u string) Pair {
	return newPair(RoleBindings, admissionregistrationv1.ValidatingAdmissionPolicySpec{
		MatchConstraints: matching(rules("rbac.authorization.k8s.io", []string{"rolebindings", "clusterrolebindings"}, opCreate, opUpdate)),
		MatchConditions:  []admissionregistrationv1.MatchCondition{operatorOnly(u)},
		Validations: []admissionregistrationv1.Validation{
			{
				Expression:        `object.roleRef.name == object.metadata.name`,
				MessageExpression: `"a binding the drastack operator writes binds the role of its own name (the driver profiles' convention): " + object.metadata.name + " refers to " + object.roleRef.kind + " " + object.roleRef.name`,
			},
			{
				Expression:        `!object.roleRef.name.startsWith("system:") && !(object.roleRef.name in ` + strList(builtinRoles) + `)`,
				MessageExpression: `"the drastack operator never binds built-in roles: " + object.roleRef.name`,
			},
			{
				Expression: `object.?subjects.orValue([]).all(s, s.kind == "ServiceAccount")`,
				Message:    "the drastack operator binds roles only to ServiceAccounts, never to users or groups",
			},
			{
				Expression: `request.resource.resource != "rolebindings" || object.?subjects.orValue([]).all(s, s.?namespace.orValue(request.?namespace.orValue("")) == request.?namespace.orValue(""))`,
				Message:    "a RoleBinding the drastack operator writes binds only ServiceAccounts of its own namespace",
			},
		},
	}, nil)
}

// HeldResources are the resources the operator holds write access to only
// to grant it to the drivers it installs (RBAC lets nobody grant a
// permission they do not hold): its code never writes them. The RBAC
// markers that grant them say "Held only to grant"; a test of
// internal/permissions checks the two lists agree.
var HeldResources = []schema.GroupResource{
	{Resource: "nodes"},
	{Group: "resource.k8s.io", Resource: "resourceclaimtemplates"},
	{Group: "resource.nvidia.com", Resource: "computedomains"},
	{Group: "resource.nvidia.com", Resource: "computedomains/status"},
	{Group: "resource.nvidia.com", Resource: "computedomaincliques"},
}

// heldToGrant refuses every write of the operator to HeldResources.
func heldToGrant(u string) Pair {
	byGroup := map[string][]string{}
	var groups []string
	for _, gr := range HeldResources {
		if _, ok := byGroup[gr.Group]; !ok {
			groups = append(groups, gr.Group)
		}
		byGroup[gr.Group] = append(byGroup[gr.Group], gr.Resource)
	}
	var match []admissionregistrationv1.NamedRuleWithOperations
	for _, g := range groups {
		match = append(match, rules(g, byGroup[g], writes...))
	}
	return newPair(HeldToGrant, admissionregistrationv1.ValidatingAdmissionPolicySpec{
		MatchConstraints: matching(match...),
		MatchConditions:  []admissionregistrationv1.MatchCondition{operatorOnly(u)},
		Validations: []admissionregistrationv1.Validation{{
			Expression: "false",
			MessageExpression: `"the drastack operator holds write access to " + request.resource.resource + ` +
				`(request.?subResource.orValue("") == "" ? "" : "/" + request.?subResource.orValue("")) + " only to grant it to the drivers it installs; it never writes them itself"`,
		}},
	}, nil)
}

// claimsAndSlices: the operator creates ResourceClaims only as dry runs
// (internal/clusterprobe), deletes none, and changes a claim (outside its
// status, which this policy does not match) only by adding or removing the
// delete-protection finalizer (internal/controller/claims write,
// removeFinalizer). It writes only node-less ResourceSlices: the multi-host
// publisher's (internal/controller/publisher); node-local slices are the
// kubelet plugins' (it deletes a removed driver's leftovers, which this
// policy lets through).
func claimsAndSlices(u, ns string) Pair {
	isClaim := `request.resource.resource == "resourceclaims"`
	// The sweep of a new allocation term writes its fence annotation on
	// unallocated operator claims (docs/allocation-protocol.md section 2).
	sameMeta := changedFieldsBut("object.metadata", "oldObject.metadata", "metadata.", []string{"labels", "annotations", "ownerReferences"}, fenceAnnotation)
	otherFinalizers := func(o string) string {
		return fmt.Sprintf(`%s.metadata.?finalizers.orValue([]).filter(f, f != %s)`, o, str(claimFinalizer))
	}
	return newPair(ClaimsAndSlices, admissionregistrationv1.ValidatingAdmissionPolicySpec{
		MatchConstraints: matching(
			rules("resource.k8s.io", []string{"resourceclaims"}, writes...),
			rules("resource.k8s.io", []string{"resourceslices"}, opCreate, opUpdate),
		),
		MatchConditions: []admissionregistrationv1.MatchCondition{operatorOnly(u)},
		Variables: []admissionregistrationv1.Variable{
			{Name: "claimChanges", Expression: isClaim + ` && request.operation == "UPDATE" ? ` + sameMeta + ` : []`},
		},
		Validations: []admissionregistrationv1.Validation{
			{
				Expression: `!(` + isClaim + `) || request.operation != "CREATE" || request.?dryRun.orValue(false) || (` + canaryIn(ns) + `)`,
				Message:    "the drastack operator creates ResourceClaims only as server-side dry runs (the cluster probe) and as the join barrier's canary claims in its own namespace",
			},
			{
				Expression: `!(` + isClaim + `) || request.operation != "DELETE" || (` + canaryIn(ns) + `)`,
				Message:    "the drastack operator never deletes ResourceClaims but the join barrier's canary claims in its own namespace",
			},
			{
				Expression:        `size(variables.claimChanges) == 0`,
				MessageExpression: `"the drastack operator changes a ResourceClaim only by its finalizer ` + claimFinalizer + `, not " + variables.claimChanges.join(", ")`,
			},
			{
				Expression: `!(` + isClaim + `) || request.operation != "UPDATE" || ` + otherFinalizers("object") + ` == ` + otherFinalizers("oldObject"),
				Message:    "the drastack operator adds or removes only the finalizer " + claimFinalizer + " of a ResourceClaim",
			},
			{
				Expression: isClaim + ` || request.?dryRun.orValue(false) || object.spec.?nodeName.orValue("") == ""`,
				Message:    "the drastack operator publishes only node-less ResourceSlices (spec.multiHost); node-local slices are the kubelet plugins'",
			},
		},
	}, nil)
}

// stackFinalizers: the operator changes the DRAStack itself (not its
// status) only to add or remove its finalizers (internal/controller/driver
// setFinalizer, internal/controller/claims taintrules.go): the spec, labels,
// annotations and the finalizers of others stay as the administrator wrote
// them.
func stackFinalizers(u string) Pair {
	others := func(o string) string {
		return fmt.Sprintf(`%s.metadata.?finalizers.orValue([]).filter(f, !f.startsWith(%s))`, o, str(stackFinalizerPrefix))
	}
	isUpdate := `request.operation == "UPDATE"`
	return newPair(StackFinalizers, admissionregistrationv1.ValidatingAdmissionPolicySpec{
		MatchConstraints: matching(rules(v1alpha1.GroupVersion.Group, []string{"drastacks"}, writes...)),
		MatchConditions:  []admissionregistrationv1.MatchCondition{operatorOnly(u)},
		Variables: []admissionregistrationv1.Variable{
			{Name: "changed", Expression: isUpdate + ` ? ` +
				changedFieldsBut("object.metadata", "oldObject.metadata", "metadata.", []string{"labels", "annotations", "ownerReferences"}, fenceAnnotation) +
				` + (object.?spec == oldObject.?spec ? [] : ["spec"]) : []`},
		},
		Validations: []admissionregistrationv1.Validation{
			{Expression: isUpdate, Message: "the drastack operator never creates or deletes the DRAStack"},
			{
				Expression:        `size(variables.changed) == 0`,
				MessageExpression: `"the drastack operator changes the DRAStack only by its own finalizers, not " + variables.changed.join(", ")`,
			},
			{
				Expression: `!(` + isUpdate + `) || ` + others("object") + ` == ` + others("oldObject"),
				Message:    "the drastack operator adds or removes only its own finalizers (" + stackFinalizerPrefix + "*) of the DRAStack",
			},
		},
	}, nil)
}

// webhookCABundle: the operator changes its webhook configuration only by
// the caBundle of its webhooks (internal/webhookcert CABundleInjector);
// RBAC already limits it to the one configuration by name. Webhook fields
// a newer API version adds are not compared.
func webhookCABundle(u string) Pair {
	var same []string
	for _, f := range jsonFields(reflect.TypeFor[admissionregistrationv1.MutatingWebhook](), "name", "clientConfig") {
		same = append(same, fmt.Sprintf("w.?%s == o.?%s", f, f))
	}
	same = append(same, "w.clientConfig.?service == o.clientConfig.?service", "w.clientConfig.?url == o.clientConfig.?url")
	isUpdate := `request.operation == "UPDATE"`
	return newPair(WebhookCABundle, admissionregistrationv1.ValidatingAdmissionPolicySpec{
		MatchConstraints: matching(rules("admissionregistration.k8s.io", []string{"mutatingwebhookconfigurations"}, writes...)),
		MatchConditions:  []admissionregistrationv1.MatchCondition{operatorOnly(u)},
		Variables: []admissionregistrationv1.Variable{
			{Name: "changed", Expression: isUpdate + ` ? ` + changedFields("object.metadata", "oldObject.metadata", "metadata.", metadataFields) + ` : []`},
		},
		Validations: []admissionregistrationv1.Validation{
			{Expression: isUpdate, Message: "the drastack operator never creates or deletes webhook configurations"},
			{
				Expression:        `size(variables.changed) == 0`,
				MessageExpression: `"the drastack operator changes its webhook configuration only by the caBundle of its webhooks, not " + variables.changed.join(", ")`,
			},
			{
				Expression: `!(` + isUpdate + `) || (size(object.?webhooks.orValue([])) == size(oldObject.?webhooks.orValue([])) && ` +
					`object.?webhooks.orValue([]).all(w, oldObject.?webhooks.orValue([]).exists(o, o.name == w.name && ` + strings.Join(same, " && ") + `)))`,
				Message: "the drastack operator changes its webhook configuration only by the caBundle of its webhooks",
			},
		},
	}, nil)
}
