package driver

import (
	"slices"
	"testing"
	"time"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// TestNextRemovalStep is the removal order as a specification: each row is
// a moment of a removal and the one step that may be taken then.
func TestNextRemovalStep(t *testing.T) {
	running := RemovalState{Policy: v1alpha1.RemovalPolicyDrain, TaintRulesServed: true, DeviceClasses: 1, Workloads: 1, Pods: 2, Objects: 6, Slices: 2}
	with := func(f func(*RemovalState)) RemovalState {
		s := running
		f(&s)
		return s
	}
	tests := []struct {
		name string
		in   RemovalState
		want RemovalStep
	}{
		{"first, new allocations are stopped with a taint", running,
			RemovalStep{Phase: PhaseTainting, Actions: []RemovalAction{ActionTaint}}},
		{"without DeviceTaintRule, the DeviceClasses go first instead", with(func(s *RemovalState) { s.TaintRulesServed = false }),
			RemovalStep{Phase: PhaseTainting, Actions: []RemovalAction{ActionDeleteDeviceClasses}}},
		{"Drain waits while an allocated claim uses a device, deleting nothing", with(func(s *RemovalState) { s.Tainted = true; s.BlockingClaims = []string{"ns/c"} }),
			RemovalStep{Phase: PhaseDraining}},
		{"Drain without DeviceTaintRule waits once the classes are gone", with(func(s *RemovalState) {
			s.TaintRulesServed = false
			s.DeviceClasses = 0
			s.BlockingClaims = []string{"ns/c"}
		}), RemovalStep{Phase: PhaseDraining}},
		{"Force does not wait for claims", with(func(s *RemovalState) {
			s.Policy = v1alpha1.RemovalPolicyForce
			s.Tainted = true
			s.BlockingClaims = []string{"ns/c"}
		}), RemovalStep{Phase: PhaseDeleting, Actions: []RemovalAction{ActionDeleteWorkloads}}},
		{"Force still stops new allocations first", with(func(s *RemovalState) {
			s.Policy = v1alpha1.RemovalPolicyForce
			s.BlockingClaims = []string{"ns/c"}
		}), RemovalStep{Phase: PhaseTainting, Actions: []RemovalAction{ActionTaint}}},
		{"an unknown policy drains, the safe choice", with(func(s *RemovalState) { s.Policy = ""; s.Tainted = true; s.BlockingClaims = []string{"ns/c"} }),
			RemovalStep{Phase: PhaseDraining}},
		{"drained: the workloads are deleted", with(func(s *RemovalState) { s.Tainted = true }),
			RemovalStep{Phase: PhaseDeleting, Actions: []RemovalAction{ActionDeleteWorkloads}}},
		{"workloads gone, pods terminating: wait, so no plugin republishes after the cleanup", with(func(s *RemovalState) { s.Tainted = true; s.Workloads = 0 }),
			RemovalStep{Phase: PhaseDeleting}},
		{"pods gone: the other objects and the leftover slices are deleted", with(func(s *RemovalState) { s.Tainted = true; s.Workloads = 0; s.Pods = 0 }),
			RemovalStep{Phase: PhaseCleaning, Actions: []RemovalAction{ActionDeleteObjects, ActionDeleteSlices}}},
		{"only slices left", RemovalState{TaintRulesServed: true, Tainted: true, Slices: 3},
			RemovalStep{Phase: PhaseCleaning, Actions: []RemovalAction{ActionDeleteSlices}}},
		{"a taint deleted by someone else is restored while slices remain", RemovalState{TaintRulesServed: true, Slices: 3},
			RemovalStep{Phase: PhaseTainting, Actions: []RemovalAction{ActionTaint}}},
		{"everything else gone: the taint is lifted last", RemovalState{TaintRulesServed: true, Tainted: true, Rules: 1},
			RemovalStep{Phase: PhaseCleaning, Actions: []RemovalAction{ActionUntaint}}},
		{"every device gone, no target left: the per-pool rules of a name the publisher shares are still lifted", RemovalState{TaintRulesServed: true, Rules: 2},
			RemovalStep{Phase: PhaseCleaning, Actions: []RemovalAction{ActionUntaint}}},
		{"no rule and no target: done, not lifting nothing forever", RemovalState{TaintRulesServed: true, Tainted: true}, RemovalStep{Done: true}},
		{"under Drain, a claim still allocated keeps the last taint in place", RemovalState{TaintRulesServed: true, Tainted: true, Rules: 1, BlockingClaims: []string{"ns/c"}},
			RemovalStep{Phase: PhaseDraining}},
		{"Drain waits while custom resources of the driver's definitions exist, its controller still running to finalize them",
			with(func(s *RemovalState) {
				s.Tainted = true
				s.CRDs = 2
				s.CustomResources = []string{"ComputeDomain team-a/cd"}
			}),
			RemovalStep{Phase: PhaseDraining}},
		{"Force does not wait for custom resources", with(func(s *RemovalState) {
			s.Policy = v1alpha1.RemovalPolicyForce
			s.Tainted = true
			s.CRDs = 2
			s.CustomResources = []string{"ComputeDomain team-a/cd"}
		}), RemovalStep{Phase: PhaseDeleting, Actions: []RemovalAction{ActionDeleteWorkloads}}},
		{"no custom resources left: the definitions are deleted with the other objects", with(func(s *RemovalState) {
			s.Tainted = true
			s.Workloads, s.Pods = 0, 0
			s.CRDs = 2
		}), RemovalStep{Phase: PhaseCleaning, Actions: []RemovalAction{ActionDeleteObjects, ActionDeleteSlices, ActionDeleteCRDs}}},
		{"Force with custom resources left: the definitions are kept, released, never deleted", RemovalState{Policy: v1alpha1.RemovalPolicyForce, TaintRulesServed: true, Tainted: true,
			CRDs: 2, CustomResources: []string{"ComputeDomain team-a/cd"}},
			RemovalStep{Phase: PhaseCleaning, Actions: []RemovalAction{ActionReleaseCRDs}}},
		{"a custom resource created during Cleaning still keeps the definitions", RemovalState{Policy: v1alpha1.RemovalPolicyDrain, TaintRulesServed: true, Tainted: true,
			CRDs: 1, CustomResources: []string{"ComputeDomain team-a/late"}},
			RemovalStep{Phase: PhaseDraining}},
		{"definitions alone need no taint", RemovalState{TaintRulesServed: true, CRDs: 1},
			RemovalStep{Phase: PhaseCleaning, Actions: []RemovalAction{ActionDeleteCRDs}}},
		{"nothing left: done", RemovalState{TaintRulesServed: true}, RemovalStep{Done: true}},
		{"nothing left without taint rules: done", RemovalState{}, RemovalStep{Done: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := NextRemovalStep(tc.in)
			if got.Phase != tc.want.Phase || got.Done != tc.want.Done || !slices.Equal(got.Actions, tc.want.Actions) {
				t.Errorf("NextRemovalStep = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestRemovalRunsToCompletion plays a whole Drain removal against a fake
// world that carries out each action, and checks the order of events.
func TestRemovalRunsToCompletion(t *testing.T) {
	s := RemovalState{Policy: v1alpha1.RemovalPolicyDrain, TaintRulesServed: true, DeviceClasses: 1, Workloads: 1, Pods: 2, Objects: 6, Slices: 2,
		BlockingClaims: []string{"team-a/train"}}
	var phases []string
	var actions []RemovalAction
	for i := 0; i < 20; i++ {
		step := NextRemovalStep(s)
		if step.Done {
			break
		}
		if len(phases) == 0 || phases[len(phases)-1] != step.Phase {
			phases = append(phases, step.Phase)
		}
		actions = append(actions, step.Actions...)
		if step.Phase == PhaseDraining {
			if s.Workloads == 0 || s.Slices == 0 {
				t.Fatalf("something was deleted before the claims were released: %+v", s)
			}
			s.BlockingClaims = nil // the user deletes the claim
		}
		if step.Phase == PhaseDeleting && len(step.Actions) == 0 {
			s.Pods = 0 // the pods terminate
		}
		for _, a := range step.Actions {
			switch a {
			case ActionTaint:
				s.Tainted, s.Rules = true, 1
			case ActionDeleteWorkloads:
				s.Workloads = 0
			case ActionDeleteObjects:
				s.Objects, s.DeviceClasses = 0, 0
			case ActionDeleteSlices:
				if s.Pods > 0 {
					t.Fatal("slices deleted while plugin pods could still publish")
				}
				s.Slices = 0
			case ActionUntaint:
				if s.Slices > 0 {
					t.Fatal("taint lifted while devices remain")
				}
				s.Tainted, s.Rules = false, 0
			}
		}
	}
	if !NextRemovalStep(s).Done {
		t.Fatalf("removal did not finish: %+v", s)
	}
	wantPhases := []string{PhaseTainting, PhaseDraining, PhaseDeleting, PhaseCleaning}
	if !slices.Equal(phases, wantPhases) {
		t.Errorf("phases %v, want %v", phases, wantPhases)
	}
	wantActions := []RemovalAction{ActionTaint, ActionDeleteWorkloads, ActionDeleteObjects, ActionDeleteSlices, ActionUntaint}
	if !slices.Equal(actions, wantActions) {
		t.Errorf("actions %v, want %v", actions, wantActions)
	}
}

// TestKeptCRDsWarning: only a step that keeps definitions warns, naming
// the custom resources that keep them.
func TestKeptCRDsWarning(t *testing.T) {
	s := RemovalState{Policy: v1alpha1.RemovalPolicyForce, CRDs: 2, CustomResources: []string{"ComputeDomain team-a/cd"}}
	msg := KeptCRDsWarning(NVIDIAGPUDriver, s, NextRemovalStep(s))
	for _, want := range []string{"keeps its 2 CustomResourceDefinitions", "ComputeDomain team-a/cd", "finalizers"} {
		if !contains(msg, want) {
			t.Errorf("warning %q lacks %q", msg, want)
		}
	}
	s.CustomResources = nil
	if msg := KeptCRDsWarning(NVIDIAGPUDriver, s, NextRemovalStep(s)); msg != "" {
		t.Errorf("definitions deleted, yet a warning: %q", msg)
	}
}

func TestRemovalStatus(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	started := now.Add(-3 * time.Minute)
	claims := make([]string, 25)
	for i := range claims {
		claims[i] = "ns/claim-" + string(rune('a'+i))
	}
	s := RemovalState{Policy: v1alpha1.RemovalPolicyDrain, BlockingClaims: claims}
	st := RemovalStatus(RemovalStep{Phase: PhaseDraining}, s, started, now)
	if st.BlockingClaimCount != 25 || len(st.BlockingClaims) != maxBlockingClaimsListed || st.BlockingClaims[0] != "ns/claim-a" {
		t.Errorf("blocking claims: count %d, listed %d (%v)", st.BlockingClaimCount, len(st.BlockingClaims), st.BlockingClaims)
	}
	if !st.Since.Time.Equal(started) || st.Policy != v1alpha1.RemovalPolicyDrain {
		t.Errorf("since %s policy %s: want the removal's start and its policy", st.Since, st.Policy)
	}
	if st := RemovalStatus(RemovalStep{Phase: PhaseCleaning}, s, time.Time{}, now); !st.Since.Time.Equal(now) || len(st.BlockingClaims) != 0 {
		t.Errorf("a new removal starts now and lists no claims outside Draining: %+v", st)
	}
	a := AssessRemoval("gpu.example.com", RemovalStatus(RemovalStep{Phase: PhaseDraining}, s, started, now), Observed{})
	if a.Declared || !a.Progressing || a.Degraded || a.Status.Reason != ReasonRemoving {
		t.Errorf("assessment of a removal: %+v", a)
	}
	for _, want := range []string{"25 allocated claims", "ns/claim-a", "since 2026-11-22T09:57:00Z"} {
		if !contains(a.Status.Message, want) {
			t.Errorf("removal message %q lacks %q", a.Status.Message, want)
		}
	}
	s.CustomResources = []string{"ComputeDomain team-a/cd"}
	st = RemovalStatus(RemovalStep{Phase: PhaseDraining}, s, started, now)
	if st.BlockingResourceCount != 1 || !slices.Equal(st.BlockingResources, s.CustomResources) {
		t.Errorf("blocking resources: count %d, listed %v", st.BlockingResourceCount, st.BlockingResources)
	}
	a = AssessRemoval(NVIDIAGPUDriver, st, Observed{})
	if !contains(a.Status.Message, "and 1 custom resource of its definitions to be deleted (ComputeDomain team-a/cd)") {
		t.Errorf("removal message %q does not name the custom resource it waits for", a.Status.Message)
	}
}

func TestTaintRules(t *testing.T) {
	names := []string{NVIDIAGPUDriver, NVIDIAComputeDomainDriver}
	rules := TaintRules("default", NVIDIAGPUDriver, names, RemovalTaintTargets(names, nil, nil), v1alpha1.RemovalPolicyForce, "resource.k8s.io/v1beta2")
	if len(rules) != 2 {
		t.Fatalf("%d rules, want one per driver name", len(rules))
	}
	for i, name := range []string{NVIDIAGPUDriver, NVIDIAComputeDomainDriver} {
		r := rules[i]
		if r.GetAPIVersion() != "resource.k8s.io/v1beta2" || r.GetKind() != "DeviceTaintRule" {
			t.Errorf("rule %d is %s %s", i, r.GetAPIVersion(), r.GetKind())
		}
		driver, _, _ := unstructuredString(r.Object, "spec", "deviceSelector", "driver")
		effect, _, _ := unstructuredString(r.Object, "spec", "taint", "effect")
		if driver != name || effect != "NoSchedule" {
			t.Errorf("rule %d selects driver %q with effect %q, want %q and NoSchedule (claims already allocated must keep running)", i, driver, effect, name)
		}
		if r.GetLabels()[LabelDriver] != NVIDIAGPUDriver || r.GetLabels()[LabelComponent] != ComponentRemoval {
			t.Errorf("rule %d labels %v", i, r.GetLabels())
		}
	}
	if rules[0].GetName() == rules[1].GetName() {
		t.Error("rules of two driver names share a name")
	}
}

// A removal never taints what the central publisher publishes under the
// same driver name: that name gets a rule per pool of the driver's own
// slices instead of one for every device (issue 22).
func TestRemovalTaintTargets(t *testing.T) {
	own := map[string][]string{"tpu.example.com": {"node-b", "node-a", "node-a"}, "gpu.example.com": {"node-a"}}
	published := map[string][]string{"tpu.example.com": {"tpu-a"}}
	got := RemovalTaintTargets([]string{"gpu.example.com", "tpu.example.com"}, own, published)
	want := []TaintTarget{{Driver: "gpu.example.com"}, {Driver: "tpu.example.com", Pool: "node-a"}, {Driver: "tpu.example.com", Pool: "node-b"}}
	if !slices.Equal(got, want) {
		t.Fatalf("targets %v, want %v", got, want)
	}
	rules := TaintRules("default", "tpu.example.com", []string{"tpu.example.com"}, got[1:], v1alpha1.RemovalPolicyDrain, "resource.k8s.io/v1")
	for i, r := range rules {
		pool, _, _ := unstructuredString(r.Object, "spec", "deviceSelector", "pool")
		if pool != want[i+1].Pool || r.GetName() == TaintRuleName(TaintTarget{Driver: "tpu.example.com"}) {
			t.Errorf("rule %s selects pool %q, want %q", r.GetName(), pool, want[i+1].Pool)
		}
	}
	if rules[0].GetName() == rules[1].GetName() {
		t.Error("two pools share a rule name")
	}
	if n := RemovalTaintTargets([]string{"tpu.example.com"}, nil, published); len(n) != 0 {
		t.Errorf("a driver with no slice of its own next to the publisher gets rules %v", n)
	}
}

// The README's recipe ends a Drain by annotating the driver's objects
// Force; the DeviceTaintRule, which outlives the others, must not turn it
// back into a Drain once they are gone (issue 22).
func TestRemovalPolicyOf(t *testing.T) {
	const drain, force = v1alpha1.RemovalPolicyDrain, v1alpha1.RemovalPolicyForce
	tests := []struct {
		name        string
		spec        v1alpha1.RemovalPolicy
		annotations []string
		previous    v1alpha1.RemovalPolicy
		want        v1alpha1.RemovalPolicy
	}{
		{"nothing known drains", "", nil, "", drain},
		{"the spec of a DRAStack being deleted wins", force, []string{"Drain"}, drain, force},
		{"one object annotated Force is enough", "", []string{"Drain", "Force", "Drain"}, drain, force},
		{"only the taint rule is left, still Drain, after a Force removal began", "", []string{"Drain"}, force, force},
		{"the objects' Drain", "", []string{"", "Drain"}, "", drain},
		{"no annotation left: the previous policy", "", nil, force, force},
	}
	for _, tc := range tests {
		if got := RemovalPolicyOf(tc.spec, tc.annotations, tc.previous); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
