package central

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/drastack/drastack/api/v1alpha1"
)

// FuzzRuleName: rule names are built from driver and pool names read from
// the API; whatever they hold, the name must be a valid object name and
// stable.
func FuzzRuleName(f *testing.F) {
	f.Add("gpu.example.com", "node-1")
	f.Add("gpu.example.com", "")
	f.Add("", "a/b/c")
	f.Add(strings.Repeat("x", 300), strings.Repeat("-/.", 200))
	f.Add("ÄÖÜ", "\x00\xff")
	f.Fuzz(func(t *testing.T, driver, pool string) {
		name := RuleName(driver, pool)
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Fatalf("RuleName(%q, %q) = %q: %v", driver, pool, name, errs)
		}
		if name != RuleName(driver, pool) {
			t.Fatal("not deterministic")
		}
	})
}

// FuzzPartition feeds arbitrary label selectors (a user's spec) and slice
// identities (a driver's data) through the whole pipeline: it must not
// panic, an invalid selector is an error, and every desired rule selects
// only central devices.
func FuzzPartition(f *testing.F) {
	f.Add("gpu", "node-1", "node-1", "zone", "In", "a", "a", true)
	f.Add("gpu", "", "", "zone", "Exists", "", "", false)
	f.Add("gpu", "p", "n", "bad key!", "NotIn", "x", "y", true)
	f.Add("", "", "", "", "", "", "", false)
	f.Fuzz(func(t *testing.T, driver, pool, nodeName, key, op, value, nodeLabel string, bySelector bool) {
		e := v1alpha1.CentralDevices{Driver: driver, Classes: []string{"c"}}
		if bySelector {
			e.NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: key, Operator: metav1.LabelSelectorOperator(op), Values: []string{value},
			}}}
		} else if pool != "" {
			e.Pools = []string{pool}
		}
		s := slice("s", driver, pool, nodeName, "d0")
		n := node(nodeName, map[string]string{key: nodeLabel})
		p, err := NewPartition(Inputs{Entries: []v1alpha1.CentralDevices{e}, Slices: []*resourcev1.ResourceSlice{s}, Nodes: []*corev1.Node{n}})
		if err != nil {
			if !bySelector {
				t.Fatalf("error without a selector: %v", err)
			}
			return
		}
		rules := p.TaintRules()
		tainted := ApplyTaintRules([]*resourcev1.ResourceSlice{s}, rules)
		for _, r := range rules {
			if Selects(r.Spec.DeviceSelector, driver, pool, "d0") && !p.Central(driver, pool, "d0") {
				t.Fatalf("rule %s selects a device that is not central", r.Name)
			}
		}
		// A central pool is kept once its rules are applied.
		kept := CentralSlices(p, tainted)
		if p.Central(driver, pool, "d0") && len(kept) != 1 {
			t.Fatalf("central pool %s/%s not kept after its rules", driver, pool)
		}
		if !p.Central(driver, pool, "d0") && len(kept) != 0 {
			t.Fatalf("pool %s/%s kept but not central", driver, pool)
		}
	})
}
