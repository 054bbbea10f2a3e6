package pool

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// exposed is every metric this package serves.
var exposed = []string{metricPools, metricPoolHealth, metricPoolDevices, metricCounterUtilisation, metricPoolProblems, metricValidationDuration,
	metricFreeCapacity, metricLargestAvailable}

// metricName matches this package's metrics; test/opmetrics checks the
// README and the alerts against every metric the operator registers.
var metricName = regexp.MustCompile(`drastack_pool[a-z_]*`)

// The README documents every pool metric, and no pool metric this package
// does not serve.
func TestREADMEDocumentsEveryMetric(t *testing.T) {
	raw, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	start := strings.Index(readme, "\n## Metrics")
	if start < 0 {
		t.Fatal("README has no Metrics section")
	}
	section := readme[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	for _, m := range exposed {
		if !strings.Contains(section, "| `"+m+"` |") {
			t.Errorf("README Metrics table lacks %s", m)
		}
	}
	for _, m := range metricName.FindAllString(section, -1) {
		if !slices.Contains(exposed, m) {
			t.Errorf("README mentions %s, which the operator does not serve", m)
		}
	}
}

// Every alert has an expression over metrics that exist, a severity and a
// summary; and the three alerts of issue 4 are there.
func TestPrometheusRuleUsesServedMetrics(t *testing.T) {
	raw, err := os.ReadFile("../../../config/prometheus/prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rule struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []struct {
					Alert       string            `json:"alert"`
					Expr        string            `json:"expr"`
					For         string            `json:"for"`
					Labels      map[string]string `json:"labels"`
					Annotations map[string]string `json:"annotations"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(raw, &rule); err != nil {
		t.Fatalf("parse: %v", err)
	}
	if rule.APIVersion != "monitoring.coreos.com/v1" || rule.Kind != "PrometheusRule" {
		t.Errorf("apiVersion %q, kind %q", rule.APIVersion, rule.Kind)
	}
	var alerts []string
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			for _, m := range metricName.FindAllString(r.Expr, -1) {
				if !slices.Contains(exposed, m) {
					t.Errorf("%s: expression uses %s, which the operator does not serve", r.Alert, m)
				}
			}
			if _, err := time.ParseDuration(r.For); err != nil {
				t.Errorf("%s: for %q: %v", r.Alert, r.For, err)
			}
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: needs a severity label, a summary and a description", r.Alert)
			}
		}
	}
	for _, want := range []string{"DevicePoolInvalid", "DevicePoolDegraded", "DevicePoolIncomplete"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("alert %s missing (have %v)", want, alerts)
		}
	}
}
