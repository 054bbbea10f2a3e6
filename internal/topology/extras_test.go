package topology

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
)

// TestExtraAttributesOnEveryDevice: extras are copied onto every device
// under their normalized name (the driver's domain dropped, other domains
// kept), and no two devices share the memory of a list value.
func TestExtraAttributesOnEveryDevice(t *testing.T) {
	spec := kepSpec()
	spec.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"tpu.dra.example.com/generation":   {StringValue: ptr.To("v5e")},
		"example.org/rack":                 {IntValue: ptr.To[int64](7)},
		"resource.kubernetes.io/pcieRoots": {StringValues: []string{"pci-0", "pci-1"}},
	}
	res, err := Generate(spec, 1)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	checkSlices(t, spec, res.Slices)
	devices := allDevices(res.Slices)
	for _, d := range devices {
		if v := d.Attributes["generation"].StringValue; v == nil || *v != "v5e" {
			t.Errorf("device %s: generation = %v, want v5e under the unqualified name", d.Name, v)
		}
		if _, ok := d.Attributes["tpu.dra.example.com/generation"]; ok {
			t.Errorf("device %s carries the driver-qualified spelling too", d.Name)
		}
		if v := d.Attributes["example.org/rack"].IntValue; v == nil || *v != 7 {
			t.Errorf("device %s: example.org/rack = %v, want 7", d.Name, v)
		}
		if got := d.Attributes["resource.kubernetes.io/pcieRoots"].StringValues; len(got) != 2 {
			t.Errorf("device %s: pcieRoots = %v", d.Name, got)
		}
	}
	devices[0].Attributes["resource.kubernetes.io/pcieRoots"].StringValues[0] = "changed"
	if got := devices[1].Attributes["resource.kubernetes.io/pcieRoots"].StringValues[0]; got != "pci-0" {
		t.Errorf("changing one device's list changed another's: %q", got)
	}
	if got := spec.Attributes["resource.kubernetes.io/pcieRoots"].StringValues[0]; got != "pci-0" {
		t.Errorf("changing a device's list changed the spec: %q", got)
	}
}

// TestCheckPoolReportsBrokenPools: the final check rejects what
// internal/pool finds, so a bug in this package cannot publish a broken
// pool. Here a device consumes from a counter set that does not exist.
func TestCheckPoolReportsBrokenPools(t *testing.T) {
	res, err := Generate(kepSpec(), 1)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	if err := checkPool(res.Slices); err != nil {
		t.Fatalf("checkPool on a generated pool: %v", err)
	}
	res.Slices[1].Spec.Devices[0].ConsumesCounters[0].CounterSet = "tpu-couner-set"
	err = checkPool(res.Slices)
	if err == nil || !strings.Contains(err.Error(), "MissingCounterSet") {
		t.Fatalf("checkPool error = %v, want MissingCounterSet", err)
	}
	if err := checkPool(res.Slices[:1]); err == nil || !strings.Contains(err.Error(), "incomplete") {
		t.Fatalf("checkPool on one of two slices: %v, want incomplete", err)
	}
	if err := checkPool(nil); err == nil {
		t.Fatal("checkPool accepted no slices")
	}
}

func TestProblemString(t *testing.T) {
	p := Problem{Reason: ReasonMissingHost, Coordinates: "1.0", Message: "no usable host at coordinates 1.0"}
	if got, want := p.String(), "MissingHost: no usable host at coordinates 1.0"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
