package allocator

import (
	"strings"
	"testing"
)

func TestParseFeatures(t *testing.T) {
	tests := []struct {
		spec    string
		base    Features
		want    func(Features) bool
		wantErr string
	}{
		{spec: "", base: Kubernetes137Features(), want: func(f Features) bool { return f == Kubernetes137Features() }},
		{spec: "DRAListTypeAttributes=true", base: Kubernetes137Features(), want: func(f Features) bool { return f == DefaultFeatures() }},
		{spec: "DRADeviceCompatibilityGroups", want: func(f Features) bool { return f == Features{CompatibilityGroups: true} }},
		{spec: " DRAConsumableCapacity = false , DRADeviceTaints=true", base: AllFeatures(), want: func(f Features) bool {
			return !f.ConsumableCapacity && f.DeviceTaints && f.CompatibilityGroups
		}},
		{spec: "all=false,DRAPrioritizedList=true", base: AllFeatures(), want: func(f Features) bool { return f == Features{PrioritizedList: true} }},
		{spec: "all=true", want: func(f Features) bool { return f == AllFeatures() }},
		{spec: "DRAMagic=true", wantErr: `unknown feature "DRAMagic"`},
		{spec: "DRADeviceTaints=maybe", wantErr: "is not true or false"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			got, err := ParseFeatures(tt.base, tt.spec)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !tt.want(got) {
				t.Fatalf("ParseFeatures(%q) = %s, %v", tt.spec, got, err)
			}
		})
	}
}

// TestFeaturesStringRoundTrip: String is in ParseFeatures' syntax.
func TestFeaturesStringRoundTrip(t *testing.T) {
	for _, f := range []Features{{}, DefaultFeatures(), AllFeatures(), {CompatibilityGroups: true, DeviceTaintRules: true}} {
		got, err := ParseFeatures(AllFeatures(), f.String())
		if err != nil || got != f {
			t.Errorf("ParseFeatures(%q) = %s, %v", f.String(), got, err)
		}
	}
}

func TestBindingAndStatusNeedsBothGates(t *testing.T) {
	if (Features{DeviceBindingConditions: true}).BindingAndStatus() || !(Features{DeviceBindingConditions: true, ResourceClaimDeviceStatus: true}).BindingAndStatus() {
		t.Fatal("binding conditions need DRADeviceBindingConditions and DRAResourceClaimDeviceStatus")
	}
}
