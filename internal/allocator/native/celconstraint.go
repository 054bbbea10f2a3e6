package native

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
	"github.com/google/cel-go/interpreter"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/version"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/library"
)

const (
	// constraintCostLimit is the runtime cost limit of one evaluation of a
	// CEL constraint: the same budget as one selector evaluation (KEP-5254).
	constraintCostLimit = resourceapi.CELSelectorExpressionMaxCost

	devicesVar = "devices"
)

// constraintCompiler compiles KEP-5254 constraint expressions in an
// environment built like kube-scheduler's selector environment (the
// Kubernetes CEL libraries: quantity, semver, lists with includes(), regex,
// cel.bind), with one variable: `devices`, a list of objects with driver,
// attributes and capacity. Results are cached by expression.
type constraintCompiler struct {
	once    sync.Once
	env     *cel.Env
	envErr  error
	adapter types.Adapter
	empty   ref.Val

	// deviceType is the declared type of one element of `devices`, for
	// cost estimation.
	deviceType *apiservercel.DeclType

	// plain is the environment without cost tracking (see forSize).
	plain *cel.Env

	mu    sync.Mutex
	progs map[string]*compiledConstraint
}

type compiledConstraint struct {
	prog cel.Program
	err  error
	// tracked is set when the worst-case cost estimate for 32 devices
	// exceeds the limit, so the cost must be tracked while evaluating.
	tracked bool
	ast     *cel.Ast
	// fast is the program from the plain environment (see forSize).
	fast cel.Program

	mu sync.Mutex
	// bySize holds programs for at most n devices: untracked when the
	// estimate for n devices stays within the limit, else prog.
	bySize map[int]cel.Program
}

func newConstraintCompiler() *constraintCompiler {
	return &constraintCompiler{progs: map[string]*compiledConstraint{}}
}

func (c *constraintCompiler) init() {
	c.once.Do(func() {
		withMax := func(t *apiservercel.DeclType, n int64) *apiservercel.DeclType {
			out := *t
			out.MaxElements = n
			return &out
		}
		field := func(name string, t *apiservercel.DeclType) *apiservercel.DeclField {
			return apiservercel.NewDeclField(name, t, true, nil, nil)
		}
		const perDevice = resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice
		domain := withMax(apiservercel.StringType, resourceapi.DeviceMaxDomainLength)
		id := withMax(apiservercel.StringType, resourceapi.DeviceMaxIDLength)
		value := withMax(apiservercel.DynType, max(resourceapi.DeviceAttributeMaxValueLength, resourceapi.ResourceSliceMaxAttributeValuesPerDevice))
		attrs := apiservercel.NewMapType(domain, apiservercel.NewMapType(id, value, perDevice), perDevice)
		capacity := apiservercel.NewMapType(domain, apiservercel.NewMapType(id, apiservercel.QuantityDeclType, perDevice), perDevice)
		deviceType := apiservercel.NewObjectType("drastack.ConstraintDevice", map[string]*apiservercel.DeclField{
			"driver":     field("driver", withMax(apiservercel.StringType, resourceapi.DriverNameMaxLength)),
			"attributes": field("attributes", attrs),
			"capacity":   field("capacity", capacity),
		})
		c.deviceType = deviceType
		envset, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Extend(environment.VersionedOptions{
			IntroducedVersion: version.MajorMinor(1, 31),
			EnvOptions: []cel.EnvOption{
				ext.Bindings(ext.BindingsVersion(0)),
				library.IncludesOption(),
				cel.Variable(devicesVar, cel.ListType(deviceType.CelType())),
			},
			DeclTypes: []*apiservercel.DeclType{deviceType},
		})
		if err != nil {
			c.envErr = fmt.Errorf("build CEL constraint environment: %w", err)
			return
		}
		c.env, c.envErr = envset.Env(environment.StoredExpressions)
		if plain, err := cel.NewEnv(plainEnvOptions()...); err == nil {
			c.plain = plain
		}
		if c.envErr == nil {
			c.adapter = c.env.CELTypeAdapter()
			c.empty = c.adapter.NativeToValue(map[string]any{})
		}
	})
}

// compile returns the program for expr, evaluated on at most maxDevices
// devices, or a compile error.
func (c *constraintCompiler) compile(expr string, maxDevices int) (cel.Program, error) {
	p := c.compiled(expr)
	if p.err != nil {
		return nil, p.err
	}
	return c.forSize(p, maxDevices), nil
}

// forSize returns the program to evaluate p on at most n devices.
//
// The Kubernetes environment tracks the cost of every evaluation step
// (and enforces the per-call limit, which is the constraint's limit too),
// which doubles the time of an evaluation; a search that proves a claim
// unsatisfiable evaluates the expression on every combination, so that
// matters. When the cost estimate for n devices with maximal attributes
// stays within the limit, the limit cannot be reached, and the program
// comes from the plain environment: the same libraries without cost
// tracking. Otherwise the tracked program enforces the limit.
func (c *constraintCompiler) forSize(p *compiledConstraint, n int) cel.Program {
	n = min(max(n, 1), resourceapi.AllocationResultsMaxSize)
	p.mu.Lock()
	defer p.mu.Unlock()
	if prog, ok := p.bySize[n]; ok {
		return prog
	}
	prog := p.prog
	if p.fast != nil {
		est, err := c.env.EstimateCost(p.ast, &library.CostEstimator{SizeEstimator: &sizeEstimator{devices: apiservercel.NewListType(c.deviceType, int64(n))}})
		if err == nil && est.Max <= constraintCostLimit {
			prog = p.fast
		}
	}
	if p.bySize == nil {
		p.bySize = map[int]cel.Program{}
	}
	p.bySize[n] = prog
	return prog
}

func (c *constraintCompiler) compiled(expr string) *compiledConstraint {
	c.init()
	if c.envErr != nil {
		return &compiledConstraint{err: c.envErr}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.progs[expr]; ok {
		return p
	}
	p := &compiledConstraint{}
	ast, issues := c.env.Compile(expr)
	switch {
	case issues != nil && issues.Err() != nil:
		p.err = fmt.Errorf("compilation failed: %s", issues.String())
	case ast.OutputType() != cel.BoolType && ast.OutputType() != cel.DynType:
		p.err = fmt.Errorf("must evaluate to bool, not %s", ast.OutputType())
	default:
		p.ast = ast
		p.prog, p.err = c.env.Program(ast, cel.InterruptCheckFrequency(celconfig.CheckFrequency), cel.CostLimit(constraintCostLimit))
		if p.err != nil {
			p.err = fmt.Errorf("program instantiation failed: %w", p.err)
			break
		}
		all := apiservercel.NewListType(c.deviceType, resourceapi.AllocationResultsMaxSize)
		est, err := c.env.EstimateCost(ast, &library.CostEstimator{SizeEstimator: &sizeEstimator{devices: all}})
		p.tracked = err != nil || est.Max > constraintCostLimit
		p.fast = c.plainProgram(expr)
	}
	if len(c.progs) >= selectorCacheEntries {
		c.progs = map[string]*compiledConstraint{}
	}
	c.progs[expr] = p
	return p
}

// errCostLimit marks an evaluation that ran out of its cost budget.
var errCostLimit = errors.New("CEL constraint exceeded its cost limit")

// eval runs a compiled constraint on a device set.
func (c *constraintCompiler) eval(ctx context.Context, prog cel.Program, devs []ref.Val) (bool, error) {
	out, _, err := prog.ContextEval(ctx, devicesActivation{types.NewRefValList(c.adapter, devs)})
	if err != nil {
		if strings.Contains(err.Error(), "cost limit") {
			return false, fmt.Errorf("%w (%d): %w", errCostLimit, constraintCostLimit, err)
		}
		if ctx.Err() != nil {
			return false, fmt.Errorf("%w: %w", err, context.Cause(ctx))
		}
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("result is %s, not bool", out.Type().TypeName())
	}
	return b, nil
}

// deviceValue converts a device to the CEL object constraints see: the same
// shape selectors see (attributes and capacity grouped by domain, the
// driver's domain for unqualified names, empty maps for unknown domains).
func (c *constraintCompiler) deviceValue(driver string, d *resourceapi.Device) (ref.Val, error) {
	c.init()
	if c.envErr != nil {
		return nil, c.envErr
	}
	// Everything is converted to CEL values once, so that evaluations
	// look values up without converting or allocating.
	attrs := map[string]map[string]ref.Val{}
	inner := func(m map[string]map[string]ref.Val, dom string) map[string]ref.Val {
		if m[dom] == nil {
			m[dom] = map[string]ref.Val{}
		}
		return m[dom]
	}
	for name, a := range d.Attributes {
		v, err := attributeValue(a)
		if err != nil {
			return nil, fmt.Errorf("attribute %s: %w", name, err)
		}
		dom, id := splitName(string(name), driver)
		inner(attrs, dom)[id] = c.adapter.NativeToValue(v)
	}
	capacity := map[string]map[string]ref.Val{}
	for name, q := range d.Capacity {
		dom, id := splitName(string(name), driver)
		val := q.Value
		inner(capacity, dom)[id] = apiservercel.Quantity{Quantity: &val}
	}
	outer := func(m map[string]map[string]ref.Val) ref.Val {
		vals := make(map[string]ref.Val, len(m))
		for k, v := range m {
			vals[k] = c.stringMap(v, nil)
		}
		return c.stringMap(vals, c.empty)
	}
	return c.stringMap(map[string]ref.Val{
		"driver":     types.String(driver),
		"attributes": outer(attrs),
		"capacity":   outer(capacity),
	}, nil), nil
}

func splitName(name, driver string) (string, string) {
	if i := strings.Index(name, "/"); i >= 0 {
		return name[:i], name[i+1:]
	}
	return driver, name
}

// devicesActivation binds `devices` without building a map per evaluation.
type devicesActivation struct{ devices ref.Val }

// ResolveName implements interpreter.Activation.
func (a devicesActivation) ResolveName(name string) (any, bool) {
	if name == devicesVar {
		return a.devices, true
	}
	return nil, false
}

// Parent implements interpreter.Activation.
func (devicesActivation) Parent() interpreter.Activation { return nil }
