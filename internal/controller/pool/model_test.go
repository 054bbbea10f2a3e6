package pool

import (
	"cmp"
	"slices"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	poolpkg "github.com/drastack/drastack/internal/pool"
)

func sortedIDs(ids []poolpkg.ID) []poolpkg.ID {
	out := slices.Clone(ids)
	slices.SortFunc(out, func(a, b poolpkg.ID) int {
		return cmp.Or(cmp.Compare(a.Driver, b.Driver), cmp.Compare(a.Pool, b.Pool))
	})
	return out
}

// Every event touches exactly the pools it changed: that is what keeps
// one event from causing a rescan.
func TestModelEventsTouchOnlyTheirPools(t *testing.T) {
	m := newModel()
	a1 := gpuSlice("a-1", "a", "node-a", 1, 1, "gpu-0")
	b1 := gpuSlice("b-1", "b", "node-b", 1, 1, "gpu-0")

	steps := []struct {
		name string
		do   func() []poolpkg.ID
		want []poolpkg.ID
	}{
		{"add a slice of pool a", func() []poolpkg.ID { return m.upsertSlice(nil, a1) }, []poolpkg.ID{pid("a")}},
		{"add a slice of pool b", func() []poolpkg.ID { return m.upsertSlice(nil, b1) }, []poolpkg.ID{pid("b")}},
		{"update within pool a", func() []poolpkg.ID {
			a1v2 := a1.DeepCopy()
			a1v2.ResourceVersion = "2"
			return m.upsertSlice(a1, a1v2)
		}, []poolpkg.ID{pid("a")}},
		{"a slice moves from pool b to pool c", func() []poolpkg.ID {
			moved := b1.DeepCopy()
			moved.Spec.Pool.Name = "c"
			return m.upsertSlice(b1, moved)
		}, []poolpkg.ID{pid("b"), pid("c")}},
		{"claim allocated from a and c", func() []poolpkg.ID {
			return m.upsertClaim(nil, claim("x", alloc{"a", "gpu-0", false}, alloc{"c", "gpu-0", false}))
		}, []poolpkg.ID{pid("a"), pid("c")}},
		{"claim status update without allocation change", func() []poolpkg.ID {
			old := claim("x", alloc{"a", "gpu-0", false}, alloc{"c", "gpu-0", false})
			next := old.DeepCopy()
			next.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "u"}}
			return m.upsertClaim(old, next)
		}, nil},
		{"claim reallocated from a to d", func() []poolpkg.ID {
			return m.upsertClaim(claim("x", alloc{"a", "gpu-0", false}, alloc{"c", "gpu-0", false}), claim("x", alloc{"d", "gpu-0", false}))
		}, []poolpkg.ID{pid("a"), pid("c"), pid("d")}},
		{"claim deleted", func() []poolpkg.ID { return m.deleteClaim(claim("x", alloc{"d", "gpu-0", false})) }, []poolpkg.ID{pid("d")}},
		{"node of pool a deleted", func() []poolpkg.ID { return m.setNode("node-a", false) }, []poolpkg.ID{pid("a")}},
		{"node without pools added", func() []poolpkg.ID { return m.setNode("node-z", true) }, nil},
		{"slice of pool a deleted", func() []poolpkg.ID { return m.deleteSlice(a1) }, []poolpkg.ID{pid("a")}},
	}
	for _, s := range steps {
		got := sortedIDs(s.do())
		if !slices.Equal(got, s.want) {
			t.Errorf("%s: touched %v, want %v", s.name, got, s.want)
		}
	}
	if got := sortedIDs(m.ids()); !slices.Equal(got, []poolpkg.ID{pid("c")}) {
		t.Errorf("pools left: %v, want only c", got)
	}
	if len(m.onNode["node-a"]) != 0 {
		t.Errorf("node index still lists pools on node-a: %v", m.onNode["node-a"])
	}
	if m.ledger.Claims() != 0 {
		t.Errorf("ledger still records %d claims", m.ledger.Claims())
	}
}

func TestModelUpsertReplacesByName(t *testing.T) {
	m := newModel()
	v1 := gpuSlice("a-1", "a", "n", 1, 1, "gpu-0")
	v2 := gpuSlice("a-1", "a", "n", 2, 1, "gpu-0", "gpu-1")
	m.upsertSlice(nil, v1)
	m.upsertSlice(v1, v2)
	got := m.slicesOf(pid("a"))
	if len(got) != 1 || got[0] != v2 {
		t.Fatalf("slices of a = %v, want only the new version", got)
	}
	if n := m.onNode["n"][pid("a")]; n != 1 {
		t.Errorf("node count = %d, want 1", n)
	}
}

func TestSameAllocation(t *testing.T) {
	base := claim("x", alloc{"a", "gpu-0", false})
	tests := []struct {
		name string
		b    *resourceapi.ResourceClaim
		want bool
	}{
		{"identical", claim("x", alloc{"a", "gpu-0", false}), true},
		{"other device", claim("x", alloc{"a", "gpu-1", false}), false},
		{"admin access", claim("x", alloc{"a", "gpu-0", true}), false},
		{"deallocated", claim("x"), false},
		{"other claim", claim("y", alloc{"a", "gpu-0", false}), false},
	}
	for _, tt := range tests {
		if got := sameAllocation(base, tt.b); got != tt.want {
			t.Errorf("%s: sameAllocation = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestObserveIncomplete(t *testing.T) {
	m := newModel()
	incomplete := &poolpkg.Pool{ID: pid("a"), ExpectedSlices: 2}
	complete := &poolpkg.Pool{ID: pid("a")}

	if got := m.observeIncomplete(incomplete, t0, time.Time{}); !got.Equal(t0) {
		t.Errorf("first sight: since = %v, want now", got)
	}
	if got := m.observeIncomplete(incomplete, t0.Add(time.Minute), time.Time{}); !got.Equal(t0) {
		t.Errorf("later: since = %v, want the first sight", got)
	}
	earlier := t0.Add(-time.Hour)
	if got := m.observeIncomplete(incomplete, t0.Add(time.Minute), earlier); !got.Equal(earlier) {
		t.Errorf("a recorded earlier time (status after a restart) wins: since = %v", got)
	}
	if got := m.observeIncomplete(complete, t0, time.Time{}); !got.IsZero() {
		t.Errorf("complete: since = %v, want zero", got)
	}
	if got := m.observeIncomplete(incomplete, t0.Add(2*time.Minute), time.Time{}); !got.Equal(t0.Add(2 * time.Minute)) {
		t.Errorf("incomplete again starts over: since = %v", got)
	}
}
