package native

import (
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
)

// TestPlanReusedOnlyForTheSameClaimVersion: per-node calls for one claim
// (as kube-scheduler's Filter makes them) reuse its plan, but a claim
// edited in place is planned again: always when it has no resource
// version, and when its resource version changed.
func TestPlanReusedOnlyForTheSameClaimVersion(t *testing.T) {
	s := newTestSession(t, allocator.Inputs{
		Slices: []*resourceapi.ResourceSlice{nodeSlice("n0", dev("a", "model", "x"), dev("b", "model", "y"))},
	})
	c := claim("c", req("r", 1, `device.attributes["`+drv+`"].model == "x"`))
	c.ResourceVersion = "1"
	for range 2 {
		got, _, err := allocateOne(t, s, c, allocator.Options{Node: "n0"})
		if err != nil || !slices.Equal(got, []string{"r=n0/a"}) {
			t.Fatalf("got %v, %v; want r=n0/a", got, err)
		}
	}
	first := s.lastPlan.p
	if _, _, err := allocateOne(t, s, c, allocator.Options{Node: "n0"}); err != nil || s.lastPlan.p != first {
		t.Errorf("same claim, same version: plan not reused (err %v)", err)
	}

	// A new version with another selector.
	c.ResourceVersion = "2"
	c.Spec.Devices.Requests[0].Exactly.Selectors = sel(`device.attributes["` + drv + `"].model == "y"`)
	if got, _, err := allocateOne(t, s, c, allocator.Options{Node: "n0"}); err != nil || !slices.Equal(got, []string{"r=n0/b"}) {
		t.Errorf("after a new version: got %v, %v; want r=n0/b", got, err)
	}

	// No resource version: edits in place are seen.
	c.ResourceVersion = ""
	if _, _, err := allocateOne(t, s, c, allocator.Options{Node: "n0"}); err != nil {
		t.Fatal(err)
	}
	c.Spec.Devices.Requests[0].Exactly.Selectors = sel(`device.attributes["` + drv + `"].model == "x"`)
	if got, _, err := allocateOne(t, s, c, allocator.Options{Node: "n0"}); err != nil || !slices.Equal(got, []string{"r=n0/a"}) {
		t.Errorf("without a version: got %v, %v; want r=n0/a", got, err)
	}
}

// TestReusedSearchStartsClean: the search kept with a cached plan leaves
// nothing behind: after a call that fails on another node and one that
// succeeds, the same call gives the same devices again, and recording
// the result makes the next call take the other device.
func TestReusedSearchStartsClean(t *testing.T) {
	s := newTestSession(t, allocator.Inputs{
		Slices: []*resourceapi.ResourceSlice{nodeSlice("n0", dev("a"), dev("b")), nodeSlice("n1")},
	})
	c := claim("c", req("r", 1))
	c.ResourceVersion = "1"
	for range 3 {
		if _, _, err := allocateOne(t, s, c, allocator.Options{Node: "n1"}); err == nil {
			t.Fatal("n1 has no devices, want an error")
		}
		got, _, err := allocateOne(t, s, c, allocator.Options{Node: "n0"})
		if err != nil || !slices.Equal(got, []string{"r=n0/a"}) {
			t.Fatalf("got %v, %v; want r=n0/a", got, err)
		}
	}
	_, res, _ := allocateOne(t, s, c, allocator.Options{Node: "n0"})
	done := c.DeepCopy()
	done.Status.Allocation = res.Allocation
	if err := s.Record(done); err != nil {
		t.Fatal(err)
	}
	c2 := claim("c2", req("r", 1))
	c2.ResourceVersion = "1"
	for range 2 {
		if got, _, err := allocateOne(t, s, c2, allocator.Options{Node: "n0"}); err != nil || !slices.Equal(got, []string{"r=n0/b"}) {
			t.Fatalf("after recording: got %v, %v; want r=n0/b", got, err)
		}
	}
}
