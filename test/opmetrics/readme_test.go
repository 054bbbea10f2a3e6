package opmetrics

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var (
	readmeRow    = regexp.MustCompile("(?m)^\\| `(drastack_[a-z_]+)` \\| ([a-z]+) \\|([^|]*)\\|")
	readmeLabel  = regexp.MustCompile("`([a-z_]+)`")
	readmeMetric = regexp.MustCompile(`drastack_[a-z_]+`)
)

// TestREADMEListsEveryMetric: the table of the README's Metrics section
// has a row for each drastack_ family the operator registers, with its
// type and exactly its labels, and the section names no drastack_ metric
// the operator does not register.
func TestREADMEListsEveryMetric(t *testing.T) {
	c, err := Registered()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("../../README.md")
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
	rows := map[string][]string{}
	for _, m := range readmeRow.FindAllStringSubmatch(section, -1) {
		name, kind := m[1], m[2]
		var labels []string
		for _, l := range readmeLabel.FindAllStringSubmatch(m[3], -1) {
			labels = append(labels, l[1])
		}
		slices.Sort(labels)
		rows[name] = labels
		f, ok := c.Family(name)
		if !ok {
			t.Errorf("README lists %s, which the operator does not register", name)
			continue
		}
		// A custom collector's type is known only from what it collects.
		if f.Kind != Unknown && string(f.Kind) != kind {
			t.Errorf("README: %s is a %s, the operator registers a %s", name, kind, f.Kind)
		}
		if !slices.Equal(labels, f.Labels) {
			t.Errorf("README: %s has labels %v, the operator's %v", name, labels, f.Labels)
		}
	}
	for _, f := range c.Families() {
		if _, ok := rows[f.Name]; strings.HasPrefix(f.Name, "drastack_") && !ok {
			t.Errorf("README's Metrics table has no row for %s (%s: %s)", f.Name, f.Kind, f.Help)
		}
	}
	for _, name := range readmeMetric.FindAllString(section, -1) {
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && c.Registers(b) {
				base = b
			}
		}
		if !c.Registers(base) {
			t.Errorf("README's Metrics section names %s, which the operator does not register", name)
		}
	}
	if len(rows) < 20 {
		t.Errorf("only %d rows read from the README's Metrics table", len(rows))
	}
}
