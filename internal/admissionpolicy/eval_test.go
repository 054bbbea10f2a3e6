package admissionpolicy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	celgo "github.com/google/cel-go/cel"
	celtypes "github.com/google/cel-go/common/types"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
)

// The table tests run the policies' CEL through the API server's own
// validator (k8s.io/apiserver), the way its ValidatingAdmissionPolicy
// plugin compiles a policy: match conditions, variables, validations and
// message expressions, with the Kubernetes CEL libraries. The objects are
// untyped here (the API server types them from its OpenAPI schema); the
// e2e tests run the same policies in a real API server.

// req is one admission request.
type req struct {
	op        admission.Operation
	user      string
	group     string
	resource  string
	sub       string
	namespace string
	name      string
	obj, old  map[string]any
	dryRun    bool
	// params is the DRAStack; nil: there is none.
	params map[string]any
	// nsLabels are the labels of the request's namespace.
	nsLabels map[string]string
}

// verdict is what a policy makes of a request.
type verdict struct {
	matched bool
	denied  bool
	message string
}

// decide evaluates pair on r as the API server would: the policy's and the
// binding's resource rules, the param (a missing DRAStack skips a
// parameterized policy: parameterNotFoundAction Allow), then the compiled
// policy.
func decide(t *testing.T, p Pair, r req) verdict {
	t.Helper()
	if !rulesMatch(p.Policy.Spec.MatchConstraints, r) {
		return verdict{}
	}
	if mr := p.Binding.Spec.MatchResources; mr != nil && !rulesMatch(mr, r) {
		return verdict{}
	}
	var params runtime.Object
	if p.Policy.Spec.ParamKind != nil {
		if r.params == nil {
			if a := p.Binding.Spec.ParamRef.ParameterNotFoundAction; a == nil || *a != admissionregistrationv1.AllowAction {
				t.Fatalf("policy %s: a missing param would not be allowed", p.Policy.Name)
			}
			return verdict{}
		}
		params = &unstructured.Unstructured{Object: r.params}
	}
	gvr := schema.GroupVersionResource{Group: r.group, Version: "v1", Resource: r.resource}
	gvk := schema.GroupVersionKind{Group: r.group, Version: "v1", Kind: "Object"}
	var obj, old runtime.Object
	if r.obj != nil {
		obj = &unstructured.Unstructured{Object: r.obj}
	}
	if r.old != nil {
		old = &unstructured.Unstructured{Object: r.old}
	}
	attrs := admission.NewAttributesRecord(obj, old, gvk, r.namespace, r.name, gvr, r.sub, r.op, nil, r.dryRun,
		&user.DefaultInfo{Name: r.user})
	va := &admission.VersionedAttributes{Attributes: attrs, VersionedKind: gvk}
	if obj != nil {
		va.VersionedObject.Set(obj)
	}
	if old != nil {
		va.VersionedOldObject.Set(old)
	}
	var ns *corev1.Namespace
	if r.resource == "namespaces" {
		// As the API server: a namespace's request names the namespace
		// itself, and has no namespace object.
		r.namespace = r.name
		attrs = admission.NewAttributesRecord(obj, old, gvk, r.namespace, r.name, gvr, r.sub, r.op, nil, r.dryRun, &user.DefaultInfo{Name: r.user})
		va.Attributes = attrs
	} else if r.namespace != "" {
		ns = &corev1.Namespace{}
		ns.Name, ns.Labels = r.namespace, r.nsLabels
	}
	c, err := compile(p.Policy)
	if err != nil {
		t.Fatalf("policy %s does not compile: %v", p.Policy.Name, err)
	}
	ctx := context.Background()
	if c.matcher != nil {
		m := c.matcher.Match(ctx, va, params, nil)
		if m.Error != nil {
			// failurePolicy Fail: an error refuses the request.
			return verdict{matched: true, denied: true, message: m.Error.Error()}
		}
		if !m.Matches {
			return verdict{}
		}
	}
	request := plugincel.CreateAdmissionRequest(attrs, metav1.GroupVersionResource(gvr), metav1.GroupVersionKind(gvk))
	nsObj := plugincel.CreateNamespaceObject(ns)
	results, _, err := c.validations.ForInput(ctx, va, request, plugincel.OptionalVariableBindings{VersionedParams: params}, nsObj, celconfig.RuntimeCELCostBudget)
	if err != nil {
		return verdict{matched: true, denied: true, message: err.Error()}
	}
	messages, _, err := c.messages.ForInput(ctx, va, request, plugincel.OptionalVariableBindings{VersionedParams: params}, nsObj, celconfig.RuntimeCELCostBudget)
	if err != nil {
		t.Fatalf("policy %s: message expressions: %v", p.Policy.Name, err)
	}
	out := verdict{matched: true}
	var msgs []string
	for i, res := range results {
		switch {
		case res.Error != nil:
			msgs = append(msgs, "error: "+res.Error.Error())
		case res.EvalResult != celtypes.True:
			msg := p.Policy.Spec.Validations[i].Message
			if m := messages[i]; m.ExpressionAccessor != nil && m.Error == nil {
				if s, ok := m.EvalResult.Value().(string); ok {
					msg = s
				}
			} else if m.Error != nil {
				t.Errorf("policy %s validation %d: message expression: %v", p.Policy.Name, i, m.Error)
			}
			msgs = append(msgs, msg)
		default:
			continue
		}
		out.denied = true
	}
	out.message = strings.Join(msgs, "; ")
	return out
}

// rulesMatch applies resource rules (group, resource/subresource,
// operation, resourceNames); versions are "*" in every rule of the set.
func rulesMatch(mr *admissionregistrationv1.MatchResources, r req) bool {
	res := r.resource
	if r.sub != "" {
		res += "/" + r.sub
	}
	for _, rule := range mr.ResourceRules {
		if !slices.Contains(rule.APIGroups, r.group) && !slices.Contains(rule.APIGroups, "*") {
			continue
		}
		if !slices.Contains(rule.Resources, res) {
			continue
		}
		if !slices.Contains(rule.Operations, admissionregistrationv1.OperationType(r.op)) {
			continue
		}
		if len(rule.ResourceNames) > 0 && !slices.Contains(rule.ResourceNames, r.name) {
			continue
		}
		return true
	}
	return false
}

// compiled is a policy as the API server's ValidatingAdmissionPolicy
// plugin compiles it (k8s.io/apiserver policy/validating compilePolicy):
// variables stored in one composited compiler, then match conditions,
// validations and message expressions (the latter without the
// authorizer).
type compiled struct {
	matcher     matchconditions.Matcher
	validations plugincel.ConditionEvaluator
	messages    plugincel.ConditionEvaluator
}

// celExpr is a CEL expression with the types it must return.
type celExpr struct {
	expr  string
	types []*celgo.Type
	name  string
}

func (e *celExpr) GetExpression() string      { return e.expr }
func (e *celExpr) ReturnTypes() []*celgo.Type { return e.types }
func (e *celExpr) GetName() string            { return e.name }
func boolExpr(s string) plugincel.ExpressionAccessor {
	return &celExpr{expr: s, types: []*celgo.Type{celgo.BoolType}}
}

func compile(p *admissionregistrationv1.ValidatingAdmissionPolicy) (*compiled, error) {
	hasParams := p.Spec.ParamKind != nil
	vars := plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true}
	msgVars := plugincel.OptionalVariableDeclarations{HasParams: hasParams}
	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		return nil, err
	}
	named := make([]plugincel.NamedExpressionAccessor, len(p.Spec.Variables))
	for i, v := range p.Spec.Variables {
		named[i] = &celExpr{name: v.Name, expr: v.Expression, types: []*celgo.Type{celgo.AnyType}}
	}
	var errs []string
	for _, v := range named {
		if res := compiler.CompileAndStoreVariable(v, vars, environment.StoredExpressions); res.Error != nil {
			errs = append(errs, "variable "+v.GetName()+": "+res.Error.Error())
		}
	}
	out := &compiled{}
	check := func(what string, exprs []plugincel.ExpressionAccessor, decls plugincel.OptionalVariableDeclarations) plugincel.ConditionEvaluator {
		for i, e := range exprs {
			if e == nil {
				continue
			}
			if res := compiler.CompileAndStoreVariable(&celExpr{name: "check", expr: e.GetExpression(), types: e.ReturnTypes()}, decls, environment.StoredExpressions); res.Error != nil {
				errs = append(errs, fmt.Sprintf("%s %d: %v", what, i, res.Error))
			}
		}
		return compiler.CompileCondition(exprs, decls, environment.StoredExpressions)
	}
	if len(p.Spec.MatchConditions) > 0 {
		conds := make([]plugincel.ExpressionAccessor, len(p.Spec.MatchConditions))
		for i := range p.Spec.MatchConditions {
			conds[i] = (*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i])
		}
		out.matcher = matchconditions.NewMatcher(check("match condition", conds, vars), p.Spec.FailurePolicy, "policy", "validate", p.Name)
	}
	validations := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	messages := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	for i, v := range p.Spec.Validations {
		validations[i] = boolExpr(v.Expression)
		if v.MessageExpression != "" {
			messages[i] = &celExpr{expr: v.MessageExpression, types: []*celgo.Type{celgo.StringType}}
		}
	}
	out.validations = check("validation", validations, vars)
	out.messages = check("message expression", messages, msgVars)
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return out, nil
}

// TestEveryPolicyCompiles compiles every expression of the set (and of a
// probe) with the API server's CEL environment.
func TestEveryPolicyCompiles(t *testing.T) {
	pairs := append(Set(DefaultIdentity), ProbePair(DefaultIdentity, "0123456789ab"))
	for _, p := range pairs {
		if _, err := compile(p.Policy); err != nil {
			t.Errorf("policy %s: %v", p.Policy.Name, err)
		}
	}
}
