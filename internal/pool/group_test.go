package pool

import (
	"reflect"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestGroupSortsPoolsAndSlices(t *testing.T) {
	in := []*resourceapi.ResourceSlice{
		mkSlice("z", "b", 1, 2, devs(dev("d2"))),
		nil,
		mkSlice("x", "a", 1, 1, driver("z.example.com"), devs(dev("d0"))),
		mkSlice("y", "b", 1, 2, devs(dev("d1"))),
		mkSlice("w", "a", 1, 1, devs(dev("d3"))),
	}
	pools := Group(in)
	var ids []string
	for _, p := range pools {
		ids = append(ids, p.ID.String())
	}
	want := []string{"gpu.example.com/a", "gpu.example.com/b", "z.example.com/a"}
	if !slices.Equal(ids, want) {
		t.Fatalf("pools %v, want %v", ids, want)
	}
	b := pools[1]
	if names := sliceNames(b.Slices); !slices.Equal(names, []string{"y", "z"}) {
		t.Errorf("slices %v, want sorted by name", names)
	}
	var devNames []string
	for _, d := range b.Devices {
		devNames = append(devNames, d.Device.Name)
	}
	if !slices.Equal(devNames, []string{"d1", "d2"}) {
		t.Errorf("devices %v, want slice order then device order", devNames)
	}
	if b.Devices[0].Slice != in[3] || b.Devices[0].Device != &in[3].Spec.Devices[0] {
		t.Error("Device does not point into the input slice")
	}
}

func sliceNames(ss []*resourceapi.ResourceSlice) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}

func TestGroupGenerations(t *testing.T) {
	for _, tc := range []struct {
		name          string
		slices        []*resourceapi.ResourceSlice
		gen, expected int64
		current       []string
		stale         []string
		complete      bool
	}{
		{
			name:   "single generation",
			slices: []*resourceapi.ResourceSlice{mkSlice("b", "p", 4, 2), mkSlice("a", "p", 4, 2)},
			gen:    4, expected: 2, current: []string{"a", "b"}, complete: true,
		},
		{
			name: "highest generation wins, older slices are stale",
			slices: []*resourceapi.ResourceSlice{
				mkSlice("c", "p", 2, 1), mkSlice("a", "p", 3, 2), mkSlice("b", "p", 1, 5), mkSlice("d", "p", 2, 1),
			},
			gen: 3, expected: 2, current: []string{"a"}, stale: []string{"b", "c", "d"},
		},
		{
			name:   "generation reset: the highest number still wins",
			slices: []*resourceapi.ResourceSlice{mkSlice("new", "p", 0, 1), mkSlice("old", "p", 7, 1)},
			gen:    7, expected: 1, current: []string{"old"}, stale: []string{"new"}, complete: true,
		},
		{
			name:   "disagreeing resourceSliceCount: the largest counts",
			slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 3), mkSlice("b", "p", 1, 2)},
			gen:    1, expected: 3, current: []string{"a", "b"},
		},
		{
			name:   "missing slice",
			slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 3), mkSlice("b", "p", 1, 3)},
			gen:    1, expected: 3, current: []string{"a", "b"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := onlyPool(t, tc.slices...)
			if p.Generation != tc.gen || p.ExpectedSlices != tc.expected {
				t.Errorf("generation %d expected %d, want %d %d", p.Generation, p.ExpectedSlices, tc.gen, tc.expected)
			}
			if got := sliceNames(p.Slices); !slices.Equal(got, tc.current) {
				t.Errorf("current %v, want %v", got, tc.current)
			}
			if got := sliceNames(p.StaleSlices); !slices.Equal(got, tc.stale) {
				t.Errorf("stale %v, want %v", got, tc.stale)
			}
			if p.Complete() != tc.complete {
				t.Errorf("Complete() = %v, want %v", p.Complete(), tc.complete)
			}
			if p.Allocatable() != (tc.complete && p.Valid()) {
				t.Errorf("Allocatable() = %v", p.Allocatable())
			}
			for _, pr := range p.Problems {
				if pr.Reason == ReasonIncompletePool {
					t.Error("Group must not add IncompletePool")
				}
			}
		})
	}
}

func TestCounterSetsFirstWins(t *testing.T) {
	p := onlyPool(t,
		mkSlice("b", "p", 1, 2, sets(cset("cs", "mem=2"))),
		mkSlice("a", "p", 1, 2, sets(cset("cs", "mem=1"), cset("other", "x=5"))),
	)
	cs := p.CounterSets["cs"]
	if cs == nil || cs.Slice != "a" || !cs.Counters["mem"].Equal(resource.MustParse("1")) {
		t.Fatalf("cs = %+v, want the one of slice a (first by name)", cs)
	}
	if o := p.CounterSets["other"]; o == nil || !o.Counters["x"].Equal(resource.MustParse("5")) {
		t.Fatalf("other = %+v", o)
	}
	if len(p.CounterSets) != 2 {
		t.Errorf("%d counter sets", len(p.CounterSets))
	}
}

func TestBuildMatchesGroup(t *testing.T) {
	all := append(migSlices(),
		mkSlice("x", "q", 1, 1, devs(dev("gpu-0"))),
		mkSlice("old", "p", 0, 1, devs(dev("gone"))),
	)
	for _, p := range Group(all) {
		got := Build(p.ID, all)
		if !reflect.DeepEqual(got, p) {
			t.Errorf("Build(%s) differs from Group:\n%+v\n%+v", p.ID, got, p)
		}
	}
	if Build(ID{drv, "none"}, all) != nil {
		t.Error("Build of an unknown pool is not nil")
	}
}

func TestGroupDoesNotModifyInput(t *testing.T) {
	in := append(migSlices(), mkSlice("old", "p", 0, 1))
	before := make([]*resourceapi.ResourceSlice, len(in))
	for i, s := range in {
		before[i] = s.DeepCopy()
	}
	order := slices.Clone(in)
	Group(in)
	if !slices.Equal(in, order) {
		t.Error("Group reordered its input")
	}
	for i := range in {
		if !reflect.DeepEqual(in[i], before[i]) {
			t.Errorf("slice %s changed", in[i].Name)
		}
	}
}

func TestGroupIsOrderIndependent(t *testing.T) {
	in := append(migSlices(), mkSlice("dup", "p", 1, 2, devs(dev("half-0"))), mkSlice("old", "p", 0, 1))
	want := Group(in)
	rev := slices.Clone(in)
	slices.Reverse(rev)
	if got := Group(rev); !reflect.DeepEqual(got, want) {
		t.Errorf("reversed input gives a different result")
	}
}

func TestGroupEmpty(t *testing.T) {
	if got := Group(nil); len(got) != 0 {
		t.Errorf("Group(nil) = %v", got)
	}
}
