package central

import (
	"reflect"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/drastack/drastack/api/v1alpha1"
)

// The engine view of a slice shares its devices' data with the informer's
// object (a session costs a list of devices, not a deep copy of the
// cluster) and never writes into it, even through a taint list whose
// backing array has room to grow.
func TestEngineViewSharesAndNeverWrites(t *testing.T) {
	roomy := func(s *resourcev1.ResourceSlice) *resourcev1.ResourceSlice {
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			d.Attributes = map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"model": {StringValue: ptr("a100")}}
			taints := make([]resourcev1.DeviceTaint, len(d.Taints), len(d.Taints)+4)
			copy(taints, d.Taints)
			d.Taints = taints
		}
		return s
	}
	central := roomy(withTaint(slice("c", "gpu", "central", "n1", "c0", "c1")))
	open := roomy(slice("o", "gpu", "open", "n1", "o0"))
	ruled := roomy(withTaint(slice("r", "gpu", "ruled", "n1", "r0")))
	in := []*resourcev1.ResourceSlice{central, open, ruled}
	before := make([]*resourcev1.ResourceSlice, len(in))
	for i, s := range in {
		before[i] = s.DeepCopy()
	}
	p, err := NewPartition(Inputs{Entries: []v1alpha1.CentralDevices{{Driver: "gpu", Pools: []string{"central", "ruled"}}}, Slices: in, Nodes: nil})
	if err != nil {
		t.Fatal(err)
	}
	rules := []resourcev1.DeviceTaintRule{rule("maint", false, sel("gpu", "ruled", ""),
		resourcev1.DeviceTaint{Key: "example.com/maintenance", Effect: resourcev1.DeviceTaintEffectNoExecute})}
	view := EngineView(p, in, rules, func(PoolID) bool { return true })
	// Use the spare room of every view the way a later append would.
	for _, s := range view {
		for i := range s.Spec.Devices {
			s.Spec.Devices[i].Taints = append(s.Spec.Devices[i].Taints, resourcev1.DeviceTaint{Key: "scribble"})
		}
	}
	for i, s := range in {
		if !equality.Semantic.DeepEqual(s, before[i]) {
			t.Errorf("slice %s changed under the view:\n%s", s.Name, diffYAML(before[i], s))
		}
		// The spare room of the input's taint lists holds nothing either.
		for _, d := range s.Spec.Devices {
			if spare := d.Taints[len(d.Taints):cap(d.Taints)]; len(spare) > 0 && spare[0].Key != "" {
				t.Errorf("slice %s device %s: the view wrote into the input's taint array: %v", s.Name, d.Name, spare[0])
			}
		}
	}
	byName := map[string]*resourcev1.ResourceSlice{}
	for _, s := range view {
		byName[s.Name] = s
	}
	for _, s := range in {
		v := byName[s.Name]
		if v == nil {
			t.Fatalf("slice %s missing from the view", s.Name)
		}
		if v == s || &v.Spec.Devices[0] == &s.Spec.Devices[0] {
			t.Errorf("slice %s: the view changes devices of the input's own list", s.Name)
		}
	}
	// Devices outside the partition keep the input's attribute map; the
	// central ones get a new one with the central attribute.
	if reflect.ValueOf(byName["o"].Spec.Devices[0].Attributes).Pointer() != reflect.ValueOf(open.Spec.Devices[0].Attributes).Pointer() {
		t.Error("a device outside the partition got a copy of its attributes")
	}
	if _, ok := byName["c"].Spec.Devices[0].Attributes[CentralAttribute]; !ok {
		t.Error("a central device lacks the central attribute in the view")
	}
	if _, ok := central.Spec.Devices[0].Attributes[CentralAttribute]; ok {
		t.Error("the central attribute reached the input")
	}
	if n := len(byName["r"].Spec.Devices[0].Taints); n != 3 {
		t.Errorf("ruled device has %d taints in the view (operator's, the rule's, the scribble), want 3", n)
	}
}
