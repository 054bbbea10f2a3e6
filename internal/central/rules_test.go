package central

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/drastack/drastack/api/v1alpha1"
)

func TestTaintRules(t *testing.T) {
	type want struct {
		driver, pool string // pool "" = driver-wide
	}
	tests := []struct {
		name      string
		entries   []v1alpha1.CentralDevices
		published []string
		want      []want
	}{
		{name: "no entries, no rules"},
		{
			name:    "a driver-wide entry is one rule for the driver",
			entries: []v1alpha1.CentralDevices{{Driver: "gpu.example.com"}},
			want:    []want{{"gpu.example.com", ""}},
		},
		{
			name:    "listed pools get a rule each, before their slices exist",
			entries: []v1alpha1.CentralDevices{{Driver: "gpu.example.com", Pools: []string{"node-2", "node-7"}}},
			want:    []want{{"gpu.example.com", "node-2"}, {"gpu.example.com", "node-7"}},
		},
		{
			name:    "nodeSelector: a rule per node-local pool of a matching node",
			entries: []v1alpha1.CentralDevices{{Driver: "gpu.example.com", NodeSelector: matchLabels("topology-jobs", "true")}},
			want:    []want{{"gpu.example.com", "node-1"}, {"gpu.example.com", "node-2"}},
		},
		{
			name: "a driver-wide rule makes pool rules of the same driver redundant",
			entries: []v1alpha1.CentralDevices{
				{Driver: "gpu.example.com", Pools: []string{"node-1"}},
				{Driver: "gpu.example.com", NodeSelector: matchLabels("topology-jobs", "true")},
				{Driver: "gpu.example.com"},
			},
			want: []want{{"gpu.example.com", ""}},
		},
		{
			name: "entries selecting the same pool share its rule",
			entries: []v1alpha1.CentralDevices{
				{Driver: "gpu.example.com", Pools: []string{"node-1"}, Classes: []string{"a"}},
				{Driver: "gpu.example.com", NodeSelector: matchLabels("topology-jobs", "true"), Classes: []string{"b"}},
			},
			want: []want{{"gpu.example.com", "node-1"}, {"gpu.example.com", "node-2"}},
		},
		{
			name:      "a published driver's node-less pools need no rule: their slices carry the taint",
			entries:   []v1alpha1.CentralDevices{{Driver: "tpu.example.com", Pools: []string{"tpu-a", "tpu-b"}}},
			published: []string{"tpu.example.com"},
			want:      nil,
		},
		{
			name:      "a driver-wide entry for a published driver becomes rules for its node-local pools",
			entries:   []v1alpha1.CentralDevices{{Driver: "tpu.example.com"}},
			published: []string{"tpu.example.com"},
			want:      []want{{"tpu.example.com", "node-1"}},
		},
		{
			name: "several drivers",
			entries: []v1alpha1.CentralDevices{
				{Driver: "nic.example.com"},
				{Driver: "gpu.example.com", Pools: []string{"node-3"}},
			},
			want: []want{{"gpu.example.com", "node-3"}, {"nic.example.com", ""}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPartition(Inputs{Entries: tc.entries, Slices: clusterSlices, Nodes: clusterNodes, Published: tc.published})
			if err != nil {
				t.Fatal(err)
			}
			var wantRules []resourcev1.DeviceTaintRule
			for _, w := range tc.want {
				s := sel(w.driver, w.pool, "")
				wantRules = append(wantRules, resourcev1.DeviceTaintRule{
					TypeMeta:   metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "DeviceTaintRule"},
					ObjectMeta: metav1.ObjectMeta{Name: RuleName(w.driver, w.pool), Labels: RuleLabels()},
					Spec:       resourcev1.DeviceTaintRuleSpec{DeviceSelector: s, Taint: Taint()},
				})
			}
			got := p.TaintRules()
			if len(got) == 0 && len(wantRules) == 0 {
				return
			}
			// Sorted by name, whatever the order of entries and maps.
			sortByName(wantRules)
			if diff := diffYAML(wantRules, got); diff != "" {
				t.Error(diff)
			}
			for i := range got {
				if !Owned(&got[i]) {
					t.Errorf("rule %s is not Owned", got[i].Name)
				}
			}
		})
	}
}

func sortByName(rules []resourcev1.DeviceTaintRule) {
	for i := range rules {
		for j := i + 1; j < len(rules); j++ {
			if rules[j].Name < rules[i].Name {
				rules[i], rules[j] = rules[j], rules[i]
			}
		}
	}
}

func TestRuleName(t *testing.T) {
	tests := []struct {
		driver, pool string
		wantPrefix   string
	}{
		{"gpu.example.com", "", "drastack-central-gpu-example-com-"},
		{"gpu.example.com", "node-1", "drastack-central-gpu-example-com-node-1-"},
		{"gpu.example.com", "rack/a/node-1", "drastack-central-gpu-example-com-rack-a-node-1-"},
		{"gpu.example.com", "Node_1", "drastack-central-gpu-example-com-node-1-"},
		{strings.Repeat("d", 63), strings.Repeat("p", 253), "drastack-central-" + strings.Repeat("d", maxDriverPart) + "-" + strings.Repeat("p", maxPoolPart) + "-"},
	}
	seen := map[string]string{}
	for _, tc := range tests {
		name := RuleName(tc.driver, tc.pool)
		if !strings.HasPrefix(name, tc.wantPrefix) || len(name) != len(tc.wantPrefix)+8 {
			t.Errorf("RuleName(%q, %q) = %q, want %q + 8 hex digits", tc.driver, tc.pool, name, tc.wantPrefix)
		}
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("RuleName(%q, %q) = %q is not a valid name: %v", tc.driver, tc.pool, name, errs)
		}
		if name != RuleName(tc.driver, tc.pool) {
			t.Errorf("RuleName(%q, %q) is not deterministic", tc.driver, tc.pool)
		}
		if prev, dup := seen[name]; dup {
			t.Errorf("RuleName(%q, %q) = %q collides with %s", tc.driver, tc.pool, name, prev)
		}
		seen[name] = tc.driver + "/" + tc.pool
	}
	// Pools that sanitise to the same text still get different names.
	if RuleName("d", "a/b") == RuleName("d", "a-b") {
		t.Error(`"a/b" and "a-b" share a rule name`)
	}
	// The separator keeps driver and pool apart in the hash.
	if RuleName("a", "b-c") == RuleName("a-b", "c") {
		t.Error("driver and pool boundaries are not part of the identity")
	}
}

func TestOwned(t *testing.T) {
	mine := rule("r", true, sel("d", "", ""), Taint())
	removal := rule("r", false, sel("d", "", ""), Taint())
	removal.Labels = map[string]string{"drastack.io/component": "removal", "app.kubernetes.io/managed-by": "drastack"}
	onlyComponent := rule("r", false, sel("d", "", ""), Taint())
	onlyComponent.Labels = map[string]string{"drastack.io/component": "central"}
	tests := []struct {
		name string
		rule *resourcev1.DeviceTaintRule
		want bool
	}{
		{"both labels", &mine, true},
		{"the driver lifecycle's removal rule", &removal, false},
		{"component without managed-by", &onlyComponent, false},
		{"no labels", ptr(rule("r", false, sel("d", "", ""), Taint())), false},
		{"nil", nil, false},
	}
	for _, tc := range tests {
		if got := Owned(tc.rule); got != tc.want {
			t.Errorf("%s: Owned = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestDiffTaintRules(t *testing.T) {
	taint := Taint()
	added := metav1.Now()
	taintAt := taint
	taintAt.TimeAdded = &added
	withRV := func(r resourcev1.DeviceTaintRule, rv string) resourcev1.DeviceTaintRule {
		r.ResourceVersion = rv
		return r
	}
	withLabel := func(r resourcev1.DeviceTaintRule, k, v string) resourcev1.DeviceTaintRule {
		r.Labels = mergeLabels(r.Labels, map[string]string{k: v})
		return r
	}
	a := rule("drastack-central-a", true, sel("gpu", "a", ""), taint)
	b := rule("drastack-central-b", true, sel("gpu", "b", ""), taint)
	c := rule("drastack-central-c", true, sel("gpu", "c", ""), taint)

	tests := []struct {
		name          string
		desired       []resourcev1.DeviceTaintRule
		existing      []resourcev1.DeviceTaintRule
		want          RuleDiff
		wantConflicts []string
	}{
		{name: "nothing either side"},
		{
			name:    "missing rules are created",
			desired: []resourcev1.DeviceTaintRule{b, a},
			want:    RuleDiff{Create: []resourcev1.DeviceTaintRule{a, b}},
		},
		{
			name:     "an equal rule is left alone, whatever the server set (timeAdded, resourceVersion, extra labels)",
			desired:  []resourcev1.DeviceTaintRule{a},
			existing: []resourcev1.DeviceTaintRule{withLabel(withRV(rule(a.Name, true, sel("gpu", "a", ""), taintAt), "7"), "team", "ml")},
		},
		{
			name:     "a rule of ours with another selector is updated in place, keeping resourceVersion and foreign labels",
			desired:  []resourcev1.DeviceTaintRule{a},
			existing: []resourcev1.DeviceTaintRule{withLabel(withRV(rule(a.Name, true, sel("gpu", "old", ""), taintAt), "7"), "team", "ml")},
			want: RuleDiff{Update: []resourcev1.DeviceTaintRule{
				withLabel(withRV(rule(a.Name, true, sel("gpu", "a", ""), taintAt), "7"), "team", "ml"),
			}},
		},
		{
			name:     "a changed effect is updated and drops timeAdded so the server stamps the change",
			desired:  []resourcev1.DeviceTaintRule{a},
			existing: []resourcev1.DeviceTaintRule{withRV(rule(a.Name, true, sel("gpu", "a", ""), resourcev1.DeviceTaint{Key: TaintKey, Effect: resourcev1.DeviceTaintEffectNoExecute, TimeAdded: &added}), "3")},
			want:     RuleDiff{Update: []resourcev1.DeviceTaintRule{withRV(a, "3")}},
		},
		{
			name:     "rules of ours no longer desired are deleted",
			desired:  []resourcev1.DeviceTaintRule{a},
			existing: []resourcev1.DeviceTaintRule{c, a, b},
			want:     RuleDiff{Delete: []resourcev1.DeviceTaintRule{b, c}},
		},
		{
			name:    "rules that are not ours are never updated or deleted",
			desired: []resourcev1.DeviceTaintRule{a},
			existing: []resourcev1.DeviceTaintRule{
				rule("admin-maintenance", false, sel("gpu", "", ""), resourcev1.DeviceTaint{Key: "maintenance", Effect: resourcev1.DeviceTaintEffectNoExecute}),
				rule("drastack-central-stray", false, sel("gpu", "x", ""), taint),
			},
			want: RuleDiff{Create: []resourcev1.DeviceTaintRule{a}},
		},
		{
			name:          "a desired name taken by a rule that is not ours is a conflict, not a create",
			desired:       []resourcev1.DeviceTaintRule{a, b},
			existing:      []resourcev1.DeviceTaintRule{rule(a.Name, false, sel("other", "", ""), taint)},
			want:          RuleDiff{Create: []resourcev1.DeviceTaintRule{b}},
			wantConflicts: []string{a.Name},
		},
		{
			name:     "create, update and delete together",
			desired:  []resourcev1.DeviceTaintRule{a, b},
			existing: []resourcev1.DeviceTaintRule{rule(b.Name, true, sel("gpu", "", ""), taint), c},
			want: RuleDiff{
				Create: []resourcev1.DeviceTaintRule{a},
				Update: []resourcev1.DeviceTaintRule{b},
				Delete: []resourcev1.DeviceTaintRule{c},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			desiredBefore, existingBefore := deepCopyRules(tc.desired), deepCopyRules(tc.existing)
			got, conflicts := DiffTaintRules(tc.desired, tc.existing)
			if diff := diffYAML(tc.want, got); diff != "" {
				t.Error(diff)
			}
			if got.Empty() != (len(tc.want.Create)+len(tc.want.Update)+len(tc.want.Delete) == 0) {
				t.Errorf("Empty = %v", got.Empty())
			}
			if !reflect.DeepEqual(conflicts, tc.wantConflicts) {
				t.Errorf("conflicts = %v, want %v", conflicts, tc.wantConflicts)
			}
			if diffYAML(desiredBefore, tc.desired) != "" || diffYAML(existingBefore, tc.existing) != "" {
				t.Error("DiffTaintRules modified its inputs")
			}
			// Applying the diff converges: nothing left to do.
			after := applyDiff(tc.existing, got)
			if again, _ := DiffTaintRules(tc.desired, after); !again.Empty() {
				t.Errorf("diff after applying the diff is not empty: %+v", again)
			}
		})
	}
}

func deepCopyRules(rules []resourcev1.DeviceTaintRule) []resourcev1.DeviceTaintRule {
	var out []resourcev1.DeviceTaintRule
	for i := range rules {
		out = append(out, *rules[i].DeepCopy())
	}
	return out
}

// applyDiff is what an API server holds after the caller writes d.
func applyDiff(existing []resourcev1.DeviceTaintRule, d RuleDiff) []resourcev1.DeviceTaintRule {
	byName := map[string]resourcev1.DeviceTaintRule{}
	for _, r := range existing {
		byName[r.Name] = r
	}
	for _, r := range d.Delete {
		delete(byName, r.Name)
	}
	for _, r := range append(append([]resourcev1.DeviceTaintRule{}, d.Create...), d.Update...) {
		byName[r.Name] = r
	}
	var out []resourcev1.DeviceTaintRule
	for _, r := range byName {
		out = append(out, r)
	}
	return out
}

func TestHoldRules(t *testing.T) {
	a := DeviceID{Driver: "gpu.example.com", Pool: "n1", Device: "gpu-0"}
	b := DeviceID{Driver: "gpu.example.com", Pool: "n1", Device: "gpu-1"}
	rules := HoldRules([]DeviceID{b, a, a})
	if len(rules) != 2 {
		t.Fatalf("%d rules, want one per device", len(rules))
	}
	for _, r := range rules {
		if !Owned(&r) || r.Spec.Taint != Taint() || r.Spec.DeviceSelector.Device == nil {
			t.Errorf("rule %s: owned %v, taint %+v, selector %+v", r.Name, Owned(&r), r.Spec.Taint, r.Spec.DeviceSelector)
		}
	}
	if HoldRuleName(a) == HoldRuleName(b) || HoldRuleName(a) == RuleName(a.Driver, a.Pool) {
		t.Error("hold rule names must differ per device and from pool rules")
	}
	if !Covered(rules, a.Driver, a.Pool, a.Device) || Covered(rules, a.Driver, a.Pool, "gpu-2") {
		t.Error("Covered must match exactly the held devices")
	}
	pool := []resourcev1.DeviceTaintRule{{Spec: resourcev1.DeviceTaintRuleSpec{DeviceSelector: poolSelector(PoolID{Driver: a.Driver, Pool: a.Pool})}}}
	if !Covered(pool, a.Driver, a.Pool, "anything") || Covered(pool, a.Driver, "n2", "gpu-0") {
		t.Error("a pool rule covers every device of its pool only")
	}
}

func TestDiffClasses(t *testing.T) {
	owned := Class("gpu-topology")
	stale := Class("gone")
	edited := Class("edited")
	edited.Spec.Selectors[0].CEL.Expression = "true" // someone widened it
	theirs := resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "theirs"}}
	d := DiffClasses([]string{"gpu-topology", "edited", "theirs", "new"}, []resourcev1.DeviceClass{owned, stale, edited, theirs})
	names := func(cs []resourcev1.DeviceClass) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Name)
		}
		return out
	}
	if got := names(d.Create); !slices.Equal(got, []string{"new"}) {
		t.Errorf("create %v", got)
	}
	if got := names(d.Update); !slices.Equal(got, []string{"edited"}) || d.Update[0].Spec.Selectors[0].CEL.Expression != ClassSelector("edited") {
		t.Errorf("update %v", got)
	}
	if got := names(d.Delete); !slices.Equal(got, []string{"gone"}) {
		t.Errorf("delete %v", got)
	}
	if !slices.Equal(d.NotOwned, []string{"theirs"}) {
		t.Errorf("not owned %v: a class the operator did not create must never be taken over", d.NotOwned)
	}
}
