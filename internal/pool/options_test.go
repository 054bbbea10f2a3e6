package pool

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

// compatGroups makes the device's last counter consumption declare the
// given compatibility groups (KEP-5963).
func compatGroups(groups ...string) devOpt {
	return func(d *resourceapi.Device) {
		d.ConsumesCounters[len(d.ConsumesCounters)-1].CompatibilityGroups = groups
	}
}

// optionCases are the rules that depend on Options: strict limits (the
// offline view of kubectl dra validate) and feature gates the cluster has
// off.
var optionCases = []validationCase{
	{
		name: "strict: 129 plain devices are an error", reason: ReasonTooManyDevices, produces: true,
		opts:   Options{StrictLimits: true},
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, devs(manyDevs("d", 129)...))},
		want:   []string{"TooManyDevices/Error/a/"},
		msg:    "slice a has 129 devices, more than the limit of 128",
	},
	{
		name: "strict: 128 plain devices are fine", reason: ReasonTooManyDevices,
		opts:   Options{StrictLimits: true},
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, devs(manyDevs("d", 128)...))},
	},
	{
		name: "strict: 17 taints are an error", reason: ReasonTooManyAttributes, produces: true,
		opts:   Options{StrictLimits: true},
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, devs(dev("d", taints(17))))},
		want:   []string{"TooManyAttributes/Error/a/d"},
	},
	{
		name: "strict: 9 counter sets are an error", reason: ReasonTooManyCounterSets, produces: true,
		opts:   Options{StrictLimits: true},
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, sets(limitSet(9)...))},
		want:   []string{"TooManyCounterSets/Error/a/"},
	},
	{
		name: "compatibility groups with the gate off", reason: ReasonFeatureGateDisabled, produces: true,
		opts: Options{CompatibilityGroupsDisabled: true},
		slices: []*resourceapi.ResourceSlice{
			mkSlice("a", "p", 1, 2, sets(cset("cs", "mem=10"))),
			mkSlice("b", "p", 1, 2, devs(dev("plain", consumes("cs", "mem=1")), dev("grouped", consumes("cs", "mem=1"), compatGroups("x")), dev("grouped-2", consumes("cs", "mem=1"), compatGroups("y")))),
		},
		want: []string{"FeatureGateDisabled/Error/b/grouped"},
		msg:  "DRADeviceCompatibilityGroups feature gate is off: kube-scheduler ignores slice b, so pool gpu.example.com/p can never be complete",
	},
	{
		name: "compatibility groups with the gate on", reason: ReasonFeatureGateDisabled,
		slices: []*resourceapi.ResourceSlice{
			mkSlice("a", "p", 1, 2, sets(cset("cs", "mem=10"))),
			mkSlice("b", "p", 1, 2, devs(dev("grouped", consumes("cs", "mem=1"), compatGroups("x")))),
		},
	},
	{
		name: "gate off, no compatibility groups", reason: ReasonFeatureGateDisabled,
		opts: Options{CompatibilityGroupsDisabled: true},
		slices: []*resourceapi.ResourceSlice{
			mkSlice("a", "p", 1, 2, sets(cset("cs", "mem=10"))),
			mkSlice("b", "p", 1, 2, devs(dev("plain", consumes("cs", "mem=1")))),
		},
	},
}

// TestOptionsDoNotLeak checks that a GroupWith call's options do not stay
// with the pooled builder: Group and Build after a strict call still report
// limits as warnings.
func TestOptionsDoNotLeak(t *testing.T) {
	over := mkSlice("a", "p", 1, 1, devs(manyDevs("d", 129)...))
	strict := GroupWith([]*resourceapi.ResourceSlice{over}, Options{StrictLimits: true})
	if got := reasons(strict[0].Problems); len(got) != 1 || got[0] != "TooManyDevices/Error/a/" {
		t.Fatalf("strict problems %q", got)
	}
	for _, p := range []*Pool{Group([]*resourceapi.ResourceSlice{over})[0], Build(KeyOf(over), []*resourceapi.ResourceSlice{over})} {
		if got := reasons(p.Problems); len(got) != 1 || got[0] != "TooManyDevices/Warning/a/" {
			t.Errorf("live problems %q, want the warning", got)
		}
	}
}
