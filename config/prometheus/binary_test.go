package prometheus

import (
	"os"
	"regexp"
	"testing"
)

func TestModuleVersion(t *testing.T) {
	data, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*github\.com/prometheus/prometheus (v\S+)`).FindSubmatch(data)
	if m == nil {
		t.Fatal("go.mod does not require github.com/prometheus/prometheus")
	}
	if string(m[1]) != ModuleVersion {
		t.Errorf("go.mod requires github.com/prometheus/prometheus %s, ModuleVersion is %s: keep them equal", m[1], ModuleVersion)
	}
}
