package cluster

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// FeatureGate is one feature gate a Kubernetes release knows, as its
// binaries list it in --help.
type FeatureGate struct {
	// Name of the gate, for example DRAPartitionableDevices.
	Name string
	// Stage is ALPHA, BETA, GA or DEPRECATED.
	Stage string
	// Default is whether the release turns it on by default.
	Default bool
}

// gateLine matches one gate in the --feature-gates help text, for example
// "DRAConsumableCapacity=true|false (BETA - default=true)" (1.36) or
// "kube:DRAConsumableCapacity=true|false (BETA - default=true)" (1.37,
// which names the component; locked GA gates are no longer listed).
var gateLine = regexp.MustCompile(`^\s*(?:[a-z]+:)?([A-Za-z0-9]+)=true\|false \(([A-Z]+) - default=(true|false)\)`)

// ParseFeatureGates reads the gates out of a Kubernetes binary's --help
// text. Gates are listed once each, in the binary's order.
func ParseFeatureGates(help []byte) []FeatureGate {
	var out []FeatureGate
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(help))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		m := gateLine.FindStringSubmatch(sc.Text())
		if m == nil || seen[m[1]] {
			continue
		}
		seen[m[1]] = true
		out = append(out, FeatureGate{Name: m[1], Stage: m[2], Default: m[3] == "true"})
	}
	return out
}

// notDRAGates are gates named DRA... that belong to other features and
// cannot be turned on alone: the API server refuses to start when their
// dependencies are off.
var notDRAGates = map[string]string{
	// Workload API (KEP-4671 gang scheduling), which needs GenericWorkload.
	"DRAWorkloadResourceClaims": "needs GenericWorkload",
}

// DRAGates returns the gates of a release that belong to Dynamic Resource
// Allocation (named DRA..., without notDRAGates), sorted by name.
func DRAGates(all []FeatureGate) []FeatureGate {
	var out []FeatureGate
	for _, g := range all {
		if _, skip := notDRAGates[g.Name]; !skip && strings.HasPrefix(g.Name, "DRA") {
			out = append(out, g)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ReleaseFeatureGates asks the kube-apiserver binary in binDir which
// feature gates its release knows. kube-scheduler and
// kube-controller-manager share the same gate registry.
func ReleaseFeatureGates(ctx context.Context, binDir string) ([]FeatureGate, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "kube-apiserver"), "--help").CombinedOutput()
	gates := ParseFeatureGates(out)
	if len(gates) == 0 {
		return nil, fmt.Errorf("read feature gates from %s --help: %v: no gate found in %d bytes of output",
			filepath.Join(binDir, "kube-apiserver"), err, len(out))
	}
	return gates, nil
}

// gateFlag is the --feature-gates value for a cluster: every DRA gate of
// the release on (unless defaults only), then the extra gates.
func gateFlag(release []FeatureGate, defaultsOnly bool, extra []string) string {
	var parts []string
	if !defaultsOnly {
		for _, g := range DRAGates(release) {
			parts = append(parts, g.Name+"=true")
		}
	}
	parts = append(parts, extra...)
	return strings.Join(parts, ",")
}
