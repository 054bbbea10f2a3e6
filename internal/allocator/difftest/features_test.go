package difftest

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/native"
	"github.com/drastack/drastack/internal/allocator/upstream"
)

// TestSelectorFeatures: both engines compile selectors with the same CEL
// features, so a selector that uses list attributes (includes()) selects
// the same devices in both.
func TestSelectorFeatures(t *testing.T) {
	if got, want := upstream.SelectorFeatures(upstream.StructuredFeatures(allocator.DefaultFeatures())), native.SelectorFeatures; got != want {
		t.Fatalf("upstream compiles selectors with %+v, native with %+v", got, want)
	}
	claim := regClaim([]resourceapi.DeviceRequest{regRequest("r0", 1)})
	claim.Spec.Devices.Requests[0].Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
		Expression: `device.attributes["resource.kubernetes.io"].pcieRoot.includes("p1")`,
	}}}
	c := &Case{
		Inputs: allocator.Inputs{
			Nodes:   []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}}},
			Classes: []*resourceapi.DeviceClass{{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}}},
			Slices:  []*resourceapi.ResourceSlice{regSlice("s", "node-0", 1, rootDev("a", "p0"), rootDev("b", "p0", "p1"))},
		},
		Claims: []*resourceapi.ResourceClaim{claim},
		Node:   []string{""},
	}
	for _, e := range engines() {
		out, err := Run(t.Context(), e, c)
		if err != nil {
			t.Fatal(err)
		}
		if out[0].Verdict != Allocated {
			t.Errorf("%s: %s (%v), want allocated", e.Name(), out[0].Verdict, out[0].Err)
			continue
		}
		if got := out[0].Result.Allocation.Devices.Results[0].Device; got != "b" {
			t.Errorf("%s: allocated %s, want b (the only device whose roots include p1)", e.Name(), got)
		}
	}
}
