package handover

import (
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/central"
)

const gpu = "gpu.example.com"

// poolRule is the operator's rule for a pool of gpu (pool "" for the
// whole driver) at generation gen, joined at generation joinedAt (0: no
// annotation).
func poolRule(pool string, gen, joinedAt int64) resourceapi.DeviceTaintRule {
	r := resourceapi.DeviceTaintRule{
		ObjectMeta: metav1.ObjectMeta{Name: central.RuleName(gpu, pool), UID: types.UID("uid-" + pool), Generation: gen, Labels: central.RuleLabels()},
		Spec:       resourceapi.DeviceTaintRuleSpec{DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: ptr.To(gpu)}, Taint: central.Taint()},
	}
	if pool != "" {
		r.Spec.DeviceSelector.Pool = ptr.To(pool)
	}
	if joinedAt > 0 {
		r.Annotations = map[string]string{JoinedAnnotation: JoinValue(&resourceapi.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Generation: joinedAt}})}
	}
	return r
}

func TestJoined(t *testing.T) {
	hold := central.HoldRules([]central.DeviceID{{Driver: gpu, Pool: "p", Device: "d"}})[0]
	hold.Annotations = map[string]string{JoinedAnnotation: "0"}
	foreign := poolRule("p", 1, 1)
	foreign.Labels = nil
	canary := *CanaryRule("r1")
	otherTaint := poolRule("p", 1, 1)
	otherTaint.Spec.Taint.Effect = resourceapi.DeviceTaintEffectNoExecute
	tests := []struct {
		name             string
		rule             resourceapi.DeviceTaintRule
		poolRule, joined bool
	}{
		{"pool rule joined at its generation", poolRule("p", 3, 3), true, true},
		{"driver-wide rule joined", poolRule("", 1, 1), true, true},
		{"spec changed since the join", poolRule("p", 4, 3), true, false},
		{"never joined", poolRule("p", 1, 0), true, false},
		{"a held device's rule is no pool rule", hold, false, false},
		{"someone else's rule", foreign, false, false},
		{"the canary rule", canary, false, false},
		{"not the central taint's effect", otherTaint, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PoolRule(&tt.rule); got != tt.poolRule {
				t.Errorf("PoolRule = %v, want %v", got, tt.poolRule)
			}
			if got := Joined(&tt.rule); got != tt.joined {
				t.Errorf("Joined = %v, want %v", got, tt.joined)
			}
		})
	}
}

func TestPending(t *testing.T) {
	rules := []resourceapi.DeviceTaintRule{poolRule("b", 2, 1), poolRule("a", 1, 0), poolRule("c", 5, 5), *CanaryRule("x")}
	got := Pending(rules)
	want := []RuleRef{
		{Name: central.RuleName(gpu, "a"), UID: "uid-a", Generation: 1},
		{Name: central.RuleName(gpu, "b"), UID: "uid-b", Generation: 2},
	}
	slices.SortFunc(want, func(x, y RuleRef) int {
		if x.Name < y.Name {
			return -1
		}
		return 1
	})
	if !slices.Equal(got, want) {
		t.Fatalf("Pending = %v, want %v", got, want)
	}
}

func TestJoinedPools(t *testing.T) {
	entries := []v1alpha1.CentralDevices{{Driver: gpu}, {Driver: "mh.example.com"}}
	nodeSlice := func(driver, pool string) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: ptr.To("n"), Pool: resourceapi.ResourcePool{Name: pool}}}
	}
	netSlice := func(driver, pool string) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: driver, AllNodes: ptr.To(true), Pool: resourceapi.ResourcePool{Name: pool}}}
	}
	p, err := central.NewPartition(central.Inputs{
		Entries:   entries,
		Slices:    []*resourceapi.ResourceSlice{nodeSlice(gpu, "a"), nodeSlice(gpu, "b"), netSlice("mh.example.com", "grid"), nodeSlice("mh.example.com", "local")},
		Published: []string{"mh.example.com"},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		rules []resourceapi.DeviceTaintRule
		want  map[central.PoolID]bool
	}{
		{
			name:  "no rule: only the pools the operator publishes tainted",
			rules: nil,
			want: map[central.PoolID]bool{
				{Driver: gpu, Pool: "a"}: false, {Driver: "mh.example.com", Pool: "grid"}: true, {Driver: "mh.example.com", Pool: "local"}: false,
			},
		},
		{
			name:  "a joined driver-wide rule joins every pool of the driver, present or future",
			rules: []resourceapi.DeviceTaintRule{poolRule("", 2, 2)},
			want:  map[central.PoolID]bool{{Driver: gpu, Pool: "a"}: true, {Driver: gpu, Pool: "b"}: true, {Driver: gpu, Pool: "new"}: true},
		},
		{
			name:  "a driver-wide rule whose spec changed joins nothing",
			rules: []resourceapi.DeviceTaintRule{poolRule("", 3, 2)},
			want:  map[central.PoolID]bool{{Driver: gpu, Pool: "a"}: false},
		},
		{
			name:  "pool rules join their pool only",
			rules: []resourceapi.DeviceTaintRule{poolRule("a", 1, 1), poolRule("b", 1, 0)},
			want:  map[central.PoolID]bool{{Driver: gpu, Pool: "a"}: true, {Driver: gpu, Pool: "b"}: false},
		},
		{
			name:  "one joined rule of two covering a pool is enough",
			rules: []resourceapi.DeviceTaintRule{poolRule("", 1, 0), poolRule("b", 1, 1)},
			want:  map[central.PoolID]bool{{Driver: gpu, Pool: "a"}: false, {Driver: gpu, Pool: "b"}: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			joined := JoinedPools(p, tt.rules)
			for id, want := range tt.want {
				if got := joined(id); got != want {
					t.Errorf("pool %v joined = %v, want %v", id, got, want)
				}
			}
		})
	}
}
