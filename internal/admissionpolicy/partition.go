package admissionpolicy

import (
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// The partition: policies on everyone else's requests, so that only the
// operator's allocator can ever use the central devices. The README's
// "Central devices" section relies on them.

// protectedRule says whether the DeviceTaintRule expression o is one of the
// operator's: central devices (internal/central) or a driver being removed
// (internal/driver), by its taint key or by its labels.
func protectedRule(o string) string {
	return fmt.Sprintf(`(%s.spec.?taint.?key.orValue("") in %s || (%s == %s && %s in ["central", "removal"]))`,
		o, strList([]string{centralTaintKey, removalTaintKey}), label(o, labelManagedBy), str(managedByValue), label(o, labelComponent))
}

// taintRules: nobody but the operator creates, changes or deletes its
// DeviceTaintRules. kube-scheduler honours them only while they exist, so
// whoever could delete one could hand central devices to kube-scheduler.
// Deletions by the garbage collector pass: a central rule is owned by its
// DRAStack and goes with it, after the operator's finalizer has let the
// DRAStack go. An administrator who must remove a rule by hand (the
// operator is gone for good) deletes this policy's binding first. One
// change is anyone's to make: the drastack.io/removal-policy annotation
// of a driver's removal rule, alone, which is how the README's Force
// recipe ends a Drain when the rule is all that is left of the driver
// (the operator then lifts the rule itself).
func taintRules(u string) Pair {
	oldA, newA := `oldObject.metadata.?annotations.orValue({})`, `object.metadata.?annotations.orValue({})`
	onlyRemovalPolicy := `request.operation == "UPDATE" && object.spec.?taint.?key.orValue("") == ` + str(removalTaintKey) +
		` && oldObject.spec.?taint.?key.orValue("") == ` + str(removalTaintKey) +
		` && object.spec == oldObject.spec && object.metadata.?labels == oldObject.metadata.?labels` +
		` && object.metadata.?finalizers == oldObject.metadata.?finalizers && object.metadata.?ownerReferences == oldObject.metadata.?ownerReferences` +
		fmt.Sprintf(` && %s.all(k, k == %s || (k in %s && %s[k] == %s[k])) && %s.all(k, k == %s || k in %s)`,
			newA, str(annotationRemovalPolicy), oldA, oldA, newA, oldA, str(annotationRemovalPolicy), newA)
	return newPair(TaintRules, admissionregistrationv1.ValidatingAdmissionPolicySpec{
		MatchConstraints: matching(rules("resource.k8s.io", []string{"devicetaintrules"}, writes...)),
		MatchConditions:  []admissionregistrationv1.MatchCondition{{Name: "not-the-drastack-operator", Expression: "!(" + isUser(u) + ")"}},
		Variables: []admissionregistrationv1.Variable{
			{Name: "protected", Expression: `(request.operation != "CREATE" && ` + protectedRule("oldObject") + `) || ` +
				`(request.operation != "DELETE" && ` + protectedRule("object") + `)`},
			{Name: "onlyRemovalPolicy", Expression: onlyRemovalPolicy},
		},
		Validations: []admissionregistrationv1.Validation{{
			Expression: `!variables.protected || (request.operation == "DELETE" && request.userInfo.username in ` + strList(garbageCollectors) + `) || variables.onlyRemovalPolicy`,
			MessageExpression: `"DeviceTaintRule " + request.?name.orValue("") + " is the drastack operator's (taint key ` + centralTaintKey + ` or ` + removalTaintKey +
				`, or its labels): only the operator (` + u + `) may ` + `" + request.operation.lowerAscii() + " it"`,
		}},
	}, nil)
}

// claimSpec and claimMeta are, for a ResourceClaim or a
// ResourceClaimTemplate, the claim spec and the metadata of the claims
// (a template's spec.metadata is copied onto the claims made from it).
func claimSpec(o string) string {
	return fmt.Sprintf(`(request.resource.resource == "resourceclaims" ? dyn(%s.spec) : dyn(%s.spec.spec))`, o, o)
}

func claimMeta(o string) string {
	return fmt.Sprintf(`(request.resource.resource == "resourceclaims" ? dyn(%s.metadata) : dyn(%s.spec.?metadata.orValue({})))`, o, o)
}

// claimResources are the objects that are or make claims.
func claimRules() admissionregistrationv1.NamedRuleWithOperations {
	return rules("resource.k8s.io", []string{"resourceclaims", "resourceclaimtemplates"}, opCreate, opUpdate)
}

// toleratesCentral says whether the toleration expression t tolerates the
// central taint: it names its key (whatever its operator and effect: no
// one has a reason to name it), or tolerates every key with the taint's
// effect NoSchedule or with every effect.
func toleratesCentral(t string) string {
	return fmt.Sprintf(`(%s.?key.orValue("") == %s || (%s.?key.orValue("") == "" && %s.?operator.orValue("Equal") == "Exists" && %s.?effect.orValue("") in ["", "NoSchedule"]))`,
		t, str(centralTaintKey), t, t, t)
}

// claimTolerations: no ResourceClaim or ResourceClaimTemplate tolerates
// the central taint. A claim that did would be kube-scheduler's and could
// get a central device next to the operator's allocations. Requests with
// adminAccess are let through: an admin-access allocation does not make a
// device unavailable to others (monitoring agents tolerate every taint to
// see every device). Claim specs are immutable, so an update is checked
// only if it changes the spec.
func claimTolerations() Pair {
	return newPair(ClaimTolerations, admissionregistrationv1.ValidatingAdmissionPolicySpec{
		MatchConstraints: matching(claimRules()),
		MatchConditions: []admissionregistrationv1.MatchCondition{{
			Name:       "new-spec",
			Expression: `request.operation == "CREATE" || ` + claimSpec("object") + ` != ` + claimSpec("oldObject"),
		}},
		Variables: []admissionregistrationv1.Variable{
			{Name: "tolerating", Expression: claimSpec("object") + `.devices.?requests.orValue([]).filter(r, ` +
				`!r.?exactly.?adminAccess.orValue(false) && (` +
				`r.?exactly.?tolerations.orValue([]).exists(t, ` + toleratesCentral("t") + `) || ` +
				`r.?firstAvailable.orValue([]).exists(s, s.?tolerations.orValue([]).exists(t, ` + toleratesCentral("t") + `)))).map(r, r.name)`},
		},
		Validations: []admissionregistrationv1.Validation{{
			Expression: `size(variables.tolerating) == 0`,
			MessageExpression: `"requests " + variables.tolerating.join(", ") + " of " + request.?name.orValue("") + " tolerate the taint ` + centralTaintKey +
				` (by its key, or every key with operator Exists): its devices are allocated only by the drastack operator; drop the toleration"`,
		}},
	}, nil)
}

// asksForOperator says whether the claim metadata expression m asks for the
// operator's allocation.
func asksForOperator(m string) string {
	return fmt.Sprintf(`(%s || %s.?labels[?%s].orValue("") == %s)`, hasAnnotation(m, celAnnotation), m, str(allocationLabel), str(immediateValue))
}

// centralClasses: a claim (or template) with the CEL constraints
// annotation or the Immediate label is allocated by the operator, from
// central devices only; every request, and every subrequest of a
// firstAvailable request, must name a class of spec.claims.central, whose
// classes match only central devices. Then kube-scheduler cannot allocate
// such a claim at all, even when the pod webhook missed its pod: no
// device a class of the claim matches is free of the central taint, and no
// claim tolerates it (claimTolerations). It is checked when a claim is
// created or gains or changes the annotation or label. Without a DRAStack
// the operator allocates nothing and the policy is not evaluated (see
// stackParamRef).
func centralClasses() Pair {
	meta, oldMeta := claimMeta("object"), claimMeta("oldObject")
	changed := fmt.Sprintf(`%s.?annotations[?%s] != %s.?annotations[?%s] || %s.?labels[?%s] != %s.?labels[?%s]`,
		meta, str(celAnnotation), oldMeta, str(celAnnotation), meta, str(allocationLabel), oldMeta, str(allocationLabel))
	inCentral := func(class string) string { return `variables.classLists.exists(cs, ` + class + ` in cs)` }
	return newPair(CentralClasses, admissionregistrationv1.ValidatingAdmissionPolicySpec{
		ParamKind:        stackParams,
		MatchConstraints: matching(claimRules()),
		MatchConditions: []admissionregistrationv1.MatchCondition{{
			Name:       "asks-for-the-operator",
			Expression: asksForOperator(meta) + ` && (request.operation == "CREATE" || ` + changed + `)`,
		}},
		Variables: []admissionregistrationv1.Variable{
			{Name: "classLists", Expression: `params.spec.?claims.?central.orValue([]).map(e, e.?classes.orValue([]))`},
			{Name: "offending", Expression: claimSpec("object") + `.devices.?requests.orValue([]).filter(r, !(` +
				`(!r.?exactly.hasValue() || ` + inCentral("r.exactly.deviceClassName") + `) && ` +
				`r.?firstAvailable.orValue([]).all(s, ` + inCentral("s.deviceClassName") + `))).map(r, r.name)`},
		},
		Validations: []admissionregistrationv1.Validation{{
			Expression: `size(variables.offending) == 0`,
			MessageExpression: `request.?name.orValue("") + " asks for the drastack operator's allocation (the annotation ` + celAnnotation + ` or the label ` +
				allocationLabel + `=` + immediateValue + `), so every request must name a class of spec.claims.central[].classes of DRAStack ` + stackName +
				` (now: " + variables.classLists.map(cs, cs.join(", ")).filter(s, s != "").join(", ") + "); requests " + variables.offending.join(", ") + " do not"`,
		}},
	}, stackParamRef())
}
