package grafana

import (
	"strings"
	"testing"

	"github.com/drastack/drastack/test/opmetrics"
)

// TestQueriesUseRegisteredMetrics parses every query of the dashboard with
// Prometheus' own PromQL parser (after expanding Grafana's variables) and
// checks that each metric and label it names is one the operator
// registers: test/opmetrics reads them from controller-runtime's registry
// after building the operator as cmd/manager does.
func TestQueriesUseRegisteredMetrics(t *testing.T) {
	catalog, err := opmetrics.Registered()
	if err != nil {
		t.Fatal(err)
	}
	d, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	queries := 0
	for _, p := range d.AllPanels() {
		for _, tg := range p.Targets {
			queries++
			expr, err := d.Expand(tg.Expr, "5m")
			if err != nil {
				t.Errorf("panel %d %q, query %s: %v", p.ID, p.Title, tg.RefID, err)
				continue
			}
			uses, err := catalog.Check(expr)
			if err != nil {
				t.Errorf("panel %d %q, query %s: %v\n%s", p.ID, p.Title, tg.RefID, err, tg.Expr)
				continue
			}
			for _, u := range uses {
				used[u.Family.Name] = true
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, err := v.VariableQuery()
		if err != nil {
			t.Fatal(err)
		}
		inner, ok := strings.CutPrefix(q, "label_values(")
		metric, label, found := strings.Cut(strings.TrimSuffix(inner, ")"), ",")
		if !ok || !found || !strings.HasSuffix(q, ")") {
			t.Errorf("variable %s: want label_values(METRIC, LABEL), not %q", v.Name, q)
			continue
		}
		f, ok := catalog.Family(strings.TrimSpace(metric))
		if !ok || !f.HasLabel(strings.TrimSpace(label)) {
			t.Errorf("variable %s: %s is no registered metric with label %s", v.Name, metric, label)
		}
	}
	if queries == 0 {
		t.Fatal("no queries in the dashboard")
	}
	t.Logf("%d queries over %d metrics", queries, len(used))
}

// TestEventDrivenPanelsExist keeps EventDriven in step with the dashboard.
func TestEventDrivenPanelsExist(t *testing.T) {
	d, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	ids := map[int]Panel{}
	for _, p := range d.AllPanels() {
		ids[p.ID] = p
	}
	for id, why := range EventDriven {
		p, ok := ids[id]
		if !ok || p.Type == "row" || why == "" {
			t.Errorf("EventDriven names panel %d, which is no query panel of the dashboard (or gives no reason)", id)
		}
	}
}

func TestExpand(t *testing.T) {
	d, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	got, err := d.Expand(`rate(x{driver=~"$driver", d="${driver}"}[$__rate_interval])`, "1m")
	if want := `rate(x{driver=~".*", d=".*"}[1m])`; err != nil || got != want {
		t.Errorf("Expand = %q, %v; want %q", got, err, want)
	}
	if _, err := d.Expand(`x{a="$nope"}`, "1m"); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("an undefined variable: %v", err)
	}
}

// TestDashboardShape checks what Grafana needs to import the dashboard:
// a title and uid, unique panel ids, every query panel on the datasource
// variable, queries with refIds, and panels inside the 24-column grid
// without overlapping.
func TestDashboardShape(t *testing.T) {
	d, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("title %q, uid %q: both are needed", d.Title, d.UID)
	}
	hasDatasource := false
	for _, v := range d.Templating.List {
		hasDatasource = hasDatasource || (v.Name == "datasource" && v.Type == "datasource")
	}
	if !hasDatasource {
		t.Error("no datasource variable")
	}
	ids := map[int]bool{}
	cells := map[[2]int]int{}
	for _, p := range d.AllPanels() {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		g := p.GridPos
		if g.W <= 0 || g.X < 0 || g.X+g.W > 24 || g.H <= 0 {
			t.Errorf("panel %d %q: gridPos %+v outside the 24-column grid", p.ID, p.Title, g)
		}
		overlaps := map[int]bool{}
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if other, ok := cells[[2]int{x, y}]; ok {
					overlaps[other] = true
				}
				cells[[2]int{x, y}] = p.ID
			}
		}
		for other := range overlaps {
			t.Errorf("panel %d %q overlaps panel %d", p.ID, p.Title, other)
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
