// Package prometheus reads the operator's alert rules: the PrometheusRule
// of prometheusrule.yaml (for the Prometheus Operator) turned into the rule
// file a plain Prometheus and promtool load. The promtool tests of
// alerts_test.yaml and the e2e suite that runs a real Prometheus against
// the operator use it.
package prometheus

import (
	_ "embed"
	"fmt"
	"time"

	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"
)

//go:embed prometheusrule.yaml
var prometheusRule []byte

// Rule is one alerting or recording rule.
type Rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Group is a rule group.
type Group struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []Rule `json:"rules"`
}

// Groups returns the rule groups of the PrometheusRule. It fails on a
// document that is not a PrometheusRule, a rule that is neither an alert
// nor a recording rule, or a `for` that is no Prometheus duration.
func Groups() ([]Group, error) {
	var doc struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       struct {
			Groups []Group `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(prometheusRule, &doc); err != nil {
		return nil, fmt.Errorf("prometheusrule.yaml: %w", err)
	}
	if doc.APIVersion != "monitoring.coreos.com/v1" || doc.Kind != "PrometheusRule" {
		return nil, fmt.Errorf("prometheusrule.yaml: %s %s is not a monitoring.coreos.com/v1 PrometheusRule", doc.APIVersion, doc.Kind)
	}
	if len(doc.Spec.Groups) == 0 {
		return nil, fmt.Errorf("prometheusrule.yaml: spec.groups is empty")
	}
	for i, g := range doc.Spec.Groups {
		for j, r := range g.Rules {
			path := fmt.Sprintf("prometheusrule.yaml: spec.groups[%d].rules[%d]", i, j)
			if (r.Alert == "") == (r.Record == "") {
				return nil, fmt.Errorf("%s: set exactly one of alert and record", path)
			}
			if r.Expr == "" {
				return nil, fmt.Errorf("%s (%s%s): expr is empty", path, r.Alert, r.Record)
			}
			if r.For != "" {
				if _, err := model.ParseDuration(r.For); err != nil {
					return nil, fmt.Errorf("%s (%s).for: %w", path, r.Alert, err)
				}
			}
		}
	}
	return doc.Spec.Groups, nil
}

// Alerts returns every alerting rule of groups.
func Alerts(groups []Group) []Rule {
	var out []Rule
	for _, g := range groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

// RuleFile renders groups as a Prometheus rule file. forOverride replaces
// the `for` of the alerts it names (a test that cannot wait five minutes);
// naming an alert that does not exist is an error, so an override cannot
// silently outlive its alert.
func RuleFile(groups []Group, forOverride map[string]time.Duration) ([]byte, error) {
	left := map[string]bool{}
	for name := range forOverride {
		left[name] = true
	}
	out := make([]Group, len(groups))
	for i, g := range groups {
		out[i] = g
		out[i].Rules = make([]Rule, len(g.Rules))
		for j, r := range g.Rules {
			if d, ok := forOverride[r.Alert]; ok && r.Alert != "" {
				r.For = model.Duration(d).String()
				delete(left, r.Alert)
			}
			out[i].Rules[j] = r
		}
	}
	for name := range left {
		return nil, fmt.Errorf("for override of %s: no such alert", name)
	}
	return yaml.Marshal(struct {
		Groups []Group `json:"groups"`
	}{out})
}
