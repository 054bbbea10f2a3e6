package pool

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
)

// limitSet is n counter sets named cs-0 ... each with one counter.
func limitSet(n int) []resourceapi.CounterSet {
	out := make([]resourceapi.CounterSet, n)
	for i := range out {
		out[i] = cset(fmt.Sprint("cs-", i), "c0=1")
	}
	return out
}

// limitCases: every per-slice limit at the limit (fine) and one above it (a
// warning: the API server enforces limits on write and kube-scheduler still
// allocates from old slices above them, so they do not invalidate a pool).
var limitCases = []validationCase{
	{
		name: "128 plain devices", reason: ReasonTooManyDevices,
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, devs(manyDevs("d", 128)...))},
	},
	{
		name: "129 plain devices", reason: ReasonTooManyDevices, produces: true,
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, devs(manyDevs("d", 129)...))},
		want:   []string{"TooManyDevices/Warning/a/"},
		msg:    "slice a has 129 devices, more than the limit of 128",
	},
	{
		name: "64 devices with taints", reason: ReasonTooManyDevices,
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, devs(manyDevs("d", 64, taint(resourceapi.DeviceTaintEffectNoSchedule))...))},
	},
	{
		name: "65 devices, one with a taint", reason: ReasonTooManyDevices, produces: true,
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1,
			devs(manyDevs("d", 64)...), devs(dev("tainted", taint(resourceapi.DeviceTaintEffectNone))))},
		want: []string{"TooManyDevices/Warning/a/"},
		msg:  "more than the limit of 64 that applies because device tainted uses taints",
	},
	{
		name: "65 devices consuming counters", reason: ReasonTooManyDevices, produces: true,
		slices: []*resourceapi.ResourceSlice{
			mkSlice("a", "p", 1, 2, devs(manyDevs("d", 65, consumes("cs", "c=1"))...)),
			mkSlice("b", "p", 1, 2, sets(cset("cs", "c=100"))),
		},
		want: []string{"TooManyDevices/Warning/a/"},
		msg:  "uses counters",
	},
	{
		name: "65 devices, one with a list attribute", reason: ReasonTooManyDevices, produces: true,
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1,
			devs(manyDevs("d", 64, scalarAttrs(2))...), devs(dev("listy", listAttr("pcieRoots", 2))))},
		want: []string{"TooManyDevices/Warning/a/"},
		msg:  "uses list attributes",
	},
	{
		name: "8 counter sets", reason: ReasonTooManyCounterSets,
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, sets(limitSet(8)...))},
	},
	{
		name: "9 counter sets", reason: ReasonTooManyCounterSets, produces: true,
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, sets(limitSet(9)...))},
		want:   []string{"TooManyCounterSets/Warning/a/"},
		msg:    "slice a defines 9 counter sets, more than the limit of 8",
	},
	{
		name: "32 counters in a set and in a consumption", reason: ReasonTooManyCounters,
		slices: []*resourceapi.ResourceSlice{
			mkSlice("a", "p", 1, 2, sets(cset("cs", nCounters(32)...))),
			mkSlice("b", "p", 1, 2, devs(dev("d", consumes("cs", nCounters(32)...)))),
		},
	},
	{
		name: "33 counters in a set", reason: ReasonTooManyCounters, produces: true,
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, sets(cset("cs", nCounters(33)...)))},
		want:   []string{"TooManyCounters/Warning/a/"},
		msg:    "counter set cs in slice a defines 33 counters, more than the limit of 32 per counter set",
	},
	{
		name: "33 counters in one consumption", reason: ReasonTooManyCounters, produces: true,
		slices: []*resourceapi.ResourceSlice{
			mkSlice("a", "p", 1, 2, sets(cset("cs", nCounters(32)...))),
			mkSlice("b", "p", 1, 2, devs(dev("d", consumes("cs", nCounters(33)...)))),
		},
		// c32 is also not in the set.
		want: []string{"MissingCounter/Error/b/d", "TooManyCounters/Warning/b/d"},
	},
	{
		name: "2 consumptions per device", reason: ReasonTooManyConsumptions,
		slices: []*resourceapi.ResourceSlice{
			mkSlice("a", "p", 1, 2, sets(limitSet(2)...)),
			mkSlice("b", "p", 1, 2, devs(dev("d", consumes("cs-0", "c0=1"), consumes("cs-1", "c0=1")))),
		},
	},
	{
		name: "3 consumptions per device", reason: ReasonTooManyConsumptions, produces: true,
		slices: []*resourceapi.ResourceSlice{
			mkSlice("a", "p", 1, 2, sets(limitSet(3)...)),
			mkSlice("b", "p", 1, 2, devs(dev("d", consumes("cs-0", "c0=1"), consumes("cs-1", "c0=1"), consumes("cs-2", "c0=1")))),
		},
		want: []string{"TooManyConsumptions/Warning/b/d"},
		msg:  "device d consumes from 3 counter sets, more than the limit of 2",
	},
	{
		name: "32 attributes and capacities", reason: ReasonTooManyAttributes,
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, devs(dev("d", scalarAttrs(20), capacities(12))))},
	},
	{
		name: "33 attributes and capacities", reason: ReasonTooManyAttributes, produces: true,
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, devs(dev("d", scalarAttrs(20), capacities(13))))},
		want:   []string{"TooManyAttributes/Warning/a/d"},
		msg:    "device d has 33 attributes and capacities, more than the limit of 32",
	},
	{
		name: "48 attribute values", reason: ReasonTooManyAttributes,
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, devs(dev("d", listAttr("l", 40), scalarAttrs(8))))},
	},
	{
		name: "49 attribute values", reason: ReasonTooManyAttributes, produces: true,
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, devs(dev("d", listAttr("l", 41), scalarAttrs(8))))},
		want:   []string{"TooManyAttributes/Warning/a/d"},
		msg:    "device d has 49 attribute values",
	},
	{
		name: "16 taints", reason: ReasonTooManyAttributes,
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, devs(dev("d", taints(16))))},
	},
	{
		name: "17 taints", reason: ReasonTooManyAttributes, produces: true,
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, devs(dev("d", taints(17))))},
		want:   []string{"TooManyAttributes/Warning/a/d"},
		msg:    "device d has 17 taints, more than the limit of 16 (no reason code covers taints; TooManyAttributes is the closest)",
	},
}
