package claims

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func hold(name, keeperUID, device string, sec int) *resourceapi.ResourceClaim {
	h := claim(name, allocated(sec, device))
	h.Labels = map[string]string{HoldLabel: "true"}
	h.Annotations = map[string]string{HoldDeviceAnnotation: device}
	h.OwnerReferences = []metav1.OwnerReference{{Kind: "ResourceClaim", Name: "keeper", UID: types.UID(keeperUID)}}
	h.CreationTimestamp = metav1.NewTime(time.Unix(1000, 0))
	return h
}

func TestKeptDevices(t *testing.T) {
	ps := pools(plainPool)
	loser := claim("loser", withCEL, allocated(5, "d/p/a", "d/p/b"), managedBy(us))
	for _, tc := range []struct {
		name   string
		others []*resourceapi.ResourceClaim
		want   []string
	}{
		{"nobody else holds its devices: no hold needed", []*resourceapi.ResourceClaim{claim("x", allocated(0, "d/p/s"))}, nil},
		{"a device kept by kube-scheduler's claim needs a hold", []*resourceapi.ResourceClaim{claim("sched", allocated(0, "d/p/a"), reserved)},
			[]string{"d/p/a (kept by ns/sched)"}},
		{"the first keeper by name owns the hold", []*resourceapi.ResourceClaim{claim("z", allocated(0, "d/p/b")), claim("y", allocated(0, "d/p/b"))},
			[]string{"d/p/b (kept by ns/y)"}},
		{"a hold for the device exists already", []*resourceapi.ResourceClaim{claim("sched", allocated(0, "d/p/a")), hold("h", "uid-sched", "d/p/a", 0)}, nil},
		{"adminAccess does not keep a device", []*resourceapi.ResourceClaim{claim("admin", allocated(0, "admin:d/p/a"))}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, k := range KeptDevices(ps, loser, append(tc.others, loser)) {
				got = append(got, k.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("KeptDevices = %q, want %q", got, tc.want)
			}
		})
	}
	sharedLoser := claim("loser", allocated(5, "d/p/s"))
	if k := KeptDevices(ps, sharedLoser, []*resourceapi.ResourceClaim{sharedLoser, claim("x", allocated(0, "d/p/s"))}); len(k) != 0 {
		t.Errorf("a shareable device needs no hold: %v", k)
	}
}

func TestHoldClaim(t *testing.T) {
	keeper := claim("keeper", withFirstAvailable("gpu", "tpu"), allocated(0, "d/p/a"))
	keeper.Status.Allocation.Devices.Results[0].Request = "req/s1"
	keeper.Status.Allocation.NodeSelector = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"node"}}},
	}}}
	k := Keep{Result: keeper.Status.Allocation.Devices.Results[0], Keeper: keeper}
	h := HoldClaim(k)
	if !IsHold(h) || h.Namespace != "ns" || h.GenerateName != HoldNamePrefix || h.Annotations[HoldDeviceAnnotation] != "d/p/a" {
		t.Errorf("hold metadata = %+v", h.ObjectMeta)
	}
	if len(h.OwnerReferences) != 1 || h.OwnerReferences[0].UID != keeper.UID || h.OwnerReferences[0].Kind != "ResourceClaim" {
		t.Errorf("hold must be owned by its keeper: %+v", h.OwnerReferences)
	}
	if got := h.Spec.Devices.Requests[0].Exactly.DeviceClassName; got != "tpu" {
		t.Errorf("hold class %q, want the keeper's subrequest class tpu", got)
	}
	if SelectClaim(active, h) != WhyNone {
		t.Error("a hold must never be the operator's claim to allocate, even of an immediate class")
	}
	a := HoldAllocation(k, time.Unix(1234, 5e8))
	if len(a.Devices.Results) != 1 || DeviceKey(a.Devices.Results[0]) != "d/p/a" || a.Devices.Results[0].Request != HoldRequest {
		t.Errorf("hold allocation = %+v", a.Devices.Results)
	}
	if a.NodeSelector == nil || a.NodeSelector == keeper.Status.Allocation.NodeSelector || a.AllocationTimestamp.Unix() != 1234 {
		t.Errorf("hold allocation must copy the keeper's node selector and carry a timestamp: %+v", a)
	}
}

func TestStaleHolds(t *testing.T) {
	now := time.Unix(2000, 0)
	keeper := claim("keeper", allocated(0, "d/p/a"))
	gone := claim("gone-keeper")
	young := hold("young", "uid-keeper", "d/p/a", 0)
	young.Status.Allocation = nil
	young.CreationTimestamp = metav1.NewTime(now.Add(-time.Second))
	old := hold("old", "uid-keeper", "d/p/a", 0)
	old.Status.Allocation = nil
	for _, tc := range []struct {
		name   string
		claims []*resourceapi.ResourceClaim
		stale  bool
	}{
		{"keeper still holds the device", []*resourceapi.ResourceClaim{keeper, hold("h", "uid-keeper", "d/p/a", 0)}, false},
		{"keeper deleted", []*resourceapi.ResourceClaim{hold("h", "uid-keeper", "d/p/a", 0)}, true},
		{"keeper deallocated", []*resourceapi.ResourceClaim{gone, hold("h", "uid-gone-keeper", "d/p/a", 0)}, true},
		{"keeper holds other devices now", []*resourceapi.ResourceClaim{keeper, hold("h", "uid-keeper", "d/p/b", 0)}, true},
		{"hold being written", []*resourceapi.ResourceClaim{keeper, young}, false},
		{"hold whose write failed", []*resourceapi.ResourceClaim{keeper, old}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := StaleHolds(tc.claims, now)
			if (len(got) == 1) != tc.stale || len(got) > 1 {
				t.Errorf("StaleHolds = %d holds, want stale=%v", len(got), tc.stale)
			}
		})
	}
}

func TestHoldsAreNoRace(t *testing.T) {
	claims := []*resourceapi.ResourceClaim{claim("sched", allocated(0, "d/p/a"), reserved), hold("h", "uid-sched", "d/p/a", 9)}
	if r := FindRaces(pools(plainPool), claims); len(r) != 0 {
		t.Errorf("a hold repeats its keeper's device on purpose: %v", r)
	}
	if l := Losers(pools(plainPool), claims, func(*resourceapi.ResourceClaim) bool { return true }); len(l) != 0 {
		t.Errorf("a hold never loses a race: %v", l)
	}
}
