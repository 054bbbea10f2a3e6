package prometheus

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"

	"github.com/drastack/drastack/test/opmetrics"
)

// TestRuleExpressions parses every rule's expression with Prometheus' own
// parser and checks that the metrics and labels it names are ones the
// operator registers (test/opmetrics reads them from controller-runtime's
// registry).
func TestRuleExpressions(t *testing.T) {
	catalog, err := opmetrics.Registered()
	if err != nil {
		t.Fatal(err)
	}
	groups, err := Groups()
	if err != nil {
		t.Fatal(err)
	}
	alerts := Alerts(groups)
	if len(alerts) == 0 {
		t.Fatal("no alerts")
	}
	names := map[string]bool{}
	for _, g := range groups {
		for _, r := range g.Rules {
			name := r.Alert + r.Record
			if names[name] {
				t.Errorf("rule %s twice", name)
			}
			names[name] = true
			if _, err := catalog.Check(r.Expr); err != nil {
				t.Errorf("%s: %s: %v", name, r.Expr, err)
			}
		}
	}
	for _, a := range alerts {
		if a.Labels["severity"] == "" || a.Annotations["summary"] == "" || a.Annotations["description"] == "" {
			t.Errorf("%s needs a severity label and summary and description annotations", a.Alert)
		}
	}
}

func TestRuleFileOverrides(t *testing.T) {
	groups, err := Groups()
	if err != nil {
		t.Fatal(err)
	}
	data, err := RuleFile(groups, map[string]time.Duration{"DevicePoolInvalid": 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []Group `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(data, &file); err != nil {
		t.Fatal(err)
	}
	for _, r := range Alerts(file.Groups) {
		want := r.For
		for _, orig := range Alerts(groups) {
			if orig.Alert == r.Alert {
				want = orig.For
			}
		}
		if r.Alert == "DevicePoolInvalid" {
			want = "3s"
		}
		if r.For != want {
			t.Errorf("%s: for %q, want %q", r.Alert, r.For, want)
		}
	}
	if _, err := RuleFile(groups, map[string]time.Duration{"NoSuchAlert": time.Second}); err == nil {
		t.Error("an override of an alert that does not exist was accepted")
	}
}

// promtoolTests is the part of alerts_test.yaml that TestAlertsAreTested
// reads.
type promtoolTests struct {
	RuleFiles          []string `json:"rule_files"`
	EvaluationInterval string   `json:"evaluation_interval"`
	Tests              []struct {
		Interval    string `json:"interval"`
		InputSeries []struct {
			Series string `json:"series"`
			Values string `json:"values"`
		} `json:"input_series"`
		AlertTests []struct {
			EvalTime  string `json:"eval_time"`
			AlertName string `json:"alertname"`
			ExpAlerts []struct {
				ExpLabels      map[string]string `json:"exp_labels"`
				ExpAnnotations map[string]string `json:"exp_annotations"`
			} `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestAlertsAreTested checks that alerts_test.yaml tests each alert: one
// evaluation expects it firing, with its labels and annotations; and the
// same test, one interval earlier, expects it not firing, at a time no
// later than its `for:` (so a `for:` that shrank, or a rule that fires at
// once, fails promtool).
func TestAlertsAreTested(t *testing.T) {
	groups, err := Groups()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var tests promtoolTests
	if err := yaml.UnmarshalStrict(data, &tests); err != nil {
		t.Fatalf("alerts_test.yaml: %v", err)
	}
	for _, a := range Alerts(groups) {
		forDur := mustDuration(t, a.For)
		bounded := false
		for _, tc := range tests.Tests {
			interval := mustDuration(t, tc.Interval)
			none, fire := map[time.Duration]bool{}, map[time.Duration]bool{}
			for _, at := range tc.AlertTests {
				if at.AlertName != a.Alert {
					continue
				}
				when := mustDuration(t, at.EvalTime)
				if len(at.ExpAlerts) == 0 {
					none[when] = true
					continue
				}
				fire[when] = true
				for _, e := range at.ExpAlerts {
					if e.ExpLabels["severity"] != a.Labels["severity"] || len(e.ExpAnnotations) != len(a.Annotations) {
						t.Errorf("%s at %s: expected alerts must name its severity and every annotation", a.Alert, at.EvalTime)
					}
				}
			}
			for when := range fire {
				if none[when-interval] && when-interval < forDur+interval && when >= forDur {
					bounded = true
				}
			}
		}
		if !bounded {
			t.Errorf("%s (for: %s): alerts_test.yaml has no test where it fires at or after %s and does not fire one interval before", a.Alert, a.For, a.For)
		}
	}
}

func mustDuration(t *testing.T, s string) time.Duration {
	t.Helper()
	if s == "" {
		return 0
	}
	d, err := model.ParseDuration(s)
	if err != nil {
		t.Fatalf("duration %q: %v", s, err)
	}
	return time.Duration(d)
}

// TestAlertsWithPromtool runs promtool on the rule file extracted from the
// PrometheusRule: `promtool check rules`, then `promtool test rules
// alerts_test.yaml`, which evaluates each alert on the test's series.
func TestAlertsWithPromtool(t *testing.T) {
	promtool, err := Binary("promtool")
	if err != nil {
		t.Fatal(err)
	}
	groups, err := Groups()
	if err != nil {
		t.Fatal(err)
	}
	rules, err := RuleFile(groups, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile("alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
			continue
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// TestPromtoolCatchesABrokenRule makes sure the promtool run above can
// fail: with DevicePoolInvalid's `for:` shortened to 1m, the test that
// expects no alert at 4m must fail.
func TestPromtoolCatchesABrokenRule(t *testing.T) {
	promtool, err := Binary("promtool")
	if err != nil {
		t.Fatal(err)
	}
	groups, err := Groups()
	if err != nil {
		t.Fatal(err)
	}
	rules, err := RuleFile(groups, map[string]time.Duration{"DevicePoolInvalid": time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tests, err := os.ReadFile("alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"rules.yaml": rules, "alerts_test.yaml": tests} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(promtool, "test", "rules", "alerts_test.yaml")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("promtool test rules passed with DevicePoolInvalid firing after 1m:\n%s", out)
	}
	if !slices.ContainsFunc(strings.Split(string(out), "\n"), func(l string) bool { return strings.Contains(l, "DevicePoolInvalid") }) {
		t.Errorf("promtool failed, but not on DevicePoolInvalid:\n%s", out)
	}
}
