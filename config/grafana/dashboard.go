// Package grafana holds the Grafana dashboard of the operator's metrics
// (drastack-dashboard.json) and reads its queries, for the test that
// parses them with Prometheus' own PromQL parser against the metrics the
// operator registers and for the e2e suite that runs them on a real
// Prometheus.
package grafana

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

//go:embed drastack-dashboard.json
var dashboardJSON []byte

// Dashboard is the part of a Grafana dashboard the tests read.
type Dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []Panel `json:"panels"`
	Templating struct {
		List []Variable `json:"list"`
	} `json:"templating"`
}

// Variable is a dashboard variable.
type Variable struct {
	Name     string          `json:"name"`
	Type     string          `json:"type"`
	Query    json.RawMessage `json:"query"`
	AllValue string          `json:"allValue"`
}

// Panel is a panel, or a row with the panels it holds when collapsed.
type Panel struct {
	ID          int      `json:"id"`
	Type        string   `json:"type"`
	Title       string   `json:"title"`
	Description string   `json:"description"`
	Datasource  *Source  `json:"datasource"`
	Targets     []Target `json:"targets"`
	Panels      []Panel  `json:"panels"`
	GridPos     GridPos  `json:"gridPos"`
}

// Source is a panel's or query's datasource.
type Source struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Target is one query of a panel.
type Target struct {
	Expr    string `json:"expr"`
	RefID   string `json:"refId"`
	Instant bool   `json:"instant"`
}

// GridPos places a panel on the 24-column grid.
type GridPos struct {
	H, W, X, Y int
}

// Load parses the embedded dashboard.
func Load() (Dashboard, error) {
	var d Dashboard
	if err := json.Unmarshal(dashboardJSON, &d); err != nil {
		return d, fmt.Errorf("drastack-dashboard.json: %w", err)
	}
	return d, nil
}

// AllPanels lists every panel, those inside collapsed rows included.
func (d Dashboard) AllPanels() []Panel {
	var out []Panel
	var walk func([]Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// EventDriven are the panels that show data only while something is
// wrong, keyed by panel id, with what empties them. Every other panel has
// data on a running operator with pools, claims, pods and a driver (the
// e2e suite checks that).
var EventDriven = map[int]string{
	8:  "lists the pools that are not Healthy: empty while every pool is",
	32: "lists the drivers that are not Ready: empty while every driver is",
}

// variable matches Grafana's $name and ${name} (with an optional :format).
var variable = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::[a-z]+)?\}|\$([A-Za-z0-9_]+)`)

// Expand replaces the dashboard's variables in a query as Grafana would:
// the query variables with their "All" value (a regular expression every
// value matches) and the interval variables with rateInterval. A variable
// the dashboard does not define is an error.
func (d Dashboard) Expand(expr, rateInterval string) (string, error) {
	values := map[string]string{
		"__rate_interval": rateInterval,
		"__interval":      rateInterval,
		"__range":         rateInterval,
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			all := v.AllValue
			if all == "" {
				all = ".*"
			}
			values[v.Name] = all
		}
	}
	var missing []string
	out := variable.ReplaceAllStringFunc(expr, func(m string) string {
		sub := variable.FindStringSubmatch(m)
		name := sub[1] + sub[2]
		v, ok := values[name]
		if !ok {
			missing = append(missing, name)
			return m
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("query uses variables the dashboard does not define: %s", strings.Join(missing, ", "))
	}
	return out, nil
}

// VariableQuery returns a query variable's query string (Grafana stores it
// as a string or as an object with a query field).
func (v Variable) VariableQuery() (string, error) {
	var q struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(v.Query, &q); err == nil {
		return q.Query, nil
	}
	var s string
	if err := json.Unmarshal(v.Query, &s); err != nil {
		return "", fmt.Errorf("variable %s: query is neither an object nor a string", v.Name)
	}
	return s, nil
}
