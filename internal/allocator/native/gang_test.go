package native

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
)

// gpus builds a node-local pool of n devices named gpu-0..; attrs gives
// the attributes of each device (name/value pairs), cycled when shorter.
func gpus(node string, n int, attrs ...[]any) *resourceapi.ResourceSlice {
	var devs []resourceapi.Device
	for i := 0; i < n; i++ {
		var a []any
		if len(attrs) > 0 {
			a = attrs[i%len(attrs)]
		}
		devs = append(devs, dev(fmt.Sprintf("gpu-%d", i), append([]any{"index", i}, a...)...))
	}
	return nodeSlice(node, devs...)
}

func member(name string, nodes []string, claims ...*resourceapi.ResourceClaim) allocator.GangMember {
	return allocator.GangMember{Name: "default/" + name, Claims: claims, Nodes: nodes}
}

// placement renders a gang result as "member@node:devices" per member.
func placement(res []allocator.MemberResult) []string {
	var out []string
	for _, m := range res {
		var devs []string
		for _, r := range m.Results {
			devs = append(devs, picked(r)...)
		}
		out = append(out, fmt.Sprintf("%s@%s:%s", strings.TrimPrefix(m.Member, "default/"), m.Node, strings.Join(devs, ",")))
	}
	return out
}

// TestGangBacktracksAcrossPods is kubernetes/kubernetes#138765 in small:
// pod a wants any GPU, pod b three of type x, and the node has three GPUs of
// type x and one of type y. Placed one pod at a time, first fit gives a a
// type-x GPU and b cannot be placed; the gang search gives a the type-y GPU.
func TestGangBacktracksAcrossPods(t *testing.T) {
	in := allocator.Inputs{
		Slices: []*resourceapi.ResourceSlice{gpus("n0", 4, []any{"type", "x"}, []any{"type", "x"}, []any{"type", "y"}, []any{"type", "x"})},
		Nodes:  nodes("n0"),
	}
	a := claim("a", req("gpu", 1))
	b := claim("b", req("gpu", 3, `device.attributes["gpu.example.com"].type == "x"`))

	// One pod at a time, as kube-scheduler does.
	s := newTestSession(t, in)
	_, res, err := allocateOne(t, s, a, allocator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	recordResult(t, s, a, res)
	if _, _, err := allocateOne(t, s, b, allocator.Options{}); !errors.Is(err, allocator.ErrUnsatisfiable) {
		t.Fatalf("pod b after pod a, one at a time: got %v, want unsatisfiable", err)
	}

	for _, policy := range []allocator.PlacementPolicy{allocator.PlacementFirstFit, allocator.PlacementPack} {
		s := newTestSession(t, in)
		gang := allocator.Gang{Name: "g", Members: []allocator.GangMember{member("a", nil, a), member("b", nil, b)}}
		got, err := s.AllocateGang(context.Background(), gang, allocator.Options{Policy: policy})
		if err != nil {
			t.Fatalf("%s: %v", policy, err)
		}
		want := []string{"a@n0:gpu=n0/gpu-2", "b@n0:gpu=n0/gpu-0,gpu=n0/gpu-1,gpu=n0/gpu-3"}
		if !slices.Equal(placement(got), want) {
			t.Errorf("%s: got %v, want %v", policy, placement(got), want)
		}
		assertIdle(t, s)
	}
}

// TestGangBinPacking: nodes with 6 and 3 free GPUs, pods of 3 and 6. First
// fit puts the 3 on the first node and has no room for the 6.
func TestGangBinPacking(t *testing.T) {
	in := allocator.Inputs{
		Slices: []*resourceapi.ResourceSlice{gpus("big", 6), gpus("small", 3)},
		Nodes:  nodes("big", "small"),
	}
	gang := allocator.Gang{Name: "g", Members: []allocator.GangMember{
		member("three", nil, claim("three", req("gpu", 3))),
		member("six", nil, claim("six", req("gpu", 6))),
	}}
	s := newTestSession(t, in)
	got, err := s.AllocateGang(context.Background(), gang, allocator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Node != "small" || got[1].Node != "big" {
		t.Errorf("got %v, want three on small and six on big", placement(got))
	}
	if len(got[1].Results[0].Allocation.Devices.Results) != 6 {
		t.Errorf("six got %d devices", len(got[1].Results[0].Allocation.Devices.Results))
	}
}

func rackNodes() allocator.Inputs {
	in := allocator.Inputs{}
	for _, n := range []struct {
		name, rack string
		gpus       int
	}{{"a1", "r1", 2}, {"a2", "r1", 2}, {"b1", "r2", 4}, {"b2", "r2", 4}, {"c1", "r3", 4}, {"c2", "r3", 4}, {"c3", "r3", 4}} {
		in.Slices = append(in.Slices, gpus(n.name, n.gpus))
		in.Nodes = append(in.Nodes, node(n.name, map[string]string{"rack": n.rack}))
	}
	return in
}

func TestGangNodeLabel(t *testing.T) {
	three := func(name string) allocator.GangMember { return member(name, nil, claim(name, req("gpu", 3))) }
	gang := allocator.Gang{
		Name:        "g",
		Members:     []allocator.GangMember{three("p0"), three("p1")},
		Constraints: []allocator.GangConstraint{{NodeLabel: "rack"}},
	}
	// r1 has no node with 3 GPUs; r2 and r3 fit. FirstFit takes the first
	// domain that fits (r2), Pack the one with the least room (r2 too: 8
	// GPUs against r3's 12). With r2 half used, FirstFit still tries it
	// first and fails; Pack prefers r3 only when r2 cannot hold the gang.
	for _, policy := range []allocator.PlacementPolicy{allocator.PlacementFirstFit, allocator.PlacementPack} {
		s := newTestSession(t, rackNodes())
		got, err := s.AllocateGang(context.Background(), gang, allocator.Options{Policy: policy})
		if err != nil {
			t.Fatalf("%s: %v", policy, err)
		}
		if got[0].Node != "b1" || got[1].Node != "b2" {
			t.Errorf("%s: got %v, want p0 on b1 and p1 on b2", policy, placement(got))
		}
	}
	in := rackNodes()
	in.Allocated = []*resourceapi.ResourceClaim{allocatedClaim("held", false, "b1", "gpu-0", "b1", "gpu-1")}
	s := newTestSession(t, in)
	got, err := s.AllocateGang(context.Background(), gang, allocator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Node != "c1" || got[1].Node != "c2" {
		t.Errorf("r2 half used: got %v, want the gang in r3 (c1, c2)", placement(got))
	}
}

func TestGangPackPrefersTheFullerDomain(t *testing.T) {
	in := allocator.Inputs{
		Slices: []*resourceapi.ResourceSlice{gpus("x1", 4), gpus("x2", 4), gpus("y1", 2), gpus("y2", 2)},
		Nodes: []*corev1.Node{
			node("x1", map[string]string{"rack": "big"}), node("x2", map[string]string{"rack": "big"}),
			node("y1", map[string]string{"rack": "small"}), node("y2", map[string]string{"rack": "small"}),
		},
	}
	pods := func(n int64) []allocator.GangMember {
		var out []allocator.GangMember
		for i := 0; i < 2; i++ {
			p := fmt.Sprintf("p%d", i)
			out = append(out, member(p, nil, claim(p, req("gpu", n))))
		}
		return out
	}
	tests := []struct {
		name        string
		gpus        int64
		constraints []allocator.GangConstraint
		want        map[allocator.PlacementPolicy][]string
	}{
		{
			// FirstFit: the first rack and node that fit. Pack: the rack
			// with the least room that fits, and in it the fullest node
			// for each pod (y1 is full after p0).
			name: "two GPUs each in one rack", gpus: 2, constraints: []allocator.GangConstraint{{NodeLabel: "rack"}},
			want: map[allocator.PlacementPolicy][]string{allocator.PlacementFirstFit: {"x1", "x1"}, allocator.PlacementPack: {"y1", "y2"}},
		},
		{
			// Pack: the nodes with the fewest free GPUs, y1 for both.
			name: "one GPU each", gpus: 1,
			want: map[allocator.PlacementPolicy][]string{allocator.PlacementFirstFit: {"x1", "x1"}, allocator.PlacementPack: {"y1", "y1"}},
		},
	}
	for _, tc := range tests {
		for policy, want := range tc.want {
			s := newTestSession(t, in)
			gang := allocator.Gang{Name: "g", Members: pods(tc.gpus), Constraints: tc.constraints}
			got, err := s.AllocateGang(context.Background(), gang, allocator.Options{Policy: policy})
			if err != nil {
				t.Fatalf("%s, %s: %v", tc.name, policy, err)
			}
			if !slices.Equal(nodesOf(got), want) {
				t.Errorf("%s, %s: got %v, want %v", tc.name, policy, placement(got), want)
			}
		}
	}
}

func nodesOf(res []allocator.MemberResult) []string {
	var out []string
	for _, m := range res {
		out = append(out, m.Node)
	}
	return out
}

func TestGangMatchAttribute(t *testing.T) {
	// Cliques: node a has two GPUs of clique A and two of B; node b one of
	// A and three of B. Two pods of two GPUs each on different nodes
	// (each pod's own nodes) must share a clique: only B works.
	in := allocator.Inputs{
		Slices: []*resourceapi.ResourceSlice{
			gpus("a", 4, []any{"clique", "A"}, []any{"clique", "A"}, []any{"clique", "B"}, []any{"clique", "B"}),
			gpus("b", 4, []any{"clique", "A"}, []any{"clique", "B"}, []any{"clique", "B"}, []any{"clique", "B"}),
		},
		Nodes: nodes("a", "b"),
	}
	gang := allocator.Gang{
		Name: "g",
		Members: []allocator.GangMember{
			member("p0", []string{"a"}, claim("p0", req("gpu", 2))),
			member("p1", []string{"b"}, claim("p1", req("gpu", 2))),
		},
		Constraints: []allocator.GangConstraint{{MatchAttribute: drv + "/clique"}},
	}
	s := newTestSession(t, in)
	got, err := s.AllocateGang(context.Background(), gang, allocator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"p0@a:gpu=a/gpu-2,gpu=a/gpu-3", "p1@b:gpu=b/gpu-1,gpu=b/gpu-2"}
	if !slices.Equal(placement(got), want) {
		t.Errorf("got %v, want %v", placement(got), want)
	}
	// An attribute no device has.
	noAttr := gang
	noAttr.Constraints = []allocator.GangConstraint{{MatchAttribute: drv + "/nvlink"}}
	_, err = s.AllocateGang(context.Background(), noAttr, allocator.Options{})
	if !errors.Is(err, allocator.ErrUnsatisfiable) || !strings.Contains(err.Error(), "no free candidate device of the members has the attribute gpu.example.com/nvlink") {
		t.Errorf("missing attribute: got %v", err)
	}
	// Three GPUs each: no clique has six.
	gang.Members[0].Claims[0] = claim("p0", req("gpu", 3))
	gang.Members[1].Claims[0] = claim("p1", req("gpu", 3))
	_, err = s.AllocateGang(context.Background(), gang, allocator.Options{})
	if !errors.Is(err, allocator.ErrUnsatisfiable) {
		t.Fatalf("three each: got %v, want unsatisfiable", err)
	}
	assertIdle(t, s)
}

// TestGangAllOrNothing: a gang that does not fit leaves the session as it
// was, and says which member could not be placed.
func TestGangAllOrNothing(t *testing.T) {
	in := allocator.Inputs{Slices: []*resourceapi.ResourceSlice{gpus("a", 4), gpus("b", 4)}, Nodes: nodes("a", "b")}
	s := newTestSession(t, in)
	four := func(name string) allocator.GangMember { return member(name, nil, claim(name, req("gpu", 4))) }
	gang := allocator.Gang{Name: "ns/train", Members: []allocator.GangMember{four("p0"), four("p1"), four("p2")}}
	_, err := s.AllocateGang(context.Background(), gang, allocator.Options{})
	if !errors.Is(err, allocator.ErrUnsatisfiable) {
		t.Fatalf("got %v, want unsatisfiable", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "gang ns/train") || !strings.Contains(msg, "need 12 devices like request gpu, 8 are free") {
		t.Errorf("message %q should name the gang and the shortage", msg)
	}
	// With a third node the count allows it, but p2 needs 4 on one node.
	in.Slices = append(in.Slices, gpus("c", 2), gpus("d", 2))
	in.Nodes = nodes("a", "b", "c", "d")
	s = newTestSession(t, in)
	_, err = s.AllocateGang(context.Background(), gang, allocator.Options{})
	if !errors.Is(err, allocator.ErrUnsatisfiable) {
		t.Fatalf("with c and d: got %v, want unsatisfiable", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "member default/p2 fits on no node (first: node b: request gpu: 0 matching devices available, 4 needed)") {
		t.Errorf("message %q should name member p2 and why", msg)
	}
	assertIdle(t, s)
	// The devices are all free: one claim for 8... two claims of 4 fit.
	gang.Members = gang.Members[:2]
	if _, err := s.AllocateGang(context.Background(), gang, allocator.Options{}); err != nil {
		t.Fatalf("two members: %v", err)
	}
}

// TestGangSymmetry: many identical members, where only the cuts keep the
// search small: 9 pods of one GPU on 8 nodes of one GPU cannot be placed,
// and the proof must not try the 8! orders.
func TestGangSymmetry(t *testing.T) {
	in := allocator.Inputs{}
	var names []string
	for i := 0; i < 8; i++ {
		n := fmt.Sprintf("n%d", i)
		names = append(names, n)
		in.Slices = append(in.Slices, gpus(n, 1))
	}
	in.Nodes = nodes(names...)
	gang := allocator.Gang{Name: "g"}
	for i := 0; i < 9; i++ {
		p := fmt.Sprintf("p%d", i)
		gang.Members = append(gang.Members, member(p, nil, claim(p, req("gpu", 1))))
	}
	s := newTestSession(t, in)
	_, err := s.AllocateGang(context.Background(), gang, allocator.Options{MaxSteps: 5000})
	if !errors.Is(err, allocator.ErrUnsatisfiable) {
		t.Fatalf("9 pods on 8 GPUs: got %v, want unsatisfiable within 5000 steps", err)
	}
	gang.Members = gang.Members[:8]
	got, err := s.AllocateGang(context.Background(), gang, allocator.Options{MaxSteps: 5000})
	if err != nil {
		t.Fatalf("8 pods: %v", err)
	}
	if !slices.Equal(nodesOf(got), names) {
		t.Errorf("got %v, want one pod per node in order", nodesOf(got))
	}
	// Devices of one kind on one node: 4 pods of 2 GPUs on 2 nodes of 4
	// distinct GPUs each (index attributes differ), one node too few
	// for 5 pods. Exhausting it must not try every pair of GPUs per pod.
	in = allocator.Inputs{Slices: []*resourceapi.ResourceSlice{gpus("a", 4), gpus("b", 4)}, Nodes: nodes("a", "b")}
	gang.Members = nil
	for i := 0; i < 5; i++ {
		p := fmt.Sprintf("p%d", i)
		gang.Members = append(gang.Members, member(p, nil, claim(p, req("gpu", 2))))
	}
	s = newTestSession(t, in)
	if _, err := s.AllocateGang(context.Background(), gang, allocator.Options{MaxSteps: 2000}); !errors.Is(err, allocator.ErrUnsatisfiable) {
		t.Fatalf("5 pods of 2 on 8 GPUs: got %v, want unsatisfiable within 2000 steps", err)
	}
}

// TestGangBinPackingProof: pods of 8, 6, 6, 5, 5, 4, 2 and 1 GPUs on a
// rack whose nodes have 8, 8, 8, 8, 8, 3, 3 and 1 GPUs free: 37 GPUs for
// 39 free, but six pods need a node with more than 3. A gang that the
// count alone does not rule out, from the bench's gang sequence: the proof
// must skip nodes that look alike, or it tries every order of the five
// free nodes for every pod.
func TestGangBinPackingProof(t *testing.T) {
	free := []int{0, 1, 0, 3, 3, 8, 8, 8, 8, 8}
	in := allocator.Inputs{}
	var names []string
	for i, f := range free {
		n := fmt.Sprintf("n%d", i)
		names = append(names, n)
		in.Slices = append(in.Slices, gpus(n, 8))
		for g := f; g < 8; g++ {
			in.Allocated = append(in.Allocated, allocatedClaim(fmt.Sprintf("held-%d-%d", i, g), false, n, fmt.Sprintf("gpu-%d", g)))
		}
	}
	in.Nodes = nodes(names...)
	gang := func(sizes ...int64) allocator.Gang {
		g := allocator.Gang{Name: "g"}
		for i, n := range sizes {
			p := fmt.Sprintf("p%d", i)
			g.Members = append(g.Members, member(p, nil, claim(p, req("gpu", n))))
		}
		return g
	}
	for _, policy := range []allocator.PlacementPolicy{allocator.PlacementFirstFit, allocator.PlacementPack} {
		s := newTestSession(t, in)
		_, err := s.AllocateGang(context.Background(), gang(5, 2, 6, 1, 4, 5, 8, 6), allocator.Options{Policy: policy, MaxSteps: 20_000})
		if !errors.Is(err, allocator.ErrUnsatisfiable) {
			t.Fatalf("%s: got %v, want unsatisfiable within 20,000 steps", policy, err)
		}
		// With the 4 as a 3 it fits: 8, 6+2, 6+1, 5+3 and 5.
		got, err := s.AllocateGang(context.Background(), gang(5, 2, 6, 1, 3, 5, 8, 6), allocator.Options{Policy: policy, MaxSteps: 20_000})
		if err != nil {
			t.Fatalf("%s, with a 3 for the 4: %v", policy, err)
		}
		if len(got) != 8 {
			t.Fatalf("%s: %d members placed", policy, len(got))
		}
		assertIdle(t, s)
	}
}

func TestGangDeterministic(t *testing.T) {
	in := rackNodes()
	in.Allocated = []*resourceapi.ResourceClaim{allocatedClaim("held", false, "c1", "gpu-0")}
	mk := func() allocator.Gang {
		g := allocator.Gang{Name: "g", Constraints: []allocator.GangConstraint{{NodeLabel: "rack"}}}
		for i, n := range []int64{1, 3, 2, 2} {
			p := fmt.Sprintf("p%d", i)
			g.Members = append(g.Members, member(p, nil, claim(p, req("gpu", n))))
		}
		return g
	}
	for _, policy := range []allocator.PlacementPolicy{allocator.PlacementFirstFit, allocator.PlacementPack} {
		var first []string
		for run := 0; run < 5; run++ {
			s := newTestSession(t, in)
			got, err := s.AllocateGang(context.Background(), mk(), allocator.Options{Policy: policy})
			if err != nil {
				t.Fatalf("%s: %v", policy, err)
			}
			if run == 0 {
				first = placement(got)
				continue
			}
			if !reflect.DeepEqual(placement(got), first) {
				t.Fatalf("%s run %d: %v, first run %v", policy, run, placement(got), first)
			}
		}
	}
}

func TestGangMembersAndErrors(t *testing.T) {
	in := allocator.Inputs{Slices: []*resourceapi.ResourceSlice{gpus("a", 2), gpus("late", 2)}, Nodes: nodes("a")}
	s := newTestSession(t, in)
	gang := allocator.Gang{Name: "g", Members: []allocator.GangMember{
		{Name: "default/no-claims"},
		// A node that is not among the inputs is taken by name.
		member("p", []string{"late"}, claim("p", req("gpu", 2))),
	}}
	got, err := s.AllocateGang(context.Background(), gang, allocator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Member != "default/no-claims" || got[0].Node != "" || got[0].Results != nil {
		t.Errorf("member without claims: %+v", got[0])
	}
	if got[1].Node != "late" || got[1].Results[0].Node != "late" {
		t.Errorf("member p: %+v", got[1])
	}
	if _, err := s.AllocateGang(context.Background(), gang, allocator.Options{Node: "a"}); err == nil {
		t.Error("Options.Node: want an error")
	}
	bad := gang
	bad.Constraints = []allocator.GangConstraint{{NodeLabel: "rack", MatchAttribute: drv + "/x"}}
	if _, err := s.AllocateGang(context.Background(), bad, allocator.Options{}); err == nil || !strings.Contains(err.Error(), "constraints[0]") {
		t.Errorf("two fields in a constraint: got %v", err)
	}
	invalid := allocator.Gang{Name: "g", Members: []allocator.GangMember{member("p", nil, claim("p", req("gpu", 1, "device.attributes[")))}}
	_, err = s.AllocateGang(context.Background(), invalid, allocator.Options{})
	var ice *allocator.InvalidClaimError
	if !errors.As(err, &ice) {
		t.Errorf("bad selector: got %v, want an InvalidClaimError", err)
	}
}

// assertIdle checks that no search left a device tentatively taken.
func assertIdle(t *testing.T, s *Session) {
	t.Helper()
	for d, n := range s.tent {
		if n != 0 {
			t.Fatalf("device %s tentatively taken %d times after the call", s.devs[d].id.device, n)
		}
	}
}
