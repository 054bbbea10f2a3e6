package opmetrics

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestRegistered checks that the catalog comes from the operator's own
// registrations: families of each kind the operator registers, with their
// labels, from the pool, claim, driver and webhook packages and from
// controller-runtime.
func TestRegistered(t *testing.T) {
	c, err := Registered()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		name   string
		kind   Kind
		labels []string
	}{
		// A custom collector that collects nothing without pools.
		{"drastack_pool_health", Unknown, []string{"driver", "health", "pool", "reason"}},
		{"drastack_pool_validation_duration_seconds", Histogram, nil},
		{"drastack_claim_allocations_total", Counter, []string{"engine", "result"}},
		{"drastack_claim_gated_pods", Gauge, nil},
		// Issue 26, point 4.
		{"drastack_claim_allocation_latency_seconds", Histogram, []string{"engine", "result"}},
		{"drastack_claim_engine_duration_seconds", Histogram, []string{"engine", "result"}},
		{"drastack_claims_pending", Gauge, []string{"reason", "state"}},
		{"drastack_claim_central_devices", Gauge, []string{"driver", "state"}},
		{"drastack_driver_nodes", Unknown, []string{"driver", "state"}},
		{"drastack_webhook_admission_duration_seconds", Histogram, []string{"result", "webhook"}},
		{"controller_runtime_webhook_requests_total", Counter, []string{"code", "webhook"}},
	} {
		f, ok := c.families[want.name]
		if !ok {
			t.Errorf("%s is not in the catalog", want.name)
			continue
		}
		if f.Kind != want.kind || !slices.Equal(f.Labels, want.labels) || f.Help == "" {
			t.Errorf("%s: kind %s, labels %v, help %q; want %s, %v and a help text", want.name, f.Kind, f.Labels, f.Help, want.kind, want.labels)
		}
	}
	if n := len(c.Families()); n < 20 {
		t.Errorf("only %d families", n)
	}
}

func TestParseDesc(t *testing.T) {
	d := prometheus.NewDesc("a_total", `help with "quotes", braces {} and commas`,
		[]string{"zeta", "alpha"}, prometheus.Labels{"const": "v,{x}"})
	f, err := parseDesc(d)
	if err != nil {
		t.Fatal(err)
	}
	if f.Name != "a_total" || f.Help != `help with "quotes", braces {} and commas` || !slices.Equal(f.Labels, []string{"alpha", "const", "zeta"}) {
		t.Errorf("parseDesc(%s) = %+v", d, f)
	}
	bad := prometheus.NewDesc("bad", "h", []string{"a", "a"}, nil)
	if _, err := parseDesc(bad); err == nil {
		t.Error("an invalid description parsed")
	}
}

// testCatalog is a catalog made by hand, for the checks of Check.
func testCatalog() *Catalog {
	c := &Catalog{families: map[string]Family{}}
	for _, f := range []Family{
		{Name: "pools", Kind: Unknown, Labels: []string{"driver", "health"}},
		{Name: "health", Kind: Gauge, Labels: []string{"driver", "health", "pool", "reason"}},
		{Name: "attempts_total", Kind: Counter, Labels: []string{"engine", "result"}},
		{Name: "latency_seconds", Kind: Histogram, Labels: []string{"engine"}},
		{Name: "rpc_seconds", Kind: Summary},
	} {
		c.families[f.Name] = f
	}
	return c
}

func TestCheck(t *testing.T) {
	c := testCatalog()
	for _, tc := range []struct {
		expr    string
		metrics []string
		err     string
	}{
		{expr: `sum by (health) (pools{driver=~".*"})`, metrics: []string{"pools"}},
		{expr: `max by (driver, pool, reason) (health{health="Invalid"}) == 1`, metrics: []string{"health"}},
		{expr: `histogram_quantile(0.99, sum by (le, engine) (rate(latency_seconds_bucket[5m])))`, metrics: []string{"latency_seconds_bucket"}},
		{expr: `histogram_quantile(0.99, sum by (le, engine, result) (rate(latency_seconds_bucket[5m])))`, err: `by/without label "result"`},
		{expr: `rate(latency_seconds_sum[5m]) / rate(latency_seconds_count[5m])`, metrics: []string{"latency_seconds_sum", "latency_seconds_count"}},
		{expr: `rpc_seconds{quantile="0.9"} + on (instance) rpc_seconds_count`, metrics: []string{"rpc_seconds", "rpc_seconds_count"}},
		{expr: `sum by (job) (rate(attempts_total[1m])) or vector(0)`, metrics: []string{"attempts_total"}},
		{expr: `sum by (y) (rate(attempts_total[1m]))`, err: `label "y"`},
		{expr: `{__name__="pools", driver="a"}`, metrics: []string{"pools"}},
		{expr: `sum by (alias) (label_replace(pools, "alias", "$1", "driver", "(.*)"))`, metrics: []string{"pools"}},
		{expr: `sum(rate(gone_total[5m]))`, err: "metric gone_total is not one the operator registers"},
		{expr: `latency_seconds`, err: "latency_seconds is a histogram: select latency_seconds_bucket"},
		{expr: `attempts_total_bucket`, err: "not one the operator registers"},
		{expr: `pools{helth="Invalid"}`, err: `pools has no label "helth"`},
		{expr: `sum by (pool) (pools)`, err: `by/without label "pool": no series selected below carries it`},
		{expr: `pools / on (pool) health`, err: `vector matching on label "pool"`},
		{expr: `{__name__=~"pool.*"}`, err: "names no metric"},
		{expr: `sum(pools`, err: "unclosed left parenthesis"},
		{expr: `vector(1)`, err: "selects no metric"},
		{expr: `rate(pools[5m)`, err: "unexpected"},
	} {
		uses, err := c.Check(tc.expr)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Check(%s) = %v, want an error with %q", tc.expr, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Check(%s): %v", tc.expr, err)
			continue
		}
		var got []string
		for _, u := range uses {
			got = append(got, u.Series)
		}
		if !slices.Equal(got, tc.metrics) {
			t.Errorf("Check(%s) selects %v, want %v", tc.expr, got, tc.metrics)
		}
	}
}

// FuzzCheck: no expression makes the check panic.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{`sum by (health) (pools{driver=~".*"})`, `histogram_quantile(0.5, rate(latency_seconds_bucket[5m]))`, `{__name__="x"}`, `a / on(b) group_left(c) d`} {
		f.Add(s)
	}
	c := testCatalog()
	f.Fuzz(func(t *testing.T, expr string) {
		_, _ = c.Check(expr)
	})
}
