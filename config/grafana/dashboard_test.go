// Package grafana holds the Grafana dashboard of the operator's metrics
// (drastack-dashboard.json) and the test that keeps its queries honest.
//
// The queries are checked with a small PromQL tokenizer instead of
// github.com/prometheus/prometheus/promql/parser: that module would bump
// the go directive and some thirty dependencies of the operator (x/net,
// x/sys, OpenTelemetry, go-openapi, genproto) for one test. The tokenizer
// checks what matters for a dashboard that must keep working as the code
// changes: brackets balance, strings are closed, every function and
// keyword is one PromQL knows, and every metric name is one the operator
// exports (histogram series only with _bucket, _sum or _count).
package grafana

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

const dashboardFile = "drastack-dashboard.json"

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int        `json:"id"`
	Type       string     `json:"type"`
	Title      string     `json:"title"`
	Datasource *source    `json:"datasource"`
	Targets    []target   `json:"targets"`
	Panels     []panel    `json:"panels"`
	GridPos    gridPos    `json:"gridPos"`
	Options    any        `json:"options"`
	Field      *fieldConf `json:"fieldConfig"`
}

type source struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type target struct {
	Expr  string `json:"expr"`
	RefID string `json:"refId"`
}

type gridPos struct {
	H, W, X, Y int
}

type fieldConf struct {
	Defaults map[string]any `json:"defaults"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// allPanels flattens rows (collapsed rows hold their panels).
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// exported are the metric names the operator exports, read from its Go
// source: every string literal "drastack_..." outside tests (metric names
// are declared as Name: "drastack_..." or as constants handed to
// prometheus.NewDesc and HistogramOpts). histograms are those declared
// with HistogramOpts, whose series carry the _bucket, _sum and _count
// suffixes.
func exported(t *testing.T) (names, histograms map[string]bool) {
	t.Helper()
	root := filepath.Join("..", "..")
	literal := regexp.MustCompile(`"(drastack_[a-z0-9_]+)"`)
	constant := regexp.MustCompile(`(\w+)\s*=\s*"(drastack_[a-z0-9_]+)"`)
	histName := regexp.MustCompile(`HistogramOpts\{[^}]*?Name:\s*("drastack_[a-z0-9_]+"|\w+)`)
	names, histograms = map[string]bool{}, map[string]bool{}
	for _, dir := range []string{"internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			src := string(data)
			consts := map[string]string{}
			for _, m := range constant.FindAllStringSubmatch(src, -1) {
				consts[m[1]] = m[2]
			}
			for _, m := range literal.FindAllStringSubmatch(src, -1) {
				names[m[1]] = true
			}
			for _, m := range histName.FindAllStringSubmatch(src, -1) {
				if n, ok := strings.CutPrefix(m[1], `"`); ok {
					histograms[strings.TrimSuffix(n, `"`)] = true
				} else if n, ok := consts[m[1]]; ok {
					histograms[n] = true
				} else {
					return fmt.Errorf("%s: histogram named by %s, which is no drastack_ constant of the file", path, m[1])
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return names, histograms
}

// TestDashboardQueriesUseExportedMetrics parses every query of the
// dashboard and checks that it only names metrics the operator exports.
func TestDashboardQueriesUseExportedMetrics(t *testing.T) {
	names, histograms := exported(t)
	// The dashboard's subject: if one of these is renamed the panels go
	// blank, so the grep above must keep finding them.
	for _, n := range []string{
		"drastack_pools", "drastack_pool_health", "drastack_pool_devices",
		"drastack_pool_counter_utilization_ratio", "drastack_pool_problems",
		"drastack_claim_allocation_latency_seconds", "drastack_claim_allocations_total",
		"drastack_claim_placements_total", "drastack_claims_pending",
	} {
		if !names[n] {
			t.Errorf("the operator no longer exports %s (found: %v)", n, sortedKeys(names))
		}
	}
	if !histograms["drastack_claim_allocation_latency_seconds"] || !histograms["drastack_pool_validation_duration_seconds"] {
		t.Errorf("histograms found: %v", sortedKeys(histograms))
	}

	d := loadDashboard(t)
	used := map[string]bool{}
	queries := 0
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			queries++
			metrics, err := promqlMetrics(tg.Expr)
			if err != nil {
				t.Errorf("panel %d %q, query %s: %v\n%s", p.ID, p.Title, tg.RefID, err, tg.Expr)
				continue
			}
			if len(metrics) == 0 {
				t.Errorf("panel %d %q, query %s names no metric: %s", p.ID, p.Title, tg.RefID, tg.Expr)
			}
			for _, m := range metrics {
				if err := checkMetric(m, names, histograms); err != nil {
					t.Errorf("panel %d %q, query %s: %v", p.ID, p.Title, tg.RefID, err)
				}
				used[m] = true
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var s string
			if err := json.Unmarshal(v.Query, &s); err != nil {
				t.Fatalf("variable %s: query is neither an object nor a string", v.Name)
			}
			q.Query = s
		}
		inner, ok := strings.CutPrefix(q.Query, "label_values(")
		if !ok || !strings.HasSuffix(inner, ")") {
			t.Errorf("variable %s: want label_values(METRIC, LABEL), not %q", v.Name, q.Query)
			continue
		}
		metric, _, _ := strings.Cut(strings.TrimSuffix(inner, ")"), ",")
		if err := checkMetric(strings.TrimSpace(metric), names, histograms); err != nil {
			t.Errorf("variable %s: %v", v.Name, err)
		}
	}
	if queries == 0 {
		t.Fatal("no queries in the dashboard")
	}
	t.Logf("%d queries over %d metrics: %v", queries, len(used), sortedKeys(used))
}

// checkMetric accepts an exported name, or a histogram's series.
func checkMetric(m string, names, histograms map[string]bool) error {
	if names[m] && !histograms[m] {
		return nil
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(m, suffix); ok && histograms[base] {
			return nil
		}
	}
	if histograms[m] {
		return fmt.Errorf("%s is a histogram: query %s_bucket, _sum or _count", m, m)
	}
	return fmt.Errorf("metric %s is not exported by the operator", m)
}

// TestDashboardShape checks what Grafana needs to import the dashboard:
// a title and uid, unique panel ids, every query panel on the datasource
// variable, queries with refIds, and panels inside the 24-column grid.
func TestDashboardShape(t *testing.T) {
	d := loadDashboard(t)
	if d.Title == "" || d.UID == "" {
		t.Errorf("title %q, uid %q: both are needed", d.Title, d.UID)
	}
	if !slices.ContainsFunc(d.Templating.List, func(v struct {
		Name  string          `json:"name"`
		Type  string          `json:"type"`
		Query json.RawMessage `json:"query"`
	}) bool {
		return v.Name == "datasource" && v.Type == "datasource"
	}) {
		t.Error("no datasource variable")
	}
	ids := map[int]bool{}
	for _, p := range allPanels(d.Panels) {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 || p.GridPos.H <= 0 {
			t.Errorf("panel %d %q: gridPos %+v outside the 24-column grid", p.ID, p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %d %q has no query", p.ID, p.Title)
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %d %q: datasource %+v, want the ${datasource} variable", p.ID, p.Title, p.Datasource)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("panel %d %q: refId %q missing or repeated", p.ID, p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
		}
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
