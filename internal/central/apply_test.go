package central

import (
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSelects(t *testing.T) {
	tests := []struct {
		name string
		sel  *resourcev1.DeviceTaintSelector
		want bool
	}{
		{"nil selects nothing", nil, false},
		{"empty selects everything", sel("", "", ""), true},
		{"driver", sel("gpu", "", ""), true},
		{"other driver", sel("nic", "", ""), false},
		{"pool of any driver", sel("", "node-1", ""), true},
		{"other pool", sel("gpu", "node-2", ""), false},
		{"device", sel("gpu", "node-1", "gpu-0"), true},
		{"other device", sel("gpu", "node-1", "gpu-1"), false},
	}
	for _, tc := range tests {
		if got := Selects(tc.sel, "gpu", "node-1", "gpu-0"); got != tc.want {
			t.Errorf("%s: Selects = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestApplyTaintRules(t *testing.T) {
	added := metav1.Now()
	noExec := resourcev1.DeviceTaint{Key: "example.com/unhealthy", Value: "ecc", Effect: resourcev1.DeviceTaintEffectNoExecute, TimeAdded: &added}
	none := resourcev1.DeviceTaint{Key: "example.com/info", Effect: resourcev1.DeviceTaintEffectNone}
	unknown := resourcev1.DeviceTaint{Key: "example.com/future", Effect: "PreferNoSchedule"}
	central := Taint()

	// eth0 of slice nic-1 carries this taint in the slice itself.
	nicOwn := resourcev1.DeviceTaint{Key: noExec.Key, Value: noExec.Value, Effect: noExec.Effect}

	type taints map[string][]resourcev1.DeviceTaint // device -> all its taints
	tests := []struct {
		name  string
		rules []resourcev1.DeviceTaintRule
		// want holds, per changed slice, the taints each device ends up
		// with; slices not listed must come back as the same pointer.
		want map[string]taints
	}{
		{name: "no rules: every slice as is"},
		{
			name:  "a driver-wide rule taints every device of the driver, in every pool",
			rules: []resourcev1.DeviceTaintRule{rule("r", true, sel("gpu", "", ""), central)},
			want: map[string]taints{
				"gpu-1": {"gpu-0": {central}, "gpu-1": {central}},
				"gpu-2": {"gpu-0": {central}},
			},
		},
		{
			name:  "a pool rule taints that pool of that driver only",
			rules: []resourcev1.DeviceTaintRule{rule("r", true, sel("gpu", "node-2", ""), central)},
			want:  map[string]taints{"gpu-2": {"gpu-0": {central}}},
		},
		{
			name:  "a pool rule without a driver taints the pool of every driver, but not twice",
			rules: []resourcev1.DeviceTaintRule{rule("r", false, sel("", "node-1", ""), noExec)},
			// nic-1 already carries the taint, so it is not copied.
			want: map[string]taints{"gpu-1": {"gpu-0": {noExec}, "gpu-1": {noExec}}},
		},
		{
			name:  "a device rule taints one device; timeAdded is kept",
			rules: []resourcev1.DeviceTaintRule{rule("r", false, sel("gpu", "node-1", "gpu-1"), noExec)},
			want:  map[string]taints{"gpu-1": {"gpu-0": nil, "gpu-1": {noExec}}},
		},
		{
			name: "None, unknown effects and nil selectors change nothing",
			rules: []resourcev1.DeviceTaintRule{
				rule("a", false, sel("gpu", "", ""), none),
				rule("b", false, sel("gpu", "", ""), unknown),
				rule("c", false, nil, noExec),
			},
		},
		{
			name: "several rules add in rule order, a taint the slice already has is not doubled",
			rules: []resourcev1.DeviceTaintRule{
				rule("a", false, sel("nic", "", ""), noExec),
				rule("b", true, sel("nic", "node-1", ""), central),
			},
			want: map[string]taints{"nic-1": {"eth0": {nicOwn, central}}},
		},
		{
			name:  "counter slices have no devices and stay as they are",
			rules: []resourcev1.DeviceTaintRule{rule("r", true, sel("tpu", "", ""), central)},
			want:  map[string]taints{"tpu-devices": {"2x2-0": {central}}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nic := slice("nic-1", "nic", "node-1", "node-1", "eth0")
			nic.Spec.Devices[0].Taints = []resourcev1.DeviceTaint{nicOwn}
			counters := slice("tpu-counters", "tpu", "tpu-a", "")
			counters.Spec.SharedCounters = []resourcev1.CounterSet{{Name: "chips"}}
			in := []*resourcev1.ResourceSlice{
				slice("gpu-1", "gpu", "node-1", "node-1", "gpu-0", "gpu-1"),
				slice("gpu-2", "gpu", "node-2", "node-2", "gpu-0"),
				nic,
				counters,
				slice("tpu-devices", "tpu", "tpu-a", "", "2x2-0"),
				nil,
			}
			before := make([]*resourcev1.ResourceSlice, len(in))
			for i := range in {
				before[i] = in[i].DeepCopy()
			}
			out := ApplyTaintRules(in, tc.rules)
			if diffYAML(before, in) != "" {
				t.Fatal("ApplyTaintRules modified its input slices")
			}
			if len(out) != len(in) {
				t.Fatalf("%d slices out, %d in", len(out), len(in))
			}
			for i, s := range out {
				if in[i] == nil {
					if s != nil {
						t.Errorf("slice %d: nil became %v", i, s)
					}
					continue
				}
				want, changed := tc.want[s.Name]
				if !changed {
					if s != in[i] {
						t.Errorf("slice %s: untouched but copied", s.Name)
					}
					continue
				}
				if s == in[i] {
					t.Errorf("slice %s: changed without a copy", s.Name)
				}
				for _, d := range s.Spec.Devices {
					if diff := diffYAML(want[d.Name], d.Taints); len(want[d.Name])+len(d.Taints) > 0 && diff != "" {
						t.Errorf("slice %s device %s:\n%s", s.Name, d.Name, diff)
					}
				}
			}
		})
	}
}
