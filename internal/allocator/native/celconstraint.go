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

	// devicesType is the declared type of `devices`, for cost estimation.
	devicesType *apiservercel.DeclType

	mu    sync.Mutex
	progs map[string]*compiledConstraint
}

type compiledConstraint struct {
	prog cel.Program
	err  error
	// tracked is set when the worst-case cost estimate exceeds the limit,
	// so the cost is tracked while evaluating.
	tracked bool
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
		// A constraint sees the devices of one claim: at most 32.
		c.devicesType = apiservercel.NewListType(deviceType, resourceapi.AllocationResultsMaxSize)
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
		if c.envErr == nil {
			c.adapter = c.env.CELTypeAdapter()
			c.empty = c.adapter.NativeToValue(map[string]any{})
		}
	})
}

// compile returns the program for expr or a compile error.
func (c *constraintCompiler) compile(expr string) (cel.Program, error) {
	c.init()
	if c.envErr != nil {
		return nil, c.envErr
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.progs[expr]; ok {
		return p.prog, p.err
	}
	p := &compiledConstraint{}
	ast, issues := c.env.Compile(expr)
	switch {
	case issues != nil && issues.Err() != nil:
		p.err = fmt.Errorf("compilation failed: %s", issues.String())
	case ast.OutputType() != cel.BoolType && ast.OutputType() != cel.DynType:
		p.err = fmt.Errorf("must evaluate to bool, not %s", ast.OutputType())
	default:
		opts := []cel.ProgramOption{cel.InterruptCheckFrequency(celconfig.CheckFrequency)}
		// Tracking the cost of every step makes evaluation a third slower.
		// When the worst case for 32 devices with maximal attributes stays
		// within the limit, the limit cannot be reached and is not tracked.
		est, err := c.env.EstimateCost(ast, &library.CostEstimator{SizeEstimator: &sizeEstimator{devices: c.devicesType}})
		if err != nil || est.Max > constraintCostLimit {
			opts = append(opts, cel.CostLimit(constraintCostLimit))
			p.tracked = true
		}
		p.prog, p.err = c.env.Program(ast, opts...)
		if p.err != nil {
			p.err = fmt.Errorf("program instantiation failed: %w", p.err)
		}
	}
	c.progs[expr] = p
	return p.prog, p.err
}

// errCostLimit marks an evaluation that ran out of its cost budget.
var errCostLimit = errors.New("CEL constraint exceeded its cost limit")

// eval runs a compiled constraint on a device set.
func (c *constraintCompiler) eval(ctx context.Context, prog cel.Program, devs []ref.Val) (bool, error) {
	list := types.NewRefValList(c.adapter, devs)
	out, _, err := prog.ContextEval(ctx, map[string]any{devicesVar: list})
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
	attrs := map[ref.Val]map[ref.Val]ref.Val{}
	inner := func(m map[ref.Val]map[ref.Val]ref.Val, dom string) map[ref.Val]ref.Val {
		k := types.String(dom)
		if m[k] == nil {
			m[k] = map[ref.Val]ref.Val{}
		}
		return m[k]
	}
	for name, a := range d.Attributes {
		v, err := attributeValue(a)
		if err != nil {
			return nil, fmt.Errorf("attribute %s: %w", name, err)
		}
		dom, id := splitName(string(name), driver)
		inner(attrs, dom)[types.String(id)] = c.adapter.NativeToValue(v)
	}
	capacity := map[ref.Val]map[ref.Val]ref.Val{}
	for name, q := range d.Capacity {
		dom, id := splitName(string(name), driver)
		val := q.Value
		inner(capacity, dom)[types.String(id)] = apiservercel.Quantity{Quantity: &val}
	}
	outer := func(m map[ref.Val]map[ref.Val]ref.Val) ref.Val {
		vals := make(map[ref.Val]ref.Val, len(m))
		for k, v := range m {
			vals[k] = types.NewRefValMap(c.adapter, v)
		}
		return defaultMap{types.NewRefValMap(c.adapter, vals), c.empty}
	}
	return types.NewRefValMap(c.adapter, map[ref.Val]ref.Val{
		types.String("driver"):     types.String(driver),
		types.String("attributes"): outer(attrs),
		types.String("capacity"):   outer(capacity),
	}), nil
}

func splitName(name, driver string) (string, string) {
	if i := strings.Index(name, "/"); i >= 0 {
		return name[:i], name[i+1:]
	}
	return driver, name
}
