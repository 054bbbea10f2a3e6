package central_test

// An external test package: it drives the native engine, which imports
// package central itself.

import (
	"context"
	"errors"
	"testing"

	dracel "k8s.io/dynamic-resource-allocation/cel"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/native"
	. "github.com/drastack/drastack/internal/central"
)

func nodeSlice(name, driver, pool, node string, devices ...string) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceSliceSpec{
			Driver: driver, NodeName: &node,
			Pool: resourcev1.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: 1},
		},
	}
	for _, d := range devices {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: d})
	}
	return s
}

func tainted(s *resourcev1.ResourceSlice) *resourcev1.ResourceSlice {
	for i := range s.Spec.Devices {
		s.Spec.Devices[i].Taints = append(s.Spec.Devices[i].Taints, Taint())
	}
	return s
}

func namedNode(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// TestEngineViewSeparatesTheAllocators runs the native engine on the
// engine view: whatever the order of pools, an operator claim only ever
// gets devices of joined central pools whose taint is in place, and a
// kube-scheduler claim only devices kube-scheduler could take.
func TestEngineViewSeparatesTheAllocators(t *testing.T) {
	entries := []v1alpha1.CentralDevices{{Driver: "gpu", Pools: []string{"central", "untainted", "joining"}}}
	slices := []*resourcev1.ResourceSlice{
		nodeSlice("gpu-open", "gpu", "open", "n1", "o0", "o1"),
		tainted(nodeSlice("gpu-central", "gpu", "central", "n1", "c0", "c1")),
		// Central and tainted, but not joined yet: kube-scheduler may
		// still write an allocation it decided before the taint.
		tainted(nodeSlice("gpu-joining", "gpu", "joining", "n1", "j0", "j1")),
		// Central, but the rule is not in place yet: nobody may use it
		// as central, and kube-scheduler still can.
		nodeSlice("gpu-untainted", "gpu", "untainted", "n1", "u0"),
		// A DeviceTaintRule of someone else taints this pool.
		nodeSlice("gpu-foreign", "gpu", "foreign", "n1", "f0"),
	}
	driver, pool := "gpu", "foreign"
	foreign := resourcev1.DeviceTaintRule{
		ObjectMeta: metav1.ObjectMeta{Name: "maintenance"},
		Spec: resourcev1.DeviceTaintRuleSpec{
			DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: &driver, Pool: &pool},
			Taint:          resourcev1.DeviceTaint{Key: "example.com/maintenance", Effect: resourcev1.DeviceTaintEffectNoSchedule},
		},
	}
	p, err := NewPartition(Inputs{Entries: entries, Slices: slices, Nodes: []*corev1.Node{namedNode("n1")}})
	if err != nil {
		t.Fatal(err)
	}
	joined := func(id PoolID) bool { return id.Pool != "joining" }
	view := EngineView(p, slices, []resourcev1.DeviceTaintRule{foreign}, joined)
	if len(slices[0].Spec.Devices[0].Taints) != 0 {
		t.Fatal("EngineView modified its input")
	}
	class := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu"},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "gpu"`}}}}}
	claimFor := func(name string, count int64) *resourcev1.ResourceClaim {
		return &resourcev1.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
			Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
				Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: count},
			}}}},
		}
	}
	tests := []struct {
		name  string
		claim *resourcev1.ResourceClaim
		want  map[string]bool // devices it may get
		count int
	}{
		{"operator claim: only the central pool", ForOperator(claimFor("op", 2)), map[string]bool{"c0": true, "c1": true}, 2},
		{"operator claim: no more than the joined central pool holds", ForOperator(claimFor("op3", 3)), nil, 0},
		{"scheduler claim: open and untainted pools only", ForScheduler(claimFor("ks", 3)), map[string]bool{"o0": true, "o1": true, "u0": true}, 3},
		{"scheduler claim: never central or foreign-tainted devices", ForScheduler(claimFor("ks4", 4)), nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sess, err := native.New().NewSession(context.Background(), allocator.Inputs{
				Slices: view, Classes: []*resourcev1.DeviceClass{class}, Nodes: []*corev1.Node{namedNode("n1")},
			})
			if err != nil {
				t.Fatal(err)
			}
			res, err := sess.Allocate(context.Background(), []*resourcev1.ResourceClaim{tt.claim}, allocator.Options{Node: "n1"})
			if tt.want == nil {
				if !errors.Is(err, allocator.ErrUnsatisfiable) {
					t.Fatalf("Allocate = %v, want unsatisfiable", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := res[0].Allocation.Devices.Results
			if len(got) != tt.count {
				t.Fatalf("got %d devices, want %d", len(got), tt.count)
			}
			for _, r := range got {
				if !tt.want[r.Device] {
					t.Errorf("got device %s/%s, not one of %v", r.Pool, r.Device, tt.want)
				}
			}
		})
	}
}

// A central class matches, in the operator's view, exactly the central
// devices of the entries that list it; on the real slices (what
// kube-scheduler sees) it matches nothing, without an error.
func TestCentralClassSelector(t *testing.T) {
	entries := []v1alpha1.CentralDevices{
		{Driver: "gpu.example.com", Pools: []string{"n1"}, Classes: []string{"gpu-topology"}},
		{Driver: "gpu.example.com", Pools: []string{"n2"}, Classes: []string{"gpu-other"}},
	}
	s1 := taintedSlice("gpu.example.com", "n1")
	s2 := taintedSlice("gpu.example.com", "n2")
	s3 := &resourcev1.ResourceSlice{Spec: resourcev1.ResourceSliceSpec{Driver: "gpu.example.com", Pool: resourcev1.ResourcePool{Name: "n3", Generation: 1, ResourceSliceCount: 1},
		Devices: []resourcev1.Device{{Name: "d0"}}}}
	raw := []*resourcev1.ResourceSlice{s1, s2, s3}
	p, err := NewPartition(Inputs{Entries: entries, Slices: raw})
	if err != nil {
		t.Fatal(err)
	}
	view := EngineView(p, raw, nil, func(PoolID) bool { return true })
	compiled := dracel.GetCompiler(dracel.Features{}).CompileCELExpression(ClassSelector("gpu-topology"), dracel.Options{})
	if compiled.Error != nil {
		t.Fatal(compiled.Error)
	}
	matches := func(s *resourcev1.ResourceSlice) bool {
		d := s.Spec.Devices[0]
		ok, _, err := compiled.DeviceMatches(context.Background(), dracel.Device{Driver: s.Spec.Driver, Attributes: d.Attributes, Capacity: d.Capacity})
		if err != nil {
			t.Fatalf("selector error on %s: %v", s.Spec.Pool.Name, err)
		}
		return ok
	}
	for i, want := range []bool{true, false, false} {
		if got := matches(view[i]); got != want {
			t.Errorf("operator view, pool %s: match %v, want %v", view[i].Spec.Pool.Name, got, want)
		}
		if matches(raw[i]) {
			t.Errorf("real slice of pool %s matches the central class: kube-scheduler could allocate it", raw[i].Spec.Pool.Name)
		}
	}
	if _, ok := s1.Spec.Devices[0].Attributes[CentralAttribute]; ok {
		t.Error("the view modified its input")
	}
}

func taintedSlice(driver, pool string) *resourcev1.ResourceSlice {
	return &resourcev1.ResourceSlice{Spec: resourcev1.ResourceSliceSpec{Driver: driver, Pool: resourcev1.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: 1},
		Devices: []resourcev1.Device{{Name: "d0", Taints: []resourcev1.DeviceTaint{Taint()}}}}}
}

// Scoped gives each request only the devices of entries that admit its
// class, the claim's namespace and, for the Immediate label, immediate
// allocation.
func TestScoped(t *testing.T) {
	entries := []v1alpha1.CentralDevices{
		{Driver: "gpu.example.com", Pools: []string{"n1"}, Classes: []string{"gpu.central"}, Namespaces: []string{"team-a"}},
		{Driver: "gpu.example.com", Pools: []string{"n2"}, Classes: []string{"gpu.central"}, AllowImmediate: true},
		{Driver: "gpu.example.com", Pools: []string{"n3"}, Classes: []string{"other"}},
	}
	raw := []*resourcev1.ResourceSlice{taintedSlice("gpu.example.com", "n1"), taintedSlice("gpu.example.com", "n2"), taintedSlice("gpu.example.com", "n3")}
	p, err := NewPartition(Inputs{Entries: entries, Slices: raw})
	if err != nil {
		t.Fatal(err)
	}
	view := EngineView(p, raw, nil, func(PoolID) bool { return true })
	claim := func(ns, class string) *resourcev1.ResourceClaim {
		return &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c"},
			Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
				Name: "r", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class}}}}}}
	}
	for _, tc := range []struct {
		name      string
		ns, class string
		immediate bool
		want      []bool // may use n1, n2, n3
		denied    bool
	}{
		{"team-a, central class: both entries of the class", "team-a", "gpu.central", false, []bool{true, true, false}, false},
		{"team-b: not the namespaced entry", "team-b", "gpu.central", false, []bool{false, true, false}, false},
		{"the Immediate label: only the entry that allows it", "team-a", "gpu.central", true, []bool{false, true, false}, false},
		{"a class no entry lists: any entry that admits the namespace", "team-b", "unlisted", false, []bool{false, true, true}, false},
		{"the Immediate label and a class only a non-immediate entry lists", "team-a", "other", true, []bool{false, false, false}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scoped, denied := Scoped(claim(tc.ns, tc.class), entries, tc.immediate)
			if (len(denied) > 0) != tc.denied {
				t.Errorf("denied %v, want denied %v", denied, tc.denied)
			}
			sels := scoped.Spec.Devices.Requests[0].Exactly.Selectors
			compiled := dracel.GetCompiler(dracel.Features{}).CompileCELExpression(sels[len(sels)-1].CEL.Expression, dracel.Options{})
			if compiled.Error != nil {
				t.Fatalf("%s: %v", sels[len(sels)-1].CEL.Expression, compiled.Error)
			}
			for i, s := range view {
				d := s.Spec.Devices[0]
				ok, _, err := compiled.DeviceMatches(context.Background(), dracel.Device{Driver: s.Spec.Driver, Attributes: d.Attributes})
				if err != nil {
					t.Fatal(err)
				}
				if ok != tc.want[i] {
					t.Errorf("pool %s: usable %v, want %v", s.Spec.Pool.Name, ok, tc.want[i])
				}
			}
		})
	}
}

// One engine keeps serving the operator across a join: the native engine
// keeps selector results per slice version, and a pool's joining adds the
// central attribute to its devices while the slice stays at the same
// resourceVersion. The engine view gives its copies a version of their
// own, so a session after the join does not reuse the results of one
// before it (found by the allocation simulation: a pool that joined stayed
// unusable until its slice changed).
func TestEngineViewVersionsTheCentralAttribute(t *testing.T) {
	entries := []v1alpha1.CentralDevices{{Driver: "gpu", Pools: []string{"p"}, Classes: []string{"gpu-central"}}}
	slice := tainted(nodeSlice("gpu-p", "gpu", "p", "n1", "d0"))
	slice.UID, slice.ResourceVersion = "uid-slice", "7"
	nodes := []*corev1.Node{namedNode("n1")}
	p, err := NewPartition(Inputs{Entries: entries, Slices: []*resourcev1.ResourceSlice{slice}, Nodes: nodes})
	if err != nil {
		t.Fatal(err)
	}
	class := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu-central"},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: ClassSelector("gpu-central")}}}}}
	claim := &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "uid-c", ResourceVersion: "9"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu-central", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1},
		}}}},
	}
	scoped, _ := Scoped(claim, entries, false)
	engine := native.New()
	allocate := func(joined bool) error {
		view := EngineView(p, []*resourcev1.ResourceSlice{slice}, nil, func(PoolID) bool { return joined })
		sess, err := engine.NewSession(context.Background(), allocator.Inputs{Slices: view, Classes: []*resourcev1.DeviceClass{class}, Nodes: nodes})
		if err != nil {
			t.Fatal(err)
		}
		_, err = sess.Allocate(context.Background(), []*resourcev1.ResourceClaim{scoped}, allocator.Options{Node: "n1"})
		return err
	}
	if err := allocate(false); !errors.Is(err, allocator.ErrUnsatisfiable) {
		t.Fatalf("before the join: Allocate = %v, want unsatisfiable", err)
	}
	if err := allocate(true); err != nil {
		t.Fatalf("after the join, with the same engine: Allocate = %v, want the device", err)
	}
	if slice.ResourceVersion != "7" {
		t.Fatalf("EngineView modified its input's resourceVersion: %s", slice.ResourceVersion)
	}
}
