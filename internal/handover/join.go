package handover

import (
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drastack/drastack/internal/central"
)

// JoinedAnnotation records on a central DeviceTaintRule that the pools it
// taints joined the partition: its value is the rule's metadata.generation
// when they did. A rule whose spec changed since (a new generation) is not
// joined until the barrier ran again.
const JoinedAnnotation = "resource.drastack.io/joined"

// RuleRef names one spec of one rule: a join is valid for it only.
type RuleRef struct {
	Name       string
	UID        types.UID
	Generation int64
}

// RefOf returns the rule's RuleRef.
func RefOf(rule *resourceapi.DeviceTaintRule) RuleRef {
	return RuleRef{Name: rule.Name, UID: rule.UID, Generation: rule.Generation}
}

// String is the rule's name and generation, for messages.
func (r RuleRef) String() string { return r.Name + "@" + strconv.FormatInt(r.Generation, 10) }

// JoinValue is the value of JoinedAnnotation for the rule's current spec.
func JoinValue(rule *resourceapi.DeviceTaintRule) string {
	return strconv.FormatInt(rule.Generation, 10)
}

// PoolRule says whether rule is one of the operator's central rules that
// taint whole pools (a driver, or one pool of it), as opposed to the rules
// that keep one held device tainted while it leaves the partition
// (central.HoldRules) and to anyone else's rules.
func PoolRule(rule *resourceapi.DeviceTaintRule) bool {
	sel := rule.Spec.DeviceSelector
	return central.Owned(rule) && sel != nil && sel.Driver != nil && sel.Device == nil &&
		rule.Spec.Taint.Key == central.TaintKey && rule.Spec.Taint.Effect == central.TaintEffect
}

// Joined says whether rule is a pool rule whose current spec has joined.
func Joined(rule *resourceapi.DeviceTaintRule) bool {
	return PoolRule(rule) && rule.Annotations[JoinedAnnotation] == JoinValue(rule)
}

// Pending returns the pool rules that have not joined, sorted by name: the
// rules the next barrier round covers.
func Pending(rules []resourceapi.DeviceTaintRule) []RuleRef {
	var out []RuleRef
	for i := range rules {
		if PoolRule(&rules[i]) && !Joined(&rules[i]) {
			out = append(out, RefOf(&rules[i]))
		}
	}
	slices.SortFunc(out, func(a, b RuleRef) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// JoinedPools returns which central pools of p the operator may allocate
// from, as far as the hand-over goes (central.EngineView also requires
// every device to carry the taint): a pool whose slices the operator
// publishes with the taint in them (central.Partition.SelfPublished), and a
// pool selected by a joined pool rule. A pool selected by several rules is
// joined when one of them is: that rule's taint reached kube-scheduler and
// the binding cycles it could have missed are over.
func JoinedPools(p *central.Partition, rules []resourceapi.DeviceTaintRule) func(central.PoolID) bool {
	var joined []*resourceapi.DeviceTaintRule
	for i := range rules {
		if Joined(&rules[i]) {
			joined = append(joined, &rules[i])
		}
	}
	return func(id central.PoolID) bool {
		if p != nil && p.SelfPublished(id) {
			return true
		}
		for _, r := range joined {
			if SelectsPool(r, id) {
				return true
			}
		}
		return false
	}
}

// SelectsPool says whether a pool rule selects the whole pool.
func SelectsPool(rule *resourceapi.DeviceTaintRule, id central.PoolID) bool {
	sel := rule.Spec.DeviceSelector
	return sel != nil && sel.Device == nil && (sel.Driver == nil || *sel.Driver == id.Driver) && (sel.Pool == nil || *sel.Pool == id.Pool)
}
