package native

import (
	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"

	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/library"
)

// plainProgram compiles expr in the plain environment; nil when that fails
// (the tracked program is used then).
func (c *constraintCompiler) plainProgram(expr string) cel.Program {
	if c.plain == nil {
		return nil
	}
	ast, issues := c.plain.Compile(expr)
	if issues != nil && issues.Err() != nil {
		return nil
	}
	prog, err := c.plain.Program(ast, cel.InterruptCheckFrequency(celconfig.CheckFrequency), cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil
	}
	return prog
}

// plainEnvOptions are the libraries of the Kubernetes CEL environment for
// stored expressions (k8s.io/apiserver/pkg/cel/environment, base.go, at the
// version in go.mod) plus the constraint's own declarations, without the
// program options that track cost. TestPlainEnvironmentAgrees checks that
// both environments give the same results.
func plainEnvOptions() []cel.EnvOption {
	return []cel.EnvOption{
		cel.HomogeneousAggregateLiterals(),
		cel.EagerlyValidateDeclarations(true),
		cel.DefaultUTCTimeZone(true),
		library.URLs(),
		library.Regex(),
		library.Authz(),
		cel.CrossTypeNumericComparisons(true),
		cel.OptionalTypes(),
		library.Quantity(),
		ext.Strings(ext.StringsVersion(2)),
		ext.Sets(),
		library.IP(),
		library.CIDR(),
		library.Format(),
		library.AuthzSelectors(),
		ext.TwoVarComprehensions(),
		library.SemverLib(library.SemverVersion(1)),
		ext.Lists(ext.ListsVersion(3)),
		library.Lists(library.ListsVersion(1)),
		ext.Bindings(ext.BindingsVersion(0)),
		library.IncludesOption(),
		cel.Variable(devicesVar, cel.ListType(cel.DynType)),
	}
}
