package claimpolicy

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  Action
	}{
		{"not ours", claim("c"), ActionIgnore},
		{"not ours even when allocated", claim("c", allocated(0, "d/p/a")), ActionIgnore},
		{"ours and unallocated: allocate", claim("c", withCEL), ActionAllocate},
		{"ours and allocated: never touched again", claim("c", withCEL, allocated(0, "d/p/a")), ActionAllocated},
		{"allocated and reserved", claim("c", withCEL, allocated(0, "d/p/a"), reserved), ActionAllocated},
		{"being deleted: left alone", claim("c", withCEL, deleting), ActionLeave},
		{"reserved without allocation: left alone", claim("c", withCEL, reserved), ActionLeave},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Decide(active, tc.claim); got.Action != tc.want {
				t.Errorf("Decide = %+v, want action %s", got, tc.want)
			}
		})
	}
}

func TestAllocatedByAndMovable(t *testing.T) {
	const us = "drastack-claims"
	for _, tc := range []struct {
		name    string
		claim   *resourceapi.ResourceClaim
		by      string
		movable bool
	}{
		{"unallocated: nobody", claim("c", withCEL, managedBy(us)), "", false},
		{"allocated by us, unreserved: movable", claim("c", withCEL, allocated(0, "d/p/a"), managedBy(us)), us, true},
		{"allocated by kube-scheduler: never moved", claim("c", allocated(0, "d/p/a"), managedBy("kube-scheduler")), "kube-scheduler", false},
		{"ours but reserved by a pod: never moved", claim("c", withCEL, allocated(0, "d/p/a"), managedBy(us), reserved), us, false},
		{"ours but being deleted: never moved", claim("c", withCEL, allocated(0, "d/p/a"), managedBy(us), deleting), us, false},
		{"no managed fields: unknown, not movable", claim("c", withCEL, allocated(0, "d/p/a")), "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := AllocatedBy(tc.claim); got != tc.by {
				t.Errorf("AllocatedBy = %q, want %q", got, tc.by)
			}
			if got := Movable(tc.claim, us); got != tc.movable {
				t.Errorf("Movable = %v, want %v", got, tc.movable)
			}
		})
	}
}

func TestHasFinalizer(t *testing.T) {
	c := claim("c")
	if HasFinalizer(c) {
		t.Fatal("a new claim has no finalizer")
	}
	c.Finalizers = []string{"other", "resource.kubernetes.io/delete-protection"}
	if !HasFinalizer(c) {
		t.Fatal("the delete-protection finalizer is not found")
	}
}
