package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/native"
)

// The test cluster: one node-less pool "p" of driver drv with n devices,
// and class "c" selecting the driver.
const drv = "gpu.example.com"

type fakeSource struct {
	devices int
	reads   atomic.Int32
	config  atomic.Pointer[string]
}

func newSource(devices int) *fakeSource {
	s := &fakeSource{devices: devices}
	cfg := "v1"
	s.config.Store(&cfg)
	return s
}

func (s *fakeSource) Read(context.Context) (View, error) {
	s.reads.Add(1)
	sl := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "slice-p"},
		Spec:       resourceapi.ResourceSliceSpec{Driver: drv, Pool: resourceapi.ResourcePool{Name: "p", Generation: 1, ResourceSliceCount: 1}, AllNodes: ptr.To(true)},
	}
	for i := range s.devices {
		sl.Spec.Devices = append(sl.Spec.Devices, resourceapi.Device{Name: fmt.Sprintf("d%d", i)})
	}
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
		CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + drv + `"`}}}}}
	return View{
		Inputs: allocator.Inputs{Slices: []*resourceapi.ResourceSlice{sl}, Classes: []*resourceapi.DeviceClass{class}},
		Config: s.config.Load(),
	}, nil
}

func (s *fakeSource) Current(config any) bool { return config == s.config.Load() }

func claim(name, rv string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), ResourceVersion: rv},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "r", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "c", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
		}}}},
	}
}

func allocation(devices ...string) *resourceapi.AllocationResult {
	a := &resourceapi.AllocationResult{}
	for _, d := range devices {
		a.Devices.Results = append(a.Devices.Results, resourceapi.DeviceRequestAllocationResult{Request: "r", Driver: drv, Pool: "p", Device: d})
	}
	return a
}

func withAllocation(c *resourceapi.ResourceClaim, rv string, a *resourceapi.AllocationResult) *resourceapi.ResourceClaim {
	out := c.DeepCopy()
	out.ResourceVersion = rv
	out.Status.Allocation = a
	return out
}

func readyLedger(devices int) (*Ledger, *fakeSource) {
	src := newSource(devices)
	l := New(Options{Source: src})
	l.SetReady(true)
	return l, src
}

// allocate decides for c in a turn and reserves what the engine chose;
// it returns the devices, or the engine's error.
func allocate(t *testing.T, l *Ledger, c *resourceapi.ResourceClaim) ([]string, error) {
	t.Helper()
	var got []string
	err := l.Decide(context.Background(), c.Namespace, native.New(), func(d *Decision) error {
		res, err := d.Session().Allocate(context.Background(), []*resourceapi.ResourceClaim{c}, allocator.Options{})
		if err != nil {
			return err
		}
		for _, r := range res[0].Allocation.Devices.Results {
			got = append(got, r.Device)
		}
		return d.Reserve(c, res[0].Allocation, "unit-"+c.Name)
	})
	return got, err
}

// free counts the devices a new claim can still get.
func free(t *testing.T, l *Ledger) int {
	t.Helper()
	n := 0
	for i := range 10 {
		c := claim(fmt.Sprintf("probe-%d", i), "1")
		err := l.Decide(context.Background(), "probe", native.New(), func(d *Decision) error {
			res, err := d.Session().Allocate(context.Background(), []*resourceapi.ResourceClaim{c}, allocator.Options{})
			if err == nil && res[0].Allocation != nil {
				n++
				// Count it for the next probe, in this session only.
				return d.Session().Record(withAllocation(c, "1", res[0].Allocation))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The probes were recorded into the session only: drop it.
	l.Invalidate()
	return n
}

// A reservation counts as allocated in every later decision: two decisions
// never give the same device, also before any write happened.
func TestReservationCountsAsAllocated(t *testing.T) {
	l, _ := readyLedger(2)
	a, err := allocate(t, l, claim("a", "10"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := allocate(t, l, claim("b", "11"))
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(a, b) {
		t.Fatalf("both claims got %v", a)
	}
	if _, err := allocate(t, l, claim("c", "12")); !errors.Is(err, allocator.ErrUnsatisfiable) {
		t.Fatalf("third claim on two devices: err %v, want unsatisfiable", err)
	}
	if p, amb := l.Pending(); p != 2 || amb != 0 {
		t.Errorf("pending %d ambiguous %d, want 2 and 0", p, amb)
	}
}

// The evidence table of docs/allocation-protocol.md, section 1: a
// reservation ends only on a newer state, a deletion or a refusal.
func TestReservationEndsOnEvidence(t *testing.T) {
	const read = "10" // the version the decision read: the write's precondition
	for _, tc := range []struct {
		name string
		// then happens after the reservation of claim "a" with device d0.
		then          func(l *Ledger, c *resourceapi.ResourceClaim)
		wantReserved  bool
		wantAllocated bool // the ledger counts an allocation for the claim
	}{
		{name: "nothing yet", wantReserved: true, wantAllocated: true},
		{name: "a timeout: ambiguous, kept", then: func(l *Ledger, c *resourceapi.ResourceClaim) { l.Ambiguous(c.UID) },
			wantReserved: true, wantAllocated: true},
		{name: "the same version again (a lagging cache)", then: func(l *Ledger, c *resourceapi.ResourceClaim) { l.Observe(c) },
			wantReserved: true, wantAllocated: true},
		{name: "an older version", then: func(l *Ledger, c *resourceapi.ResourceClaim) { l.Observe(withAllocation(c, "9", nil)) },
			wantReserved: true, wantAllocated: true},
		{name: "a newer version carrying the allocation: confirmed", then: func(l *Ledger, c *resourceapi.ResourceClaim) {
			l.Observe(withAllocation(c, "11", allocation("d0")))
		}, wantAllocated: true},
		{name: "a newer version without it: released", then: func(l *Ledger, c *resourceapi.ResourceClaim) {
			l.Observe(withAllocation(c, "11", nil))
		}},
		{name: "a newer version with other devices: released, the other counted", then: func(l *Ledger, c *resourceapi.ResourceClaim) {
			l.Observe(withAllocation(c, "11", allocation("d1")))
		}, wantAllocated: true},
		{name: "deleted", then: func(l *Ledger, c *resourceapi.ResourceClaim) { l.ObserveDeleted(c) }},
		{name: "refused as invalid", then: func(l *Ledger, c *resourceapi.ResourceClaim) { l.Refused(c.UID) }},
		{name: "a version that is not a number proves nothing", then: func(l *Ledger, c *resourceapi.ResourceClaim) {
			l.Observe(withAllocation(c, "x", nil))
		}, wantReserved: true, wantAllocated: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := readyLedger(2)
			c := claim("a", read)
			got, err := allocate(t, l, c)
			if err != nil || !slices.Equal(got, []string{"d0"}) {
				t.Fatalf("allocate: %v %v", got, err)
			}
			if tc.then != nil {
				tc.then(l, c)
			}
			_, reserved := l.Reserved(c.UID)
			if reserved != tc.wantReserved {
				t.Errorf("reserved %v, want %v", reserved, tc.wantReserved)
			}
			if s := l.StateOf(c.UID); (s.Allocation != nil) != tc.wantAllocated {
				t.Errorf("allocation counted %v, want %v", s.Allocation != nil, tc.wantAllocated)
			}
			want := 1
			if !tc.wantAllocated {
				want = 2
			}
			if n := free(t, l); n != want {
				t.Errorf("%d devices free for others, want %d", n, want)
			}
		})
	}
}

// An answer that arrives after the claim's deletion does not bring the
// claim (and its devices) back, as long as the request was tracked.
func TestLateAnswerAfterDeletion(t *testing.T) {
	l, _ := readyLedger(1)
	c := claim("a", "10")
	if _, err := allocate(t, l, c); err != nil {
		t.Fatal(err)
	}
	done := l.Track(c.UID)
	l.ObserveDeleted(withAllocation(c, "12", nil))
	l.Observe(withAllocation(c, "11", allocation("d0"))) // the write's answer, late
	done()
	if n := free(t, l); n != 1 {
		t.Fatalf("%d devices free, want 1: a late answer revived a deleted claim", n)
	}
	if len(l.claims) != 0 {
		t.Errorf("%d records left, want none", len(l.claims))
	}
}

// A response newer than the cache is not undone by the cache's older
// state.
func TestNewestStateWins(t *testing.T) {
	l, _ := readyLedger(1)
	c := claim("a", "10")
	l.Observe(withAllocation(c, "20", allocation("d0"))) // a response
	l.Observe(withAllocation(c, "15", nil))              // the cache, behind
	if s := l.StateOf(c.UID); s.Allocation == nil || s.Version != 20 {
		t.Fatalf("state %+v, want the allocation at version 20", s)
	}
	if got := l.Newest(claim("a", "15")); got.ResourceVersion != "20" {
		t.Errorf("Newest = version %s, want 20", got.ResourceVersion)
	}
	if n := free(t, l); n != 0 {
		t.Errorf("%d free, want 0", n)
	}
	l.Observe(withAllocation(c, "21", nil)) // deallocated
	if n := free(t, l); n != 1 {
		t.Errorf("%d free after the deallocation, want 1", n)
	}
}

func TestReserveRefusals(t *testing.T) {
	l, _ := readyLedger(2)
	c := claim("a", "10")
	l.Observe(withAllocation(c, "12", allocation("d1")))
	err := l.Decide(context.Background(), "ns", native.New(), func(d *Decision) error {
		return d.Reserve(claim("a", "10"), allocation("d0"), "")
	})
	if !errors.Is(err, ErrTaken) {
		t.Errorf("reserve an allocated claim: %v, want ErrTaken", err)
	}
	b := claim("b", "10")
	done := l.Track(b.UID)
	defer done()
	l.ObserveDeleted(b) // gone, while a request of this process may answer
	err = l.Decide(context.Background(), "ns", native.New(), func(d *Decision) error {
		return d.Reserve(b, allocation("d0"), "")
	})
	if !errors.Is(err, ErrStale) {
		t.Errorf("reserve a deleted claim: %v, want ErrStale", err)
	}
	l.SetReady(false)
	if _, err := allocate(t, l, claim("z", "1")); !errors.Is(err, ErrNotReady) {
		t.Errorf("decide while not ready: %v, want ErrNotReady", err)
	}
}

// The session is kept while allocations only come in, and built again
// when one goes.
func TestSessionReuse(t *testing.T) {
	l, src := readyLedger(4)
	if _, err := allocate(t, l, claim("a", "10")); err != nil {
		t.Fatal(err)
	}
	l.Observe(withAllocation(claim("x", "5"), "6", allocation("d3"))) // someone else's allocation
	if _, err := allocate(t, l, claim("b", "11")); err != nil {
		t.Fatal(err)
	}
	if n := src.reads.Load(); n != 1 {
		t.Fatalf("%d builds for additions only, want 1", n)
	}
	l.Observe(withAllocation(claim("x", "5"), "7", nil))
	if _, err := allocate(t, l, claim("c", "12")); err != nil {
		t.Fatal(err)
	}
	if n := src.reads.Load(); n != 2 {
		t.Fatalf("%d builds after a deallocation, want 2", n)
	}
	other := "v2"
	src.config.Store(&other)
	if _, err := allocate(t, l, claim("d", "13")); err != nil {
		t.Fatal(err)
	}
	if n := src.reads.Load(); n != 3 {
		t.Fatalf("%d builds after a configuration change, want 3", n)
	}
}

func TestHolds(t *testing.T) {
	l, _ := readyLedger(3)
	if _, err := allocate(t, l, claim("a", "10")); err != nil { // d0, reserved
		t.Fatal(err)
	}
	l.Observe(withAllocation(claim("x", "5"), "6", allocation("d2")))
	got := l.Holds(func(_, _, d string) bool { return d != "d1" })
	want := []Held{{Driver: drv, Pool: "p", Device: "d0", Claim: types.NamespacedName{Namespace: "ns", Name: "a"}},
		{Driver: drv, Pool: "p", Device: "d2", Claim: types.NamespacedName{Namespace: "ns", Name: "x"}}}
	if !slices.Equal(got, want) {
		t.Errorf("Holds = %v, want %v", got, want)
	}
}

// A turn that fails keeps none of its reservations.
func TestFailedTurnReservesNothing(t *testing.T) {
	l, _ := readyLedger(2)
	err := l.Decide(context.Background(), "ns", native.New(), func(d *Decision) error {
		if err := d.Reserve(claim("a", "10"), allocation("d0"), "u"); err != nil {
			return err
		}
		return errors.New("the second claim of the unit failed")
	})
	if err == nil {
		t.Fatal("want the turn's error")
	}
	if _, ok := l.Reserved("uid-a"); ok {
		t.Error("a reservation of a failed turn stayed")
	}
	if n := free(t, l); n != 2 {
		t.Errorf("%d free, want 2", n)
	}
}
