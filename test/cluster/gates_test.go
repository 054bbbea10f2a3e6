package cluster

import (
	"reflect"
	"testing"
)

const helpSample = `      --feature-gates colonSeparatedMultimapStringString
                A set of key=value pairs that describe feature gates for alpha/experimental features. Options are:
                APIResponseCompression=true|false (BETA - default=true)
                AllAlpha=true|false (ALPHA - default=false)
                DRAConsumableCapacity=true|false (BETA - default=true)
                DRADeviceCompatibilityGroups=true|false (ALPHA - default=false)
                DRADeviceTaints=true|false (GA - default=true)
                kube:DRAFractionalCapacityRange=true|false (BETA - default=false), or DRAFractionalCapacityRange=true|false (BETA - default=true) if --min-compatibility-version>=1.37
                DRAConsumableCapacity=true|false (BETA - default=true)
                SomethingElse=true|false (DEPRECATED - default=false)
      --goaway-chance float
`

func TestParseFeatureGates(t *testing.T) {
	got := ParseFeatureGates([]byte(helpSample))
	want := []FeatureGate{
		{"APIResponseCompression", "BETA", true},
		{"AllAlpha", "ALPHA", false},
		{"DRAConsumableCapacity", "BETA", true},
		{"DRADeviceCompatibilityGroups", "ALPHA", false},
		{"DRADeviceTaints", "GA", true},
		{"DRAFractionalCapacityRange", "BETA", false},
		{"SomethingElse", "DEPRECATED", false},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseFeatureGates =\n%v\nwant\n%v", got, want)
	}
	if got := ParseFeatureGates([]byte("no gates here")); len(got) != 0 {
		t.Errorf("gates from text without any: %v", got)
	}
}

func TestGateFlag(t *testing.T) {
	release := ParseFeatureGates([]byte(helpSample))
	tests := []struct {
		name         string
		defaultsOnly bool
		extra        []string
		want         string
	}{
		{"every DRA gate on, sorted", false, nil, "DRAConsumableCapacity=true,DRADeviceCompatibilityGroups=true,DRADeviceTaints=true,DRAFractionalCapacityRange=true"},
		{"extra gates come last", false, []string{"X=false"}, "DRAConsumableCapacity=true,DRADeviceCompatibilityGroups=true,DRADeviceTaints=true,DRAFractionalCapacityRange=true,X=false"},
		{"defaults only", true, nil, ""},
		{"defaults only with extra", true, []string{"X=true"}, "X=true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := gateFlag(release, tt.defaultsOnly, tt.extra); got != tt.want {
				t.Errorf("gateFlag = %q, want %q", got, tt.want)
			}
		})
	}
}
