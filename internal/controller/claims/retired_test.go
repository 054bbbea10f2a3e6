package claims

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestRetiredRules(t *testing.T) {
	rule := func(uid, rv string) resourceapi.DeviceTaintRule {
		return resourceapi.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: uid, UID: types.UID(uid), ResourceVersion: rv}}
	}
	names := func(rules []resourceapi.DeviceTaintRule) []string {
		var out []string
		for _, r := range rules {
			out = append(out, r.Name+"@"+r.ResourceVersion)
		}
		return out
	}
	var r retiredRules
	if got := names(r.current([]resourceapi.DeviceTaintRule{rule("a", "5")})); len(got) != 1 {
		t.Fatalf("nothing retired: got %v", got)
	}
	deleted, narrowed := rule("a", "5"), rule("b", "7")
	r.retire(&deleted)
	r.retire(&narrowed)
	for _, tc := range []struct {
		name  string
		cache []resourceapi.DeviceTaintRule
		want  []string
		left  int
	}{
		{"the cache still shows both as retired", []resourceapi.DeviceTaintRule{rule("a", "5"), rule("b", "7"), rule("c", "3")}, []string{"c@3"}, 2},
		{"an older version of a retired rule is stale too", []resourceapi.DeviceTaintRule{rule("a", "4"), rule("b", "7")}, nil, 2},
		{"the narrowed rule shows its newer version", []resourceapi.DeviceTaintRule{rule("a", "5"), rule("b", "9")}, []string{"b@9"}, 1},
		{"the deleted rule is gone from the cache", []resourceapi.DeviceTaintRule{rule("b", "9")}, []string{"b@9"}, 0},
		{"a new rule under the deleted one's name has a new UID", []resourceapi.DeviceTaintRule{rule("a2", "11")}, []string{"a2@11"}, 0},
	} {
		got := names(r.current(tc.cache))
		if len(got) != len(tc.want) {
			t.Fatalf("%s: got %v, want %v", tc.name, got, tc.want)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Fatalf("%s: got %v, want %v", tc.name, got, tc.want)
			}
		}
		if n := len(r.at); n != tc.left {
			t.Errorf("%s: %d retirements left, want %d", tc.name, n, tc.left)
		}
	}
	again := rule("b", "9")
	if r.stale(&again) {
		t.Error("a rule forgotten once the cache caught up is stale again")
	}
}

// TestSimulationRetiredRules replays the seeds on which the 100,000-seed
// run found a device given twice: the taint loop deleted a pool's rule,
// and a session built from a cache that still showed the rule allocated
// from the pool while kube-scheduler, which no longer saw it, did too.
// With the engine trusting the cache (trustCache) each still fails; with
// retiredRules none does.
func TestSimulationRetiredRules(t *testing.T) {
	replaySwitched(t, []uint64{11928, 77903, 77912}, protocolSwitches{trustCache: true})
}

// replaySwitched replays seeds that once failed, each with a part of the
// protocol off (it must still fail: the replay reaches the schedule) and
// on (it must not).
func replaySwitched(t *testing.T, seeds []uint64, off protocolSwitches) {
	t.Helper()
	for _, seed := range seeds {
		for _, o := range []protocolSwitches{off, {}} {
			v := newSimWorld(seed, simFullOptions()).switchOff(o).run()
			switch {
			case o != (protocolSwitches{}) && v == nil:
				t.Errorf("seed %d with %+v: no violation (the replay no longer reaches the schedule)", seed, off)
			case o == (protocolSwitches{}) && v != nil:
				t.Errorf("seed %d: step %d: %s", seed, v.step, v.what)
			}
		}
	}
}
