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

var metricName = regexp.MustCompile(`drastack_[a-z_]+`)

// The three pool alerts of issue 4 are there, over this package's metrics;
// each alert has a severity and a summary. (config/prometheus checks every
// alert's expression against the metrics the whole operator registers,
// and test/opmetrics that the README lists them all.)
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
			used := metricName.FindAllString(r.Expr, -1)
			if len(used) == 0 {
				t.Errorf("%s: expression %q uses no drastack metric", r.Alert, r.Expr)
			}
			for _, m := range used {
				if strings.HasPrefix(r.Alert, "DevicePool") && !slices.Contains(exposed, m) {
					t.Errorf("%s: expression uses %s, which the pool controller does not serve", r.Alert, m)
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
