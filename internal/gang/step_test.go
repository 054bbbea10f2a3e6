package gang

import (
	"strings"
	"testing"
	"time"

	"github.com/drastack/drastack/internal/allocator"
)

func TestInUnit(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    Member
		want bool
	}{
		{"gated, claims to place", Member{Gated: true, ToPlace: 2}, true},
		{"gated, claims placed: waits for the lift", Member{Gated: true, Placed: 1}, true},
		{"gated, claims not created yet", Member{Gated: true, Waiting: "claim x does not exist"}, true},
		{"gated, only kube-scheduler's claims", Member{Gated: true}, false},
		{"not gated (webhook missed it), claims to place", Member{ToPlace: 1}, true},
		{"not gated, its writes under way", Member{Pending: 1}, true},
		{"not gated, all allocated: kube-scheduler's now", Member{Placed: 2}, false},
		{"not gated, waiting, nothing of the operator's known", Member{Waiting: "claim x does not exist"}, false},
		{"bound", Member{Bound: true, Gated: true, ToPlace: 1}, false},
	} {
		if got := tc.m.InUnit(); got != tc.want {
			t.Errorf("%s: InUnit = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestNext(t *testing.T) {
	spec := Spec{Namespace: "ns", Name: "train", Source: SourceLabel, MinCount: 3,
		Constraints: []allocator.GangConstraint{{NodeLabel: "rack"}}}
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	timeout := time.Minute
	gated := func(name string, toPlace, placed, pending int) Member {
		return Member{Name: name, Gated: true, ToPlace: toPlace, Placed: placed, Movable: placed, Pending: pending}
	}
	// immediate is a gated member whose only claim is an immediate one,
	// allocated before the pod: placed, but not the unit's to take back.
	immediate := func(name string) Member {
		return Member{Name: name, Gated: true, Placed: 1}
	}
	for _, tc := range []struct {
		name    string
		members []Member
		self    string
		now     time.Time
		want    Step
		why     string // substring of Why
	}{
		{
			name:    "a pod outside the unit goes the single-pod way",
			members: []Member{{Name: "a", Placed: 1}, gated("b", 1, 0, 0), gated("c", 1, 0, 0)},
			self:    "a", now: start, want: Step{Action: ActionNone},
		},
		{
			name:    "a pod that is not a member at all",
			members: []Member{gated("b", 1, 0, 0)},
			self:    "x", now: start, want: Step{Action: ActionNone},
		},
		{
			name:    "two of three pods: wait, look again when the timeout is due",
			members: []Member{gated("a", 1, 0, 0), gated("b", 1, 0, 0)},
			self:    "a", now: start.Add(20 * time.Second), want: Step{Action: ActionWaitCount, After: 40 * time.Second},
			why: "gang ns/train has 2 of its 3 pods",
		},
		{
			name:    "two of three pods past the timeout: report, keep waiting",
			members: []Member{gated("a", 1, 0, 0), gated("b", 1, 0, 0)},
			self:    "b", now: start.Add(90 * time.Second), want: Step{Action: ActionWaitCount, Report: true},
			why: "has 2 of its 3 pods after 1m30s",
		},
		{
			name:    "a member left after the gang was placed: the rest hold devices, take them back",
			members: []Member{gated("a", 0, 1, 0), gated("b", 0, 2, 0)},
			self:    "a", now: start, want: Step{Action: ActionUndo, Then: ActionWaitCount}, why: "has 2 of its 3 pods and a, b hold devices",
		},
		{
			name:    "short of pods with a write under way: finish it first",
			members: []Member{gated("a", 0, 0, 1), gated("b", 0, 1, 0)},
			self:    "b", now: start, want: Step{Action: ActionFinish},
		},
		{
			name:    "short of pods, only an immediate claim allocated: wait",
			members: []Member{immediate("a"), gated("b", 1, 0, 0)},
			self:    "a", now: start.Add(20 * time.Second), want: Step{Action: ActionWaitCount, After: 40 * time.Second},
		},
		{
			name:    "an immediate claim is not taken back: the others are placed around it",
			members: []Member{immediate("a"), gated("b", 1, 0, 0), gated("c", 1, 0, 0)},
			self:    "b", now: start, want: Step{Action: ActionPlace},
		},
		{
			name:    "immediate claims only, all allocated: lift",
			members: []Member{immediate("a"), gated("b", 0, 1, 0), immediate("c")},
			self:    "c", now: start, want: Step{Action: ActionLift},
		},
		{
			name:    "a running member counts toward the minimum",
			members: []Member{{Name: "a", Bound: true}, gated("b", 1, 0, 0), gated("c", 1, 0, 0)},
			self:    "b", now: start, want: Step{Action: ActionPlace},
		},
		{
			name:    "a member's claim is not created yet: wait",
			members: []Member{gated("a", 1, 0, 0), {Name: "b", Gated: true, Waiting: "claim b-gpu does not exist"}, gated("c", 1, 0, 0)},
			self:    "a", now: start, want: Step{Action: ActionWaitClaims}, why: "pod b: claim b-gpu does not exist",
		},
		{
			name:    "a member waits for a claim while others hold devices: take them back, then wait",
			members: []Member{gated("a", 1, 1, 0), {Name: "b", Gated: true, Waiting: "immediate claim imm is not allocated yet"}, gated("c", 0, 1, 0)},
			self:    "b", now: start, want: Step{Action: ActionUndo, Then: ActionWaitClaims},
			why: "waits for pod b: immediate claim imm is not allocated yet; a, c hold devices",
		},
		{
			name:    "a member waits for a deleted claim, the others hold only an immediate claim: wait",
			members: []Member{immediate("a"), {Name: "b", Gated: true, Waiting: "claim imm does not exist"}, gated("c", 1, 0, 0)},
			self:    "c", now: start, want: Step{Action: ActionWaitClaims}, why: "pod b: claim imm does not exist",
		},
		{
			name:    "a member waits for a claim while the unit's writes are under way: finish them first",
			members: []Member{{Name: "a", Gated: true, Waiting: "claim a-gpu does not exist"}, gated("b", 0, 0, 1), gated("c", 0, 1, 0)},
			self:    "a", now: start, want: Step{Action: ActionFinish},
		},
		{
			name:    "writes under way: finish them",
			members: []Member{gated("a", 0, 0, 1), gated("b", 0, 0, 2), gated("c", 0, 1, 0)},
			self:    "c", now: start, want: Step{Action: ActionFinish},
		},
		{
			name:    "placed in part, nothing under way: take back",
			members: []Member{gated("a", 0, 1, 0), gated("b", 1, 0, 0), gated("c", 0, 1, 0)},
			self:    "b", now: start, want: Step{Action: ActionUndo, Then: ActionPlace}, why: "claims of a, c allocated, of b not",
		},
		{
			name:    "one member half placed: take back",
			members: []Member{gated("a", 1, 1, 0), gated("b", 1, 0, 0), gated("c", 1, 0, 0)},
			self:    "a", now: start, want: Step{Action: ActionUndo, Then: ActionPlace},
		},
		{
			name:    "all placed: lift every gate",
			members: []Member{gated("a", 0, 1, 0), gated("b", 0, 2, 0), gated("c", 0, 1, 0)},
			self:    "a", now: start, want: Step{Action: ActionLift}, why: "gang ns/train placed: a, b, c",
		},
		{
			name:    "a late member joins a running gang: placed on its own as the unit",
			members: []Member{{Name: "a", Bound: true}, {Name: "b", Bound: true}, gated("c", 1, 0, 0), gated("d", 1, 0, 0)},
			self:    "d", now: start, want: Step{Action: ActionPlace},
		},
		{
			name:    "nothing placed: place all",
			members: []Member{gated("a", 1, 0, 0), gated("b", 2, 0, 0), gated("c", 1, 0, 0)},
			self:    "c", now: start, want: Step{Action: ActionPlace},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Next(spec, tc.members, tc.self, start, tc.now, timeout)
			why := got.Why
			got.Why = ""
			if got != tc.want {
				t.Errorf("Next = %+v, want %+v (why %q)", got, tc.want, why)
			}
			if !strings.Contains(why, tc.why) {
				t.Errorf("why = %q, want it to contain %q", why, tc.why)
			}
		})
	}
}

func TestDomain(t *testing.T) {
	spec := Spec{Namespace: "ns", Name: "g", MinCount: 2, Constraints: []allocator.GangConstraint{
		{NodeLabel: "rack"}, {MatchAttribute: "gpu.example.com/clique"}, {NodeLabel: "zone"},
	}}
	for _, tc := range []struct {
		name    string
		placed  map[string]map[string]string
		want    map[string]string
		wantErr string
	}{
		{name: "nothing running: no domain", placed: nil, want: map[string]string{}},
		{name: "members running in one domain fix it", placed: map[string]map[string]string{
			"n1": {"rack": "r1", "zone": "z"}, "n2": {"rack": "r1", "zone": "z", "other": "x"},
		}, want: map[string]string{"rack": "r1", "zone": "z"}},
		{name: "two racks", placed: map[string]map[string]string{"n1": {"rack": "r1", "zone": "z"}, "n2": {"rack": "r2", "zone": "z"}},
			wantErr: "members run in two rack domains (r1 on node n1, r2 on node n2)"},
		{name: "a node without the label", placed: map[string]map[string]string{"n1": {"zone": "z"}},
			wantErr: "member on node n1 runs outside any rack domain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Domain(spec, tc.placed)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("Domain = %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("Domain = %v, want %v", got, tc.want)
				}
			}
		})
	}
	if !InDomain(map[string]string{"rack": "r1", "zone": "z"}, map[string]string{"rack": "r1"}) {
		t.Error("a node in the rack is in the domain")
	}
	if InDomain(map[string]string{"zone": "z"}, map[string]string{"rack": "r1"}) || InDomain(map[string]string{"rack": "r2"}, map[string]string{"rack": "r1"}) {
		t.Error("a node outside the rack is not in the domain")
	}
}
