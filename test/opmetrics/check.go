package opmetrics

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// TargetLabels are the labels Prometheus adds to every series it scrapes:
// job and instance always, the others from the Kubernetes discovery of a
// ServiceMonitor (config/prometheus).
var TargetLabels = []string{"job", "instance", "namespace", "service", "pod", "container", "endpoint"}

// Use is one metric an expression selects.
type Use struct {
	// Series is the name as written (a histogram's with its suffix).
	Series string
	// Family is the family the series belongs to.
	Family Family
}

var promql = parser.NewParser(parser.Options{})

// Parse parses expr with Prometheus' PromQL parser.
func Parse(expr string) (parser.Expr, error) {
	return promql.ParseExpr(expr)
}

// Check parses expr with Prometheus' parser and checks it against the
// catalog: every series it selects names a registered family, a histogram
// only through _bucket, _sum or _count and a summary through its name, _sum or _count; every label it matches on is
// one those series carry; every label it aggregates by, or matches vectors
// on, is carried by a series below it; and it selects at least one metric.
// It returns the metrics the expression selects.
func (c *Catalog) Check(expr string) ([]Use, error) {
	root, err := Parse(expr)
	if err != nil {
		return nil, err
	}
	return c.check(root)
}

// check checks the parsed expression against the registered families.
func (c *Catalog) check(root parser.Expr) ([]Use, error) {
	var (
		uses []Use
		errs []error
	)
	parser.Inspect(root, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			u, carried, err := c.selector(n)
			if err != nil {
				errs = append(errs, err)
				return nil
			}
			uses = append(uses, u)
			for _, m := range n.LabelMatchers {
				if m.Name != labels.MetricName && !slices.Contains(carried, m.Name) {
					errs = append(errs, fmt.Errorf("%s has no label %q (it has %s)", u.Series, m.Name, strings.Join(carried, ", ")))
				}
			}
		case *parser.AggregateExpr:
			if len(n.Grouping) > 0 {
				errs = append(errs, c.labelsBelow(n.Expr, n.Grouping, fmt.Sprintf("%s by/without", n.Op))...)
			}
		case *parser.BinaryExpr:
			if vm := n.VectorMatching; vm != nil {
				if vm.On {
					// on(): both sides must carry the labels.
					errs = append(errs, c.labelsBelow(n.LHS, vm.MatchingLabels, "vector matching on")...)
					errs = append(errs, c.labelsBelow(n.RHS, vm.MatchingLabels, "vector matching on")...)
				} else {
					errs = append(errs, c.labelsBelow(n, vm.MatchingLabels, "vector matching ignoring")...)
				}
				errs = append(errs, c.labelsBelow(n, vm.Include, "group_left/group_right")...)
			}
		}
		return nil
	})
	if len(uses) == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("selects no metric"))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return uses, nil
}

// selector resolves a vector selector to its family and the labels its
// series carry.
func (c *Catalog) selector(vs *parser.VectorSelector) (Use, []string, error) {
	lookup := c.Family
	name := vs.Name
	if name == "" {
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
	}
	if name == "" {
		return Use{}, nil, fmt.Errorf("selector %s names no metric: name one, so that the check can find it", vs)
	}
	if f, ok := lookup(name); ok {
		switch f.Kind {
		case Histogram:
			return Use{}, nil, fmt.Errorf("%s is a histogram: select %s_bucket, %s_sum or %s_count", name, name, name, name)
		case Summary:
			return Use{Series: name, Family: f}, seriesLabels(f, "quantile"), nil
		}
		return Use{Series: name, Family: f}, seriesLabels(f), nil
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		f, ok := lookup(base)
		if !ok {
			continue
		}
		switch {
		case f.Kind == Histogram && suffix == "_bucket":
			return Use{Series: name, Family: f}, seriesLabels(f, "le"), nil
		case f.Kind == Histogram || f.Kind == Summary:
			return Use{Series: name, Family: f}, seriesLabels(f), nil
		}
	}
	return Use{}, nil, fmt.Errorf("metric %s is not one the operator registers", name)
}

func seriesLabels(f Family, extra ...string) []string {
	out := append(slices.Clone(f.Labels), TargetLabels...)
	return append(out, extra...)
}

// labelsBelow checks that each of names is carried by some series selected
// under node. Functions that make labels up (label_replace, label_join,
// count_values) end the check: their labels are the query's own.
func (c *Catalog) labelsBelow(node parser.Node, names []string, what string) []error {
	have := map[string]bool{}
	madeUp := false
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		switch x := n.(type) {
		case *parser.Call:
			if x.Func.Name == "label_replace" || x.Func.Name == "label_join" {
				madeUp = true
			}
		case *parser.AggregateExpr:
			if x.Op == parser.COUNT_VALUES {
				madeUp = true
			}
		case *parser.VectorSelector:
			if _, ls, err := c.selector(x); err == nil {
				for _, l := range ls {
					have[l] = true
				}
			}
		}
		return nil
	})
	if madeUp {
		return nil
	}
	var errs []error
	for _, n := range names {
		if !have[n] {
			errs = append(errs, fmt.Errorf("%s label %q: no series selected below carries it", what, n))
		}
	}
	return errs
}
