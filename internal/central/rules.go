package central

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drastack/drastack/internal/driver"
)

// ComponentCentral is the value of the drastack.io/component label on the
// DeviceTaintRules that keep central devices for the operator. Together
// with the managed-by label it is how the operator recognises its own
// rules: it never changes or deletes a rule without both, so
// administrators' rules and the driver lifecycle's removal rules are safe.
const ComponentCentral = "central"

// ruleNamePrefix starts the name of every central DeviceTaintRule, so they
// sort together in kubectl get.
const ruleNamePrefix = "drastack-central-"

// Bounds on the readable parts of a rule name. The name is a DNS subdomain
// (at most 253 characters); the readable parts are cut well inside that and
// a hash of the full identity keeps cut or sanitised names unique.
const (
	maxDriverPart = 40
	maxPoolPart   = 120
)

// RuleLabels are the labels on every central DeviceTaintRule.
func RuleLabels() map[string]string {
	return map[string]string{
		driver.LabelComponent: ComponentCentral,
		driver.LabelManagedBy: driver.ManagedByValue,
	}
}

// Owned says whether the operator owns rule as a central rule: both of
// RuleLabels with their values.
func Owned(rule *resourcev1.DeviceTaintRule) bool {
	if rule == nil {
		return false
	}
	l := rule.Labels
	return l[driver.LabelComponent] == ComponentCentral && l[driver.LabelManagedBy] == driver.ManagedByValue
}

// TaintRules returns the DeviceTaintRules that keep the partition's devices
// off kube-scheduler, sorted by name, as few as the entries allow:
//   - an entry without pools and nodeSelector: one rule for the whole driver;
//   - an entry with pools: one rule per listed pool, present or not, so a
//     pool is tainted before its first slice appears;
//   - an entry with nodeSelector: one rule per node-local pool of a
//     matching node, present in the slices.
//
// A pool already covered by a driver-wide rule gets no rule of its own, and
// a pool the operator publishes itself (see Inputs.Published) needs none:
// its slices carry the taint. A driver-wide entry for a published driver
// therefore becomes per-pool rules for that driver's node-local pools.
func (p *Partition) TaintRules() []resourcev1.DeviceTaintRule {
	want := map[string]*resourcev1.DeviceTaintSelector{}
	for d := range p.wide {
		if !p.published[d] {
			want[RuleName(d, "")] = &resourcev1.DeviceTaintSelector{Driver: ptr(d)}
			continue
		}
		for id := range p.seen {
			if id.Driver == d && !p.selfPublished(id) {
				want[RuleName(id.Driver, id.Pool)] = poolSelector(id)
			}
		}
	}
	for id := range p.pools {
		if (len(p.wide[id.Driver]) > 0 && !p.published[id.Driver]) || p.selfPublished(id) {
			continue
		}
		want[RuleName(id.Driver, id.Pool)] = poolSelector(id)
	}
	out := make([]resourcev1.DeviceTaintRule, 0, len(want))
	for name, sel := range want {
		out = append(out, resourcev1.DeviceTaintRule{
			TypeMeta: metav1.TypeMeta{APIVersion: resourcev1.SchemeGroupVersion.String(), Kind: "DeviceTaintRule"},
			ObjectMeta: metav1.ObjectMeta{
				Name:   name,
				Labels: RuleLabels(),
			},
			Spec: resourcev1.DeviceTaintRuleSpec{DeviceSelector: sel, Taint: Taint()},
		})
	}
	slices.SortFunc(out, func(a, b resourcev1.DeviceTaintRule) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func poolSelector(id PoolID) *resourcev1.DeviceTaintSelector {
	return &resourcev1.DeviceTaintSelector{Driver: ptr(id.Driver), Pool: ptr(id.Pool)}
}

func ptr[T any](v T) *T { return &v }

// RuleName is the deterministic name of the central rule for a driver
// (pool empty) or for one pool of it: readable parts of both, then a hash of
// the exact pair, because sanitising and cutting can map different pools
// to the same text ("a/b" and "a.b").
func RuleName(driverName, pool string) string {
	sum := sha256.Sum256([]byte(driverName + "\x00" + pool))
	name := ruleNamePrefix + namePart(driverName, maxDriverPart)
	if pp := namePart(pool, maxPoolPart); pp != "" {
		name += "-" + pp
	}
	return name + "-" + hex.EncodeToString(sum[:4])
}

// namePart turns s into lower-case letters, digits and inner dashes, at
// most max long, so that it is valid inside a DNS subdomain whatever s is.
func namePart(s string, max int) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
		if b.Len() >= max {
			break
		}
	}
	return strings.Trim(b.String(), "-")
}

// RuleDiff is what to write so the existing rules become the desired ones.
type RuleDiff struct {
	// Create are desired rules that do not exist.
	Create []resourcev1.DeviceTaintRule
	// Update are existing rules of ours whose spec or labels differ: the
	// existing object (name, resourceVersion for optimistic concurrency)
	// with the desired spec and labels. The taint's timeAdded is kept, so
	// an unchanged taint is never reported as changed.
	Update []resourcev1.DeviceTaintRule
	// Delete are existing rules of ours that are no longer desired.
	Delete []resourcev1.DeviceTaintRule
}

// Empty says whether nothing needs to be written.
func (d RuleDiff) Empty() bool {
	return len(d.Create) == 0 && len(d.Update) == 0 && len(d.Delete) == 0
}

// DiffTaintRules compares desired rules with the existing ones. Rules that
// are not Owned are never updated or deleted; a desired name taken by such
// a rule is not created either (that would fail with AlreadyExists forever)
// but returned in Conflicts so the caller can report it. Every list is
// sorted by name. Inputs are not modified.
func DiffTaintRules(desired, existing []resourcev1.DeviceTaintRule) (diff RuleDiff, conflicts []string) {
	byName := make(map[string]*resourcev1.DeviceTaintRule, len(existing))
	for i := range existing {
		byName[existing[i].Name] = &existing[i]
	}
	wanted := make(map[string]bool, len(desired))
	for _, d := range desired {
		wanted[d.Name] = true
		e, ok := byName[d.Name]
		switch {
		case !ok:
			diff.Create = append(diff.Create, *d.DeepCopy())
		case !Owned(e):
			conflicts = append(conflicts, d.Name)
		case !sameRule(e, &d):
			u := e.DeepCopy()
			u.Labels = mergeLabels(u.Labels, d.Labels)
			u.Spec = *d.Spec.DeepCopy()
			if e.Spec.Taint.Effect == d.Spec.Taint.Effect {
				u.Spec.Taint.TimeAdded = e.Spec.Taint.TimeAdded
			}
			diff.Update = append(diff.Update, *u)
		}
	}
	for i := range existing {
		e := &existing[i]
		if Owned(e) && !wanted[e.Name] {
			diff.Delete = append(diff.Delete, *e.DeepCopy())
		}
	}
	byRuleName := func(a, b resourcev1.DeviceTaintRule) int { return strings.Compare(a.Name, b.Name) }
	slices.SortFunc(diff.Create, byRuleName)
	slices.SortFunc(diff.Update, byRuleName)
	slices.SortFunc(diff.Delete, byRuleName)
	slices.Sort(conflicts)
	return diff, conflicts
}

// sameRule compares what the operator sets: the selector, the taint without
// its server-set timeAdded, and the operator's labels (other labels may be
// added by others and are left alone).
func sameRule(existing, desired *resourcev1.DeviceTaintRule) bool {
	for k, v := range desired.Labels {
		if existing.Labels[k] != v {
			return false
		}
	}
	et, dt := existing.Spec.Taint, desired.Spec.Taint
	et.TimeAdded, dt.TimeAdded = nil, nil
	return et == dt && equality.Semantic.DeepEqual(existing.Spec.DeviceSelector, desired.Spec.DeviceSelector)
}

// mergeLabels returns a copy of have with want's labels set.
func mergeLabels(have, want map[string]string) map[string]string {
	out := make(map[string]string, len(have)+len(want))
	for k, v := range have {
		out[k] = v
	}
	for k, v := range want {
		out[k] = v
	}
	return out
}

// DeviceID names one device.
type DeviceID struct {
	Driver, Pool, Device string
}

// HoldRules returns, sorted by name, one DeviceTaintRule per device:
// devices that left the partition while an allocation of the operator
// still holds them keep the central taint until they are released
// (docs/allocation-protocol.md, section 4), so that kube-scheduler, which
// may see the rule go before it sees the allocation, never gives them
// away.
func HoldRules(devices []DeviceID) []resourcev1.DeviceTaintRule {
	seen := map[DeviceID]bool{}
	var out []resourcev1.DeviceTaintRule
	for _, d := range devices {
		if seen[d] {
			continue
		}
		seen[d] = true
		out = append(out, resourcev1.DeviceTaintRule{
			TypeMeta:   metav1.TypeMeta{APIVersion: resourcev1.SchemeGroupVersion.String(), Kind: "DeviceTaintRule"},
			ObjectMeta: metav1.ObjectMeta{Name: HoldRuleName(d), Labels: RuleLabels()},
			Spec: resourcev1.DeviceTaintRuleSpec{
				DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: ptr(d.Driver), Pool: ptr(d.Pool), Device: ptr(d.Device)},
				Taint:          Taint(),
			},
		})
	}
	slices.SortFunc(out, func(a, b resourcev1.DeviceTaintRule) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// HoldRuleName is the deterministic name of the rule that keeps one held
// device tainted.
func HoldRuleName(d DeviceID) string {
	sum := sha256.Sum256([]byte(d.Driver + "\x00" + d.Pool + "\x00" + d.Device))
	name := ruleNamePrefix + "hold-" + namePart(d.Driver, maxDriverPart)
	if pp := namePart(d.Pool+"-"+d.Device, maxPoolPart); pp != "" {
		name += "-" + pp
	}
	return name + "-" + hex.EncodeToString(sum[:4])
}

// Covered reports whether one of rules selects the device (by driver, and
// pool and device when the rule names them).
func Covered(rules []resourcev1.DeviceTaintRule, driver, pool, device string) bool {
	for i := range rules {
		sel := rules[i].Spec.DeviceSelector
		if sel == nil || (sel.Driver != nil && *sel.Driver != driver) || (sel.Pool != nil && *sel.Pool != pool) || (sel.Device != nil && *sel.Device != device) {
			continue
		}
		return true
	}
	return false
}
