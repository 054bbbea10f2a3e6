package pool

import (
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// migPool: one counter set with 2 memory slices and 3 partitions: two
// halves (one slice each) and a full device (both slices).
func migSlices() []*resourceapi.ResourceSlice {
	return []*resourceapi.ResourceSlice{
		mkSlice("counters", "p", 1, 2, sets(cset("gpu-0-cs", "mem0=1", "mem1=1", "memory=40Gi"))),
		mkSlice("devices", "p", 1, 2, devs(
			dev("half-0", consumes("gpu-0-cs", "mem0=1", "memory=20Gi")),
			dev("half-1", consumes("gpu-0-cs", "mem1=1", "memory=20Gi")),
			dev("full", consumes("gpu-0-cs", "mem0=1", "mem1=1", "memory=40Gi")),
		)),
	}
}

type healthCase struct {
	name   string
	slices []*resourceapi.ResourceSlice
	claims []*resourceapi.ResourceClaim
	// incompleteFor: how long ago the pool became incomplete.
	incompleteFor time.Duration
	wantHealth    Health
	want          []string // problems, "Reason/Severity/slice/device"
	msg           string   // must appear in some problem message
	counts        DeviceCounts
	// reasons this row produces; counterpartOf: reasons this row shows absent.
	reasons       []Reason
	counterpartOf []Reason
}

const grace = 2 * time.Minute

var healthCases = []healthCase{
	{
		name:       "healthy MIG pool, one half allocated",
		slices:     migSlices(),
		claims:     []*resourceapi.ResourceClaim{claim("c1", result{"p", "half-0", false})},
		wantHealth: HealthHealthy,
		// full no longer fits (mem0 used); half-1 does.
		counts:        DeviceCounts{Total: 3, Allocated: 1, Free: 1},
		counterpartOf: []Reason{ReasonCounterOverconsumed, ReasonDeviceDoubleAllocated, ReasonAllocatedDeviceMissing},
	},
	{
		name: "overlapping partitions over-consume a counter",
		slices: []*resourceapi.ResourceSlice{
			mkSlice("counters", "p", 1, 2, sets(cset("gpu-0-cs", "mem0=1", "mem1=1", "spare=1"))),
			mkSlice("devices", "p", 1, 2, devs(
				dev("half-0", consumes("gpu-0-cs", "mem0=1")),
				dev("full", consumes("gpu-0-cs", "mem0=1", "mem1=1")),
				dev("other", consumes("gpu-0-cs", "spare=1")),
				dev("plain"),
			)),
		},
		claims:     []*resourceapi.ResourceClaim{claim("c1", result{"p", "half-0", false}), claim("c2", result{"p", "full", false})},
		wantHealth: HealthDegraded,
		want:       []string{"CounterOverconsumed/Error/counters/"},
		msg:        "counter mem0 of counter set gpu-0-cs: allocated devices consume 2, capacity is 1",
		// other would fit its own counter, but upstream admits no
		// counter-consuming device while any counter of the pool is
		// over-consumed; plain consumes no counters.
		counts:  DeviceCounts{Total: 4, Allocated: 2, Free: 1},
		reasons: []Reason{ReasonCounterOverconsumed},
	},
	{
		name:       "the same device in two claims",
		slices:     migSlices(),
		claims:     []*resourceapi.ResourceClaim{claim("c1", result{"p", "half-1", false}), claim("c2", result{"p", "half-1", false})},
		wantHealth: HealthDegraded,
		want:       []string{"DeviceDoubleAllocated/Error/devices/half-1"},
		msg:        "device half-1 is allocated 2 times without adminAccess (claims ns/c1, ns/c2)",
		// Counters are consumed once, like upstream: half-0 still fits.
		counts:  DeviceCounts{Total: 3, Allocated: 1, Free: 1},
		reasons: []Reason{ReasonDeviceDoubleAllocated},
	},
	{
		name:   "adminAccess next to a normal allocation is fine and consumes nothing",
		slices: migSlices(),
		claims: []*resourceapi.ResourceClaim{
			claim("c1", result{"p", "full", true}),
			claim("c2", result{"p", "full", true}),
			claim("c3", result{"p", "half-0", false}),
			claim("c4", result{"p", "half-0", true}),
		},
		wantHealth:    HealthHealthy,
		counts:        DeviceCounts{Total: 3, Allocated: 1, AdminAccess: 2, Free: 1},
		counterpartOf: []Reason{ReasonDeviceDoubleAllocated, ReasonCounterOverconsumed},
	},
	{
		name:   "a device that allows multiple allocations may be in two claims",
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, devs(dev("nic", shared())))},
		claims: []*resourceapi.ResourceClaim{
			claim("c1", result{"p", "nic", false}),
			claim("c2", result{"p", "nic", false}),
		},
		wantHealth:    HealthHealthy,
		counts:        DeviceCounts{Total: 1, Allocated: 1, Free: 1},
		counterpartOf: []Reason{ReasonDeviceDoubleAllocated},
	},
	{
		name:       "allocated device dropped by a new generation",
		slices:     []*resourceapi.ResourceSlice{mkSlice("a", "p", 2, 1, devs(dev("gpu-1")))},
		claims:     []*resourceapi.ResourceClaim{claim("c1", result{"p", "gpu-0", false}), claim("c2", result{"p", "gpu-1", false})},
		wantHealth: HealthDegraded,
		want:       []string{"AllocatedDeviceMissing/Error//gpu-0"},
		msg:        "device gpu-0 is allocated to claim ns/c1 but generation 2 of the pool does not publish it",
		counts:     DeviceCounts{Total: 1, Allocated: 1},
		reasons:    []Reason{ReasonAllocatedDeviceMissing},
	},
	{
		name:          "allocations of other pools do not matter",
		slices:        []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, devs(dev("gpu-0")))},
		claims:        []*resourceapi.ResourceClaim{claim("c1", result{"other", "gpu-9", false})},
		wantHealth:    HealthHealthy,
		counts:        DeviceCounts{Total: 1, Free: 1},
		counterpartOf: []Reason{ReasonAllocatedDeviceMissing},
	},
	{
		name:          "incomplete within the grace period: no problem",
		slices:        []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 2, devs(dev("gpu-0")))},
		incompleteFor: grace,
		wantHealth:    HealthIncomplete,
		counts:        DeviceCounts{Total: 1},
		counterpartOf: []Reason{ReasonIncompletePool},
	},
	{
		name:          "incomplete beyond the grace period",
		slices:        []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 2, devs(dev("gpu-0")))},
		incompleteFor: grace + time.Second,
		wantHealth:    HealthIncomplete,
		want:          []string{"IncompletePool/Error//"},
		msg:           "pool has 1 of 2 slices of generation 1, for 2m1s (grace period 2m0s)",
		counts:        DeviceCounts{Total: 1},
		reasons:       []Reason{ReasonIncompletePool},
	},
	{
		name: "more slices than resourceSliceCount is incomplete too",
		slices: []*resourceapi.ResourceSlice{
			mkSlice("a", "p", 1, 1, devs(dev("gpu-0"))),
			mkSlice("b", "p", 1, 1, devs(dev("gpu-1"))),
		},
		incompleteFor: time.Hour,
		wantHealth:    HealthIncomplete,
		want:          []string{"IncompletePool/Error//"},
		msg:           "pool has 2 slices of generation 1 but resourceSliceCount is 1",
		counts:        DeviceCounts{Total: 2},
		reasons:       []Reason{ReasonIncompletePool},
	},
	{
		name: "invalid wins over incomplete and degraded",
		slices: []*resourceapi.ResourceSlice{
			mkSlice("a", "p", 1, 3, devs(dev("gpu-0"), dev("gpu-0"))),
		},
		claims:        []*resourceapi.ResourceClaim{claim("c1", result{"p", "gone", false})},
		incompleteFor: time.Hour,
		wantHealth:    HealthInvalid,
		want: []string{
			"AllocatedDeviceMissing/Error//gone",
			"DuplicateDeviceName/Error/a/gpu-0",
			"IncompletePool/Error//",
		},
		counts: DeviceCounts{Total: 2},
	},
	{
		name: "tainted devices are counted and not free",
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, devs(
			dev("gpu-0", taint(resourceapi.DeviceTaintEffectNoSchedule)),
			dev("gpu-1", taint(resourceapi.DeviceTaintEffectNoExecute)),
			dev("gpu-2", taint(resourceapi.DeviceTaintEffectNone)),
			dev("gpu-3"),
		))},
		claims:     []*resourceapi.ResourceClaim{claim("c1", result{"p", "gpu-3", false})},
		wantHealth: HealthHealthy,
		counts:     DeviceCounts{Total: 4, Allocated: 1, Tainted: 2, Free: 1},
	},
	{
		name:       "a warning alone keeps a pool healthy",
		slices:     []*resourceapi.ResourceSlice{mkSlice("new", "p", 2, 1, devs(dev("gpu-0"))), mkSlice("old", "p", 1, 1)},
		wantHealth: HealthHealthy,
		want:       []string{"StaleSlices/Warning//"},
		counts:     DeviceCounts{Total: 1, Free: 1},
	},
}

func TestAssess(t *testing.T) {
	for _, tc := range healthCases {
		t.Run(tc.name, func(t *testing.T) {
			p := onlyPool(t, tc.slices...)
			l := NewLedger()
			l.SetPool(p)
			for _, c := range tc.claims {
				l.AddClaim(c)
			}
			var since time.Time
			if !p.Complete() {
				since = t0.Add(-tc.incompleteFor)
			}
			r := Assess(p, l, t0, since, grace)
			if r.Health != tc.wantHealth {
				t.Errorf("health %s, want %s (problems %v)", r.Health, tc.wantHealth, r.Problems)
			}
			if got := reasons(r.Problems); !slices.Equal(got, tc.want) {
				t.Errorf("problems\n got: %q\nwant: %q\n%v", got, tc.want, r.Problems)
			}
			if tc.msg != "" && !slices.ContainsFunc(r.Problems, func(pr Problem) bool { return strings.Contains(pr.Message, tc.msg) }) {
				t.Errorf("no message contains %q: %v", tc.msg, r.Problems)
			}
			if r.Devices != tc.counts {
				t.Errorf("counts %+v, want %+v", r.Devices, tc.counts)
			}
			if !p.Complete() && r.IncompleteFor != tc.incompleteFor {
				t.Errorf("IncompleteFor %s, want %s", r.IncompleteFor, tc.incompleteFor)
			}
			for _, reason := range tc.reasons {
				if !slices.ContainsFunc(r.Problems, func(pr Problem) bool { return pr.Reason == reason }) {
					t.Errorf("row claims to produce %s but does not", reason)
				}
			}
			for _, reason := range tc.counterpartOf {
				if slices.ContainsFunc(r.Problems, func(pr Problem) bool { return pr.Reason == reason }) {
					t.Errorf("row claims %s is absent but it is present", reason)
				}
			}
		})
	}
}

func TestAssessCounterReport(t *testing.T) {
	p := onlyPool(t, migSlices()...)
	l := NewLedger()
	l.SetPool(p)
	l.AddClaim(claim("c1", result{"p", "half-0", false}))
	l.AddClaim(claim("c2", result{"p", "half-1", true})) // admin: consumes nothing
	r := Assess(p, l, t0, time.Time{}, grace)
	if len(r.CounterSets) != 1 || r.CounterSets[0].Name != "gpu-0-cs" || r.CounterSets[0].Slice != "counters" {
		t.Fatalf("counter sets %+v", r.CounterSets)
	}
	got := map[string]string{}
	var names []string
	for _, c := range r.CounterSets[0].Counters {
		got[c.Name] = c.Consumed.String() + "/" + c.Capacity.String()
		names = append(names, c.Name)
	}
	want := map[string]string{"mem0": "1/1", "mem1": "0/1", "memory": "20Gi/40Gi"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("counter %s = %s, want %s", k, got[k], v)
		}
	}
	if !slices.IsSorted(names) {
		t.Errorf("counters not sorted: %v", names)
	}
	// Assess must not change the API objects' quantities.
	fresh := migSlices()
	if a, b := p.Devices[0].Device.ConsumesCounters[0].Counters["memory"].Value, fresh[1].Spec.Devices[0].ConsumesCounters[0].Counters["memory"].Value; a.Cmp(b) != 0 {
		t.Errorf("device quantity changed to %s", a.String())
	}
}

func TestAssessWithoutLedger(t *testing.T) {
	p := onlyPool(t, migSlices()...)
	r := Assess(p, nil, t0, time.Time{}, grace)
	if r.Health != HealthHealthy || r.Devices.Free != 3 || r.Devices.Allocated != 0 {
		t.Errorf("report %+v", r)
	}
	if r.ID != p.ID || r.Slices != 2 || r.ExpectedSlices != 2 || r.Node != "node-1" || r.Generation != 1 {
		t.Errorf("identity fields %+v", r)
	}
}

func TestIncompleteTracker(t *testing.T) {
	var tr IncompleteTracker
	incomplete := onlyPool(t, mkSlice("a", "p", 1, 2))
	complete := onlyPool(t, mkSlice("a", "p", 1, 1))
	if s := tr.Observe(incomplete, t0); !s.Equal(t0) {
		t.Fatalf("first observation since %v, want %v", s, t0)
	}
	if s := tr.Observe(incomplete, t0.Add(time.Minute)); !s.Equal(t0) {
		t.Fatalf("second observation since %v, want the first time %v", s, t0)
	}
	if s := tr.Observe(complete, t0.Add(2*time.Minute)); !s.IsZero() {
		t.Fatalf("complete pool since %v, want zero", s)
	}
	if s := tr.Observe(incomplete, t0.Add(3*time.Minute)); !s.Equal(t0.Add(3 * time.Minute)) {
		t.Fatalf("incomplete again since %v, want a fresh start", s)
	}
	tr.Forget(incomplete.ID)
	if s := tr.Observe(incomplete, t0.Add(4*time.Minute)); !s.Equal(t0.Add(4 * time.Minute)) {
		t.Fatalf("after Forget since %v", s)
	}
}

func TestProblemsSortAndCap(t *testing.T) {
	ps := []Problem{
		{Reason: ReasonStaleSlices, Severity: SeverityWarning, Message: "w"},
		{Reason: ReasonMissingCounter, Severity: SeverityError, Slice: "b", Message: "x"},
		{Reason: ReasonMissingCounter, Severity: SeverityError, Slice: "a", Device: "d2", Message: "x"},
		{Reason: ReasonMissingCounter, Severity: SeverityError, Slice: "a", Device: "d1", Message: "x"},
		{Reason: ReasonDuplicateDeviceName, Severity: SeverityError, Message: "y"},
	}
	SortProblems(ps)
	want := []string{
		"DuplicateDeviceName/Error//",
		"MissingCounter/Error/a/d1",
		"MissingCounter/Error/a/d2",
		"MissingCounter/Error/b/",
		"StaleSlices/Warning//",
	}
	if got := reasons(ps); !slices.Equal(got, want) {
		t.Fatalf("sorted %q, want %q", got, want)
	}
	for _, tc := range []struct {
		n, kept, omitted int
	}{{0, 0, 5}, {-1, 0, 5}, {2, 2, 3}, {5, 5, 0}, {9, 5, 0}} {
		kept, omitted := CapProblems(ps, tc.n)
		if len(kept) != tc.kept || omitted != tc.omitted {
			t.Errorf("CapProblems(%d) = %d kept, %d omitted; want %d, %d", tc.n, len(kept), omitted, tc.kept, tc.omitted)
		}
		if len(kept) > 0 && kept[0] != ps[0] {
			t.Errorf("CapProblems(%d) does not keep the first problem", tc.n)
		}
	}
	// Appending to the capped list must not overwrite the original.
	kept, _ := CapProblems(ps, 1)
	_ = append(kept, Problem{Reason: ReasonIncompletePool})
	if ps[1].Reason != ReasonMissingCounter {
		t.Errorf("append to capped list changed the original")
	}
}
