package verify

import (
	"fmt"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/ext"
	"k8s.io/apiserver/pkg/cel/environment"
)

// constraintCostLimit is the runtime cost limit of one evaluation of a CEL
// constraint: the selector limit, as SEMANTICS.md specifies.
const constraintCostLimit = 1_000_000

// constraintEnv is the CEL environment of KEP-5254 constraints: the
// Kubernetes base environment (lists, quantities, semver, regex, ...) with
// cel.bind and one variable, devices, a list of objects with driver,
// attributes and capacity. Values are dynamic: an attribute may be a scalar
// or a list.
var constraintEnv = sync.OnceValues(func() (*cel.Env, error) {
	base, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Env(environment.StoredExpressions)
	if err != nil {
		return nil, fmt.Errorf("load Kubernetes CEL base environment: %w", err)
	}
	env, err := base.Extend(
		cel.Variable("devices", cel.ListType(cel.DynType)),
		ext.Bindings(ext.BindingsVersion(0)),
	)
	if err != nil {
		return nil, fmt.Errorf("extend CEL environment for constraints: %w", err)
	}
	return env, nil
})

// programs caches compiled constraints by expression; there are few
// distinct ones and each is used for many claims.
var programs sync.Map // string -> compiled

type compiled struct {
	prog cel.Program
	err  error
}

// compileConstraint compiles an expression that must return a bool.
func compileConstraint(expr string) (cel.Program, error) {
	if c, ok := programs.Load(expr); ok {
		return c.(compiled).prog, c.(compiled).err
	}
	prog, err := doCompile(expr)
	programs.Store(expr, compiled{prog, err})
	return prog, err
}

func doCompile(expr string) (cel.Program, error) {
	env, err := constraintEnv()
	if err != nil {
		return nil, err
	}
	ast, issues := env.Compile(expr)
	if issues != nil && issues.Err() != nil {
		return nil, fmt.Errorf("compile: %w", issues.Err())
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) && !t.IsExactType(cel.DynType) {
		return nil, fmt.Errorf("expression returns %s, want bool", t)
	}
	prog, err := env.Program(ast, cel.CostLimit(constraintCostLimit), cel.InterruptCheckFrequency(100))
	if err != nil {
		return nil, fmt.Errorf("program: %w", err)
	}
	return prog, nil
}

// defaultMap is a map whose missing keys read as an empty map, so that
// d.attributes["other.domain"] is empty rather than an error, as in
// selectors.
type defaultMap struct {
	traits.Mapper
	empty ref.Val
}

func newDefaultMap(m map[string]any) defaultMap {
	return defaultMap{
		Mapper: types.NewStringInterfaceMap(types.DefaultTypeAdapter, m),
		empty:  types.NewStringInterfaceMap(types.DefaultTypeAdapter, map[string]any{}),
	}
}

// Find returns the empty map for a missing key.
func (m defaultMap) Find(key ref.Val) (ref.Val, bool) {
	if v, ok := m.Mapper.Find(key); ok {
		return v, true
	}
	return m.empty, true
}

// Get returns the empty map for a missing key.
func (m defaultMap) Get(key ref.Val) ref.Val {
	v, _ := m.Find(key)
	return v
}
