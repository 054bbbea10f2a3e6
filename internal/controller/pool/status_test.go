package pool

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	poolpkg "github.com/drastack/drastack/internal/pool"
)

func newTestReconciler() *Reconciler {
	r := &Reconciler{}
	r.init()
	return r
}

// world is the input of one status scenario.
type world struct {
	slices []*resourceapi.ResourceSlice
	claims []*resourceapi.ResourceClaim
	nodes  []string
}

func (w world) reconciler() *Reconciler {
	r := newTestReconciler()
	for _, s := range w.slices {
		r.model.upsertSlice(nil, s)
	}
	for _, c := range w.claims {
		r.model.upsertClaim(nil, c)
	}
	for _, n := range w.nodes {
		r.model.setNode(n, true)
	}
	return r
}

func condStatus(st *v1alpha1.DevicePoolStatus, t string) string {
	c := meta.FindStatusCondition(st.Conditions, t)
	if c == nil {
		return "-"
	}
	return string(c.Status) + "/" + c.Reason
}

// The status of a pool, from its slices and the allocations, reads as the
// table of SEMANTICS.md: health, the reason code that explains it, device
// counts and the condition that names the broken part.
func TestStatusFromSlicesAndClaims(t *testing.T) {
	cfg := defaultConfig()
	tests := []struct {
		name      string
		world     world
		at        time.Duration // validated at t0+at; the pool is first seen at t0
		health    v1alpha1.PoolHealth
		reason    string
		devices   v1alpha1.DeviceCounts
		slices    v1alpha1.SliceCounts
		valid     string
		complete  string
		consist   string
		node      string
		consumed  string // memory consumed from counter set gpu-0, "" when none
		problems  int
		incomplet bool // incompleteSince set
	}{
		{
			name:    "healthy node-local pool",
			world:   world{slices: []*resourceapi.ResourceSlice{gpuSlice("n1", "node-1", "node-1", 1, 1, "gpu-0", "gpu-1")}, nodes: []string{"node-1"}},
			health:  v1alpha1.PoolHealthy,
			devices: v1alpha1.DeviceCounts{Total: 2, Free: 2},
			slices:  v1alpha1.SliceCounts{Current: 1, Expected: 1},
			valid:   "True/Valid", complete: "True/AllSlicesPublished", consist: "True/AllocationsConsistent", node: "True/NodeFound",
		},
		{
			name: "allocated device is counted and consumes its counters",
			world: world{
				slices: []*resourceapi.ResourceSlice{
					counterSlice("c", "node-1", "node-1", 1, 2, "40Gi"),
					partitionSlice("p", "node-1", "node-1", 1, 2, "memory", "10Gi", "mig-0", "mig-1", "mig-2"),
				},
				claims: []*resourceapi.ResourceClaim{claim("x", alloc{"node-1", "mig-1", false})},
				nodes:  []string{"node-1"},
			},
			health:  v1alpha1.PoolHealthy,
			devices: v1alpha1.DeviceCounts{Total: 3, Allocated: 1, Free: 2},
			slices:  v1alpha1.SliceCounts{Current: 2, Expected: 2},
			valid:   "True/Valid", complete: "True/AllSlicesPublished", consist: "True/AllocationsConsistent", node: "True/NodeFound",
			consumed: "10Gi",
		},
		{
			name: "device consuming a counter its set lacks makes the pool Invalid",
			world: world{slices: []*resourceapi.ResourceSlice{
				counterSlice("c", "node-1", "node-1", 1, 2, "40Gi"),
				partitionSlice("p", "node-1", "node-1", 1, 2, "no-such-counter", "10Gi", "mig-0"),
			}, nodes: []string{"node-1"}},
			health:  v1alpha1.PoolInvalid,
			reason:  "MissingCounter",
			devices: v1alpha1.DeviceCounts{Total: 1},
			slices:  v1alpha1.SliceCounts{Current: 2, Expected: 2},
			valid:   "False/MissingCounter", complete: "True/AllSlicesPublished", consist: "True/AllocationsConsistent", node: "True/NodeFound",
			consumed: "0", problems: 1,
		},
		{
			name: "Invalid pool names its structural reason even with allocation problems",
			world: world{
				slices: []*resourceapi.ResourceSlice{gpuSlice("n1", "node-1", "node-1", 1, 1, "gpu-0", "gpu-0")},
				claims: []*resourceapi.ResourceClaim{claim("x", alloc{"node-1", "gone", false})},
				nodes:  []string{"node-1"},
			},
			health:  v1alpha1.PoolInvalid,
			reason:  "DuplicateDeviceName",
			devices: v1alpha1.DeviceCounts{Total: 2},
			slices:  v1alpha1.SliceCounts{Current: 1, Expected: 1},
			valid:   "False/DuplicateDeviceName", complete: "True/AllSlicesPublished", consist: "False/AllocatedDeviceMissing", node: "True/NodeFound",
			problems: 2,
		},
		{
			name: "half-published generation within the grace period: Incomplete without problems",
			world: world{slices: []*resourceapi.ResourceSlice{
				gpuSlice("a", "node-1", "node-1", 2, 2, "gpu-0"),
				gpuSlice("old", "node-1", "node-1", 1, 1, "gpu-0"),
			}, nodes: []string{"node-1"}},
			at:      time.Minute,
			health:  v1alpha1.PoolIncomplete,
			devices: v1alpha1.DeviceCounts{Total: 1},
			slices:  v1alpha1.SliceCounts{Current: 1, Expected: 2, Stale: 1},
			valid:   "True/Valid", complete: "False/SlicesMissing", consist: "True/AllocationsConsistent", node: "True/NodeFound",
			problems: 1, incomplet: true, // StaleSlices (a warning)
		},
		{
			name: "half-published generation past the grace period: IncompletePool",
			world: world{slices: []*resourceapi.ResourceSlice{
				gpuSlice("a", "node-1", "node-1", 2, 2, "gpu-0"),
			}, nodes: []string{"node-1"}},
			at:      cfg.grace + time.Second,
			health:  v1alpha1.PoolIncomplete,
			reason:  "IncompletePool",
			devices: v1alpha1.DeviceCounts{Total: 1},
			slices:  v1alpha1.SliceCounts{Current: 1, Expected: 2},
			valid:   "True/Valid", complete: "False/IncompletePool", consist: "True/AllocationsConsistent", node: "True/NodeFound",
			problems: 1, incomplet: true,
		},
		{
			name: "allocated device the pool no longer publishes: Degraded",
			world: world{
				slices: []*resourceapi.ResourceSlice{gpuSlice("n1", "node-1", "node-1", 1, 1, "gpu-0")},
				claims: []*resourceapi.ResourceClaim{claim("x", alloc{"node-1", "gpu-7", false})},
				nodes:  []string{"node-1"},
			},
			health:  v1alpha1.PoolDegraded,
			reason:  "AllocatedDeviceMissing",
			devices: v1alpha1.DeviceCounts{Total: 1, Free: 1},
			slices:  v1alpha1.SliceCounts{Current: 1, Expected: 1},
			valid:   "True/Valid", complete: "True/AllSlicesPublished", consist: "False/AllocatedDeviceMissing", node: "True/NodeFound",
			problems: 1,
		},
		{
			name: "device in two claims without adminAccess: Degraded",
			world: world{
				slices: []*resourceapi.ResourceSlice{gpuSlice("n1", "node-1", "node-1", 1, 1, "gpu-0")},
				claims: []*resourceapi.ResourceClaim{claim("x", alloc{"node-1", "gpu-0", false}), claim("y", alloc{"node-1", "gpu-0", false})},
				nodes:  []string{"node-1"},
			},
			health:  v1alpha1.PoolDegraded,
			reason:  "DeviceDoubleAllocated",
			devices: v1alpha1.DeviceCounts{Total: 1, Allocated: 1},
			slices:  v1alpha1.SliceCounts{Current: 1, Expected: 1},
			valid:   "True/Valid", complete: "True/AllSlicesPublished", consist: "False/DeviceDoubleAllocated", node: "True/NodeFound",
			problems: 1,
		},
		{
			name: "device in a claim and an adminAccess claim: Healthy",
			world: world{
				slices: []*resourceapi.ResourceSlice{gpuSlice("n1", "node-1", "node-1", 1, 1, "gpu-0")},
				claims: []*resourceapi.ResourceClaim{claim("x", alloc{"node-1", "gpu-0", false}), claim("y", alloc{"node-1", "gpu-0", true})},
				nodes:  []string{"node-1"},
			},
			health:  v1alpha1.PoolHealthy,
			devices: v1alpha1.DeviceCounts{Total: 1, Allocated: 1},
			slices:  v1alpha1.SliceCounts{Current: 1, Expected: 1},
			valid:   "True/Valid", complete: "True/AllSlicesPublished", consist: "True/AllocationsConsistent", node: "True/NodeFound",
		},
		{
			name: "counter over-consumed: Degraded",
			world: world{
				slices: []*resourceapi.ResourceSlice{
					counterSlice("c", "node-1", "node-1", 1, 2, "15Gi"),
					partitionSlice("p", "node-1", "node-1", 1, 2, "memory", "10Gi", "mig-0", "mig-1"),
				},
				claims: []*resourceapi.ResourceClaim{claim("x", alloc{"node-1", "mig-0", false}), claim("y", alloc{"node-1", "mig-1", false})},
				nodes:  []string{"node-1"},
			},
			health:  v1alpha1.PoolDegraded,
			reason:  "CounterOverconsumed",
			devices: v1alpha1.DeviceCounts{Total: 2, Allocated: 2},
			slices:  v1alpha1.SliceCounts{Current: 2, Expected: 2},
			valid:   "True/Valid", complete: "True/AllSlicesPublished", consist: "False/CounterOverconsumed", node: "True/NodeFound",
			consumed: "20Gi", problems: 1,
		},
		{
			name:    "slices of a deleted node: NodePresent False, health unchanged",
			world:   world{slices: []*resourceapi.ResourceSlice{gpuSlice("n1", "node-1", "node-1", 1, 1, "gpu-0")}},
			health:  v1alpha1.PoolHealthy,
			devices: v1alpha1.DeviceCounts{Total: 1, Free: 1},
			slices:  v1alpha1.SliceCounts{Current: 1, Expected: 1},
			valid:   "True/Valid", complete: "True/AllSlicesPublished", consist: "True/AllocationsConsistent", node: "False/NodeNotFound",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.world.reconciler()
			id := poolpkg.KeyOf(tt.world.slices[0])
			// First sight at t0 starts the incomplete clock.
			if _, ok := r.validate(id, nil, t0, cfg); !ok {
				t.Fatal("pool does not exist")
			}
			v, _ := r.validate(id, nil, t0.Add(tt.at), cfg)
			st := &v.status
			if st.Driver != testDriver || st.Pool != id.Pool || st.Node != "node-1" {
				t.Errorf("identity = %s/%s on %q", st.Driver, st.Pool, st.Node)
			}
			if st.Health != tt.health || st.Reason != tt.reason {
				t.Errorf("health = %s (%q), want %s (%q); problems %+v", st.Health, st.Reason, tt.health, tt.reason, st.Problems)
			}
			// tt.devices holds the overlapping counts; the exclusive
			// breakdown must add up to the total, with available = free.
			legacy := st.Devices
			legacy.Available, legacy.Shared, legacy.Unavailable = 0, 0, v1alpha1.UnavailableDevices{}
			if legacy != tt.devices {
				t.Errorf("devices = %+v, want %+v", st.Devices, tt.devices)
			}
			if u := st.Devices.Unavailable; st.Devices.Available != st.Devices.Free ||
				st.Devices.Available+u.PoolUnusable+u.Allocated+u.Tainted+u.BlockedByCounters != st.Devices.Total {
				t.Errorf("availability does not add up: %+v", st.Devices)
			}
			if st.Slices != tt.slices {
				t.Errorf("slices = %+v, want %+v", st.Slices, tt.slices)
			}
			for _, c := range []struct{ typ, want string }{
				{ConditionValid, tt.valid}, {ConditionComplete, tt.complete}, {ConditionConsistent, tt.consist}, {ConditionNodePresent, tt.node},
			} {
				if got := condStatus(st, c.typ); got != c.want {
					t.Errorf("condition %s = %s, want %s", c.typ, got, c.want)
				}
			}
			if len(st.Problems) != tt.problems {
				t.Errorf("%d problems, want %d: %+v", len(st.Problems), tt.problems, st.Problems)
			}
			for _, p := range st.Problems {
				if !poolpkg.Reason(p.Reason).Known() || p.Message == "" {
					t.Errorf("problem without a known reason or message: %+v", p)
				}
			}
			if (st.IncompleteSince != nil) != tt.incomplet {
				t.Errorf("incompleteSince = %v, want set: %v", st.IncompleteSince, tt.incomplet)
			}
			if tt.incomplet && !st.IncompleteSince.Time.Equal(t0) {
				t.Errorf("incompleteSince = %v, want the first sight %v", st.IncompleteSince, t0)
			}
			got := ""
			for _, cs := range st.CounterSets {
				for _, c := range cs.Counters {
					if cs.Name == "gpu-0" && c.Name == "memory" {
						got = c.Consumed.String()
					}
				}
			}
			if tt.consumed != "" {
				want := resource.MustParse(tt.consumed)
				if got == "" {
					t.Errorf("no memory counter in %+v", st.CounterSets)
				} else if have := resource.MustParse(got); have.Cmp(want) != 0 {
					t.Errorf("memory consumed = %q, want %s", got, tt.consumed)
				}
			} else if got != "" {
				t.Errorf("unexpected counter status: %+v", st.CounterSets)
			}
		})
	}
}

// Computing the status again for an unchanged pool gives exactly the
// stored one, later: this is what lets the controller skip writes.
func TestStatusIsStableAcrossReconciles(t *testing.T) {
	w := world{slices: []*resourceapi.ResourceSlice{
		counterSlice("c", "node-1", "node-1", 1, 3, "40Gi"),
		partitionSlice("p", "node-1", "node-1", 1, 3, "memory", "10Gi", "mig-0"),
	}, nodes: []string{"node-1"}}
	r := w.reconciler()
	cfg := defaultConfig()
	first, _ := r.validate(pid("node-1"), nil, t0.Add(1234*time.Millisecond), cfg)
	// What the API server gives back: times without sub-seconds, in local time.
	stored := roundTrip(t, first.status)
	second, _ := r.validate(pid("node-1"), &stored, t0.Add(40*time.Second), cfg)
	if !statusEqual(&stored, &second.status) {
		t.Errorf("status changed without a change in the pool:\n%+v\n%+v", stored, second.status)
	}
	if second.requeue <= 0 || second.requeue > cfg.grace {
		t.Errorf("requeue = %v, want the end of the grace period", second.requeue)
	}
}

func roundTrip(t *testing.T, st v1alpha1.DevicePoolStatus) v1alpha1.DevicePoolStatus {
	t.Helper()
	dp := &v1alpha1.DevicePool{Status: st}
	raw, err := json.Marshal(dp)
	if err != nil {
		t.Fatal(err)
	}
	var out v1alpha1.DevicePool
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out.Status
}

func TestHealthTransitionTime(t *testing.T) {
	before := metav1.NewTime(t0.Add(-time.Hour))
	prev := &v1alpha1.DevicePoolStatus{Health: v1alpha1.PoolHealthy, HealthTransitionTime: &before}
	healthy := poolpkg.Report{ID: pid("a"), Health: poolpkg.HealthHealthy}
	invalid := poolpkg.Report{ID: pid("a"), Health: poolpkg.HealthInvalid,
		Problems: []poolpkg.Problem{{Reason: poolpkg.ReasonMissingCounter, Severity: poolpkg.SeverityError, Message: "m"}}}

	same := buildStatus(statusInput{report: healthy, prev: prev, now: t0, maxProblems: 20})
	if !same.HealthTransitionTime.Equal(&before) {
		t.Errorf("unchanged health: transition time %v, want %v", same.HealthTransitionTime, before)
	}
	changed := buildStatus(statusInput{report: invalid, prev: prev, now: t0, maxProblems: 20})
	if !changed.HealthTransitionTime.Time.Equal(t0) {
		t.Errorf("changed health: transition time %v, want now", changed.HealthTransitionTime)
	}
}

func TestProblemsAreCapped(t *testing.T) {
	var problems []poolpkg.Problem
	for i := range 25 {
		problems = append(problems, poolpkg.Problem{Reason: poolpkg.ReasonDuplicateDeviceName, Severity: poolpkg.SeverityError,
			Device: fmt.Sprintf("d%02d", i), Message: "dup"})
	}
	st := buildStatus(statusInput{report: poolpkg.Report{ID: pid("a"), Health: poolpkg.HealthInvalid, Problems: problems}, now: t0, maxProblems: 10})
	if len(st.Problems) != 10 || st.MoreProblems != 15 {
		t.Errorf("%d problems listed, %d more; want 10 and 15", len(st.Problems), st.MoreProblems)
	}
	if st.Problems[0].Device != "d00" {
		t.Errorf("the first problems are kept: %+v", st.Problems[0])
	}
	if c := meta.FindStatusCondition(st.Conditions, ConditionValid); c == nil || c.Message != "dup (and 24 more)" {
		t.Errorf("Valid condition = %+v", c)
	}
}

func TestDecideEvent(t *testing.T) {
	st := func(h v1alpha1.PoolHealth, reason string) *v1alpha1.DevicePoolStatus {
		s := &v1alpha1.DevicePoolStatus{Driver: testDriver, Pool: "p", Health: h, Reason: reason}
		if reason != "" {
			s.Problems = []v1alpha1.PoolProblem{{Reason: reason, Severity: "Error", Message: "what is wrong"}}
		}
		return s
	}
	healthy := st(v1alpha1.PoolHealthy, "")
	settling := st(v1alpha1.PoolIncomplete, "")
	overdue := st(v1alpha1.PoolIncomplete, "IncompletePool")
	invalid := st(v1alpha1.PoolInvalid, "MissingCounter")
	invalid2 := st(v1alpha1.PoolInvalid, "DuplicateDeviceName")
	degraded := st(v1alpha1.PoolDegraded, "CounterOverconsumed")

	tests := []struct {
		name       string
		prev, next *v1alpha1.DevicePoolStatus
		warned     bool
		want       string // "" none, else "Warning/<reason>" or "Normal/<reason>"
	}{
		{"new healthy pool: no Event", nil, healthy, false, ""},
		{"new invalid pool", nil, invalid, false, "Warning/MissingCounter"},
		{"healthy to invalid", healthy, invalid, false, "Warning/MissingCounter"},
		{"still invalid, same reason", invalid, invalid, true, ""},
		{"still invalid, other reason", invalid, invalid2, true, "Warning/DuplicateDeviceName"},
		{"invalid to degraded", invalid, degraded, true, "Warning/CounterOverconsumed"},
		{"incomplete within the grace period", healthy, settling, false, ""},
		{"incomplete past the grace period", settling, overdue, false, "Warning/IncompletePool"},
		{"healthy again after a warning", invalid, healthy, true, "Normal/Healthy"},
		{"healthy again through a settling state", settling, healthy, true, "Normal/Healthy"},
		{"healthy after settling without a warning", settling, healthy, false, ""},
	}
	for _, tt := range tests {
		ev, ok := decideEvent(tt.prev, tt.next, tt.warned)
		got := ""
		if ok {
			kind := "Normal"
			if ev.warning {
				kind = "Warning"
			}
			got = kind + "/" + ev.reason
			if ev.message == "" {
				t.Errorf("%s: empty message", tt.name)
			}
		}
		if got != tt.want {
			t.Errorf("%s: event %q, want %q", tt.name, got, tt.want)
		}
	}
}

// statusEqual is written out by hand for speed; this walks every field of
// a fully populated status, changes it, and demands that statusEqual
// notices, so a field added to DevicePoolStatus cannot be forgotten.
func TestStatusEqualSeesEveryField(t *testing.T) {
	now := metav1.NewTime(t0)
	base := v1alpha1.DevicePoolStatus{
		Driver: "d", Pool: "p", Node: "n", Generation: 1,
		Slices: v1alpha1.SliceCounts{Current: 1, Expected: 1, Stale: 1},
		Devices: v1alpha1.DeviceCounts{Total: 1, Allocated: 1, Tainted: 1, Free: 1, Available: 1, Shared: 1,
			Unavailable: v1alpha1.UnavailableDevices{PoolUnusable: 1, Allocated: 1, Tainted: 1, BlockedByCounters: 1}},
		PartitionSummary: []v1alpha1.PartitionTypeStatus{{Attribute: "a", Type: "t", Total: 1, Allocatable: 1}},
		Fragmentation: &v1alpha1.PoolFragmentation{CounterSets: 1, WholeCounterSetsFree: 1, FreeCapacity: resource.MustParse("1"),
			LargestAvailable: "t", LargestAvailableSize: ptr.To(resource.MustParse("1"))},
		CounterSets: []v1alpha1.CounterSetStatus{{Name: "s", Counters: []v1alpha1.CounterStatus{counter("c", "1", "1")}}},
		Health:      v1alpha1.PoolHealthy, Reason: "r",
		HealthTransitionTime: &now, IncompleteSince: &now,
		Problems:     []v1alpha1.PoolProblem{{Reason: "r", Severity: "Error", Slice: "s", Device: "d", Message: "m"}},
		MoreProblems: 1,
		Conditions:   []metav1.Condition{{Type: "t", Status: "True", ObservedGeneration: 1, LastTransitionTime: now, Reason: "r", Message: "m"}},
	}
	if !statusEqual(&base, base.DeepCopy()) {
		t.Fatal("a copy differs")
	}
	leaves := 0
	var walk func(path []int, field reflect.Value)
	walk = func(path []int, field reflect.Value) {
		switch field.Interface().(type) {
		case metav1.Time, resource.Quantity:
			leaves++
			cp := base.DeepCopy()
			mutate(t, at(reflect.ValueOf(cp).Elem(), path))
			if statusEqual(&base, cp) {
				t.Errorf("statusEqual misses the field at %v (%s)", path, field.Type())
			}
			return
		}
		switch field.Kind() {
		case reflect.Struct:
			for i := range field.NumField() {
				walk(append(slices.Clone(path), i), field.Field(i))
			}
		case reflect.Slice, reflect.Pointer:
			if field.Kind() == reflect.Slice && field.Len() == 0 || field.Kind() == reflect.Pointer && field.IsNil() {
				t.Fatalf("populate the field at %v", path)
			}
			walk(append(slices.Clone(path), -1), elem(field))
		default:
			leaves++
			cp := base.DeepCopy()
			mutate(t, at(reflect.ValueOf(cp).Elem(), path))
			if statusEqual(&base, cp) {
				t.Errorf("statusEqual misses the field at %v (%s)", path, field.Type())
			}
		}
	}
	walk(nil, reflect.ValueOf(base))
	if leaves < 30 {
		t.Errorf("walked only %d fields", leaves)
	}
}

// elem is the first element of a slice or the target of a pointer.
func elem(v reflect.Value) reflect.Value {
	if v.Kind() == reflect.Slice {
		return v.Index(0)
	}
	return v.Elem()
}

func at(v reflect.Value, path []int) reflect.Value {
	for _, i := range path {
		if i < 0 {
			v = elem(v)
		} else {
			v = v.Field(i)
		}
	}
	return v
}

func mutate(t *testing.T, v reflect.Value) {
	switch x := v.Addr().Interface().(type) {
	case *metav1.Time:
		x.Time = x.Add(time.Second)
	case *resource.Quantity:
		x.Add(resource.MustParse("1"))
	default:
		switch v.Kind() {
		case reflect.String:
			v.SetString(v.String() + "x")
		case reflect.Int32, reflect.Int64:
			v.SetInt(v.Int() + 1)
		default:
			t.Fatalf("cannot mutate %s", v.Type())
		}
	}
}
