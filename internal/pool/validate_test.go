package pool

import (
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
)

// validationCase is one row of the rule table: the slices of one pool and
// every problem Group must report for them ("Reason/Severity/slice/device"),
// in CompareProblems order. reason names the rule the row is about; rows
// with produces=false are the valid counterpart of that rule.
type validationCase struct {
	name     string
	reason   Reason
	produces bool
	slices   []*resourceapi.ResourceSlice
	want     []string
	// msg, when set, must appear in the first problem's message.
	msg string
	// opts are given to GroupWith (zero: Group's live view).
	opts Options
}

var validationCases = []validationCase{
	// DuplicateDeviceName
	{
		name: "same device twice in one slice", reason: ReasonDuplicateDeviceName, produces: true,
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, devs(dev("gpu-0"), dev("gpu-0")))},
		want:   []string{"DuplicateDeviceName/Error/a/gpu-0"},
		msg:    "device gpu-0 is published twice in slice a",
	},
	{
		name: "same device in two slices", reason: ReasonDuplicateDeviceName, produces: true,
		slices: []*resourceapi.ResourceSlice{
			mkSlice("a", "p", 1, 2, devs(dev("gpu-0"))),
			mkSlice("b", "p", 1, 2, devs(dev("gpu-0"))),
		},
		want: []string{"DuplicateDeviceName/Error/b/gpu-0"},
		msg:  "device gpu-0 is published in slice a and again in slice b",
	},
	{
		name: "distinct device names across slices", reason: ReasonDuplicateDeviceName,
		slices: []*resourceapi.ResourceSlice{
			mkSlice("a", "p", 1, 2, devs(dev("gpu-0"))),
			mkSlice("b", "p", 1, 2, devs(dev("gpu-1"))),
		},
	},
	{
		name: "a stale slice may repeat a current device name", reason: ReasonDuplicateDeviceName,
		slices: []*resourceapi.ResourceSlice{
			mkSlice("a", "p", 2, 1, devs(dev("gpu-0"))),
			mkSlice("old", "p", 1, 1, devs(dev("gpu-0"))),
		},
		want: []string{"StaleSlices/Warning//"},
	},

	// DuplicateCounterSet
	{
		name: "counter set defined in two slices", reason: ReasonDuplicateCounterSet, produces: true,
		slices: []*resourceapi.ResourceSlice{
			mkSlice("a", "p", 1, 2, sets(cset("cs", "mem=1"))),
			mkSlice("b", "p", 1, 2, sets(cset("cs", "mem=2"))),
		},
		want: []string{"DuplicateCounterSet/Error/b/"},
		msg:  "counter set cs is defined in slice a and again in slice b",
	},
	{
		name: "counter set defined twice in one slice", reason: ReasonDuplicateCounterSet, produces: true,
		slices: []*resourceapi.ResourceSlice{
			mkSlice("a", "p", 1, 1, sets(cset("cs", "mem=1"), cset("cs", "mem=2"))),
		},
		want: []string{"DuplicateCounterSet/Error/a/"},
	},
	{
		name: "distinct counter sets", reason: ReasonDuplicateCounterSet,
		slices: []*resourceapi.ResourceSlice{
			mkSlice("a", "p", 1, 2, sets(cset("cs-0", "mem=1"))),
			mkSlice("b", "p", 1, 2, sets(cset("cs-1", "mem=2"))),
		},
	},

	// MissingCounterSet
	{
		name: "device consumes from an undefined counter set", reason: ReasonMissingCounterSet, produces: true,
		slices: []*resourceapi.ResourceSlice{
			mkSlice("counters", "p", 1, 2, sets(cset("gpu-0-cs", "mem=4"))),
			mkSlice("devices", "p", 1, 2, devs(dev("gpu-0", consumes("gpu-1-cs", "mem=1")))),
		},
		want: []string{"MissingCounterSet/Error/devices/gpu-0"},
		msg:  "device gpu-0 consumes counters from counter set gpu-1-cs that the pool does not define",
	},
	{
		name: "missing counter set while the pool is incomplete is a warning", reason: ReasonMissingCounterSet, produces: true,
		slices: []*resourceapi.ResourceSlice{
			mkSlice("devices", "p", 1, 2, devs(dev("gpu-0", consumes("gpu-0-cs", "mem=1")))),
		},
		want: []string{"MissingCounterSet/Warning/devices/gpu-0"},
		msg:  "the pool is incomplete",
	},
	{
		name: "device consumes from a counter set in another slice", reason: ReasonMissingCounterSet,
		slices: []*resourceapi.ResourceSlice{
			mkSlice("counters", "p", 1, 2, sets(cset("gpu-0-cs", "mem=4"))),
			mkSlice("devices", "p", 1, 2, devs(dev("gpu-0", consumes("gpu-0-cs", "mem=1")))),
		},
	},

	// MissingCounter
	{
		name: "device consumes a counter its set does not define", reason: ReasonMissingCounter, produces: true,
		slices: []*resourceapi.ResourceSlice{
			mkSlice("counters", "p", 1, 2, sets(cset("gpu-0-counter-set", "memorySlice0=1", "memory=40Gi"))),
			mkSlice("devices", "p", 1, 2, devs(dev("gpu-0-mig-1g-0", consumes("gpu-0-counter-set", "memorySlice9=1", "memory=5Gi")))),
		},
		want: []string{"MissingCounter/Error/devices/gpu-0-mig-1g-0"},
		msg:  "device gpu-0-mig-1g-0 consumes counter memorySlice9 that counter set gpu-0-counter-set does not define",
	},
	{
		name: "device consumes only defined counters", reason: ReasonMissingCounter,
		slices: []*resourceapi.ResourceSlice{
			mkSlice("counters", "p", 1, 2, sets(cset("gpu-0-counter-set", "memorySlice0=1", "memory=40Gi"))),
			mkSlice("devices", "p", 1, 2, devs(dev("gpu-0-mig-1g-0", consumes("gpu-0-counter-set", "memorySlice0=1", "memory=5Gi")))),
		},
	},

	// MixedCountersAndDevices
	{
		name: "slice with devices and sharedCounters", reason: ReasonMixedCountersAndDevices, produces: true,
		slices: []*resourceapi.ResourceSlice{
			mkSlice("a", "p", 1, 1, sets(cset("cs", "mem=4")), devs(dev("gpu-0", consumes("cs", "mem=1")))),
		},
		want: []string{"MixedCountersAndDevices/Error/a/"},
		msg:  "slice a sets both devices (1) and sharedCounters (1)",
	},
	{
		name: "counters and devices in separate slices", reason: ReasonMixedCountersAndDevices,
		slices: []*resourceapi.ResourceSlice{
			mkSlice("a", "p", 1, 2, sets(cset("cs", "mem=4"))),
			mkSlice("b", "p", 1, 2, devs(dev("gpu-0", consumes("cs", "mem=1")))),
		},
	},

	// InvalidNodeSelection: slice level
	{
		name: "slice without node selection", reason: ReasonInvalidNodeSelection, produces: true,
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, noNode(), devs(dev("gpu-0")))},
		want:   []string{"InvalidNodeSelection/Error/a/"},
		msg:    "slice a sets none of nodeName, nodeSelector, allNodes and perDeviceNodeSelection",
	},
	{
		name: "counter-only slice without node selection (the API requires one)", reason: ReasonInvalidNodeSelection, produces: true,
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, noNode(), sets(cset("cs", "mem=1")))},
		want:   []string{"InvalidNodeSelection/Error/a/"},
	},
	{
		name: "slice with nodeName and allNodes", reason: ReasonInvalidNodeSelection, produces: true,
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, onNode("n"),
			spec(func(s *resourceapi.ResourceSliceSpec) { s.AllNodes = ptr.To(true) }), devs(dev("gpu-0")))},
		want: []string{"InvalidNodeSelection/Error/a/"},
		msg:  "slice a sets nodeName and allNodes",
	},
	{
		name: "slice with allNodes and perDeviceNodeSelection", reason: ReasonInvalidNodeSelection, produces: true,
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, perDevice(),
			spec(func(s *resourceapi.ResourceSliceSpec) { s.AllNodes = ptr.To(true) }), devs(dev("gpu-0", devAll())))},
		want: []string{"InvalidNodeSelection/Error/a/"},
	},
	{
		name: "slice nodeSelector with two terms", reason: ReasonInvalidNodeSelection, produces: true,
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, nodeSelector(2), devs(dev("gpu-0")))},
		want:   []string{"InvalidNodeSelection/Error/a/"},
		msg:    "nodeSelector with 2 terms",
	},
	{
		name: "slice allNodes: false and nothing else", reason: ReasonInvalidNodeSelection, produces: true,
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1,
			spec(func(s *resourceapi.ResourceSliceSpec) { s.NodeName = nil; s.AllNodes = ptr.To(false) }), devs(dev("gpu-0")))},
		want: []string{"InvalidNodeSelection/Error/a/", "InvalidNodeSelection/Error/a/"},
	},
	{
		name: "slice nodeName empty", reason: ReasonInvalidNodeSelection, produces: true,
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, onNode(""), devs(dev("gpu-0")))},
		want:   []string{"InvalidNodeSelection/Error/a/", "InvalidNodeSelection/Error/a/"},
	},
	{
		name: "slice perDeviceNodeSelection: false next to nodeName", reason: ReasonInvalidNodeSelection, produces: true,
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1,
			spec(func(s *resourceapi.ResourceSliceSpec) { s.PerDeviceNodeSelection = ptr.To(false) }), devs(dev("gpu-0")))},
		want: []string{"InvalidNodeSelection/Error/a/"},
		msg:  "perDeviceNodeSelection: false",
	},
	{
		name: "one valid slice-level selection each", reason: ReasonInvalidNodeSelection,
		slices: []*resourceapi.ResourceSlice{
			mkSlice("a", "p", 1, 4, onNode("n"), devs(dev("gpu-0"))),
			mkSlice("b", "p", 1, 4, allNodes(), devs(dev("gpu-1"))),
			mkSlice("c", "p", 1, 4, nodeSelector(1), devs(dev("gpu-2"))),
			mkSlice("d", "p", 1, 4, allNodes(), sets(cset("cs", "mem=1"))),
		},
	},

	// InvalidNodeSelection: device level
	{
		name: "perDeviceNodeSelection with a device that sets none", reason: ReasonInvalidNodeSelection, produces: true,
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, perDevice(), devs(dev("gpu-0", devNode("n")), dev("gpu-1")))},
		want:   []string{"InvalidNodeSelection/Error/a/gpu-1"},
		msg:    "device gpu-1 sets none of nodeName, nodeSelector and allNodes",
	},
	{
		name: "perDeviceNodeSelection with a device that sets two", reason: ReasonInvalidNodeSelection, produces: true,
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, perDevice(), devs(dev("gpu-0", devNode("n"), devSelector())))},
		want:   []string{"InvalidNodeSelection/Error/a/gpu-0"},
		msg:    "device gpu-0 sets nodeName and nodeSelector",
	},
	{
		name: "perDeviceNodeSelection with a device allNodes: false", reason: ReasonInvalidNodeSelection, produces: true,
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, perDevice(),
			devs(dev("gpu-0", func(d *resourceapi.Device) { d.AllNodes = ptr.To(false) })))},
		want: []string{"InvalidNodeSelection/Error/a/gpu-0", "InvalidNodeSelection/Error/a/gpu-0"},
	},
	{
		name: "device sets node selection without perDeviceNodeSelection", reason: ReasonInvalidNodeSelection, produces: true,
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, allNodes(), devs(dev("gpu-0", devNode("n"))))},
		want:   []string{"InvalidNodeSelection/Error/a/gpu-0"},
		msg:    "device gpu-0 sets nodeName but slice a does not set perDeviceNodeSelection: true",
	},
	{
		name: "perDeviceNodeSelection with exactly one per device", reason: ReasonInvalidNodeSelection,
		slices: []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, perDevice(),
			devs(dev("gpu-0", devNode("n")), dev("gpu-1", devAll()), dev("gpu-2", devSelector())))},
	},

	// StaleSlices
	{
		name: "older generation next to the current one", reason: ReasonStaleSlices, produces: true,
		slices: []*resourceapi.ResourceSlice{
			mkSlice("new", "p", 3, 1, devs(dev("gpu-0"))),
			mkSlice("old", "p", 2, 1, devs(dev("gpu-0"))),
		},
		want: []string{"StaleSlices/Warning//"},
		msg:  "pool has 1 slices of older generations (old); only generation 3 counts",
	},
	{
		name: "all slices of one generation", reason: ReasonStaleSlices,
		slices: []*resourceapi.ResourceSlice{
			mkSlice("a", "p", 3, 2, devs(dev("gpu-0"))),
			mkSlice("b", "p", 3, 2, devs(dev("gpu-1"))),
		},
	},
}

func TestValidationRules(t *testing.T) {
	for _, tc := range append(append(slices.Clone(validationCases), limitCases...), optionCases...) {
		t.Run(tc.name, func(t *testing.T) {
			p := onlyPoolWith(t, tc.opts, tc.slices...)
			got := reasons(p.Problems)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("problems\n got: %q\nwant: %q\nmessages: %v", got, tc.want, p.Problems)
			}
			if tc.msg != "" && !strings.Contains(p.Problems[0].Message, tc.msg) {
				t.Errorf("message %q does not contain %q", p.Problems[0].Message, tc.msg)
			}
			for _, pr := range p.Problems {
				if !pr.Reason.Known() || pr.Message == "" {
					t.Errorf("bad problem %+v", pr)
				}
			}
			hasReason := slices.ContainsFunc(p.Problems, func(pr Problem) bool { return pr.Reason == tc.reason })
			if hasReason != tc.produces {
				t.Errorf("reason %s present = %v, want %v", tc.reason, hasReason, tc.produces)
			}
			wantValid := !slices.ContainsFunc(tc.want, func(s string) bool { return strings.Contains(s, "/Error/") })
			if p.Valid() != wantValid {
				t.Errorf("Valid() = %v, want %v", p.Valid(), wantValid)
			}
		})
	}
}

func TestSameNamesInDifferentPoolsAreNotDuplicates(t *testing.T) {
	pools := Group([]*resourceapi.ResourceSlice{
		mkSlice("a", "p1", 1, 1, sets(cset("cs", "mem=1"))),
		mkSlice("b", "p1", 1, 1, devs(dev("gpu-0"))), // count 1 but 2 slices: incomplete, not a duplicate
		mkSlice("c", "p2", 1, 2, sets(cset("cs", "mem=1"))),
		mkSlice("d", "p2", 1, 2, devs(dev("gpu-0"))),
		mkSlice("e", "p3", 1, 1, driver("other.example.com"), devs(dev("gpu-0"))),
	})
	if len(pools) != 3 {
		t.Fatalf("got %d pools, want 3", len(pools))
	}
	for _, p := range pools {
		for _, pr := range p.Problems {
			if pr.Reason == ReasonDuplicateDeviceName || pr.Reason == ReasonDuplicateCounterSet {
				t.Errorf("pool %s: unexpected %s", p.ID, pr.Message)
			}
		}
	}
}

func TestMissingCounterSetBecomesErrorWhenPoolCompletes(t *testing.T) {
	devSlice := mkSlice("devices", "p", 1, 2, devs(dev("gpu-0", consumes("cs", "mem=1"))))
	incomplete := onlyPool(t, devSlice)
	if !incomplete.Valid() || incomplete.Complete() {
		t.Fatalf("incomplete pool: Valid=%v Complete=%v, want true/false", incomplete.Valid(), incomplete.Complete())
	}
	// The second slice arrives but it does not define the set either.
	complete := onlyPool(t, devSlice, mkSlice("other", "p", 1, 2, sets(cset("other-cs", "mem=1"))))
	if complete.Valid() {
		t.Fatalf("complete pool with a missing counter set is valid: %v", complete.Problems)
	}
}

// TestEveryReasonHasBothCases is the coverage rule for the rule table: each
// reason Group can produce has a row that produces it and one that does not.
// Allocation and incompleteness reasons are covered in health_test.go.
func TestEveryReasonHasBothCases(t *testing.T) {
	produced := map[Reason]bool{}
	counterpart := map[Reason]bool{}
	for _, tc := range append(append(slices.Clone(validationCases), limitCases...), optionCases...) {
		if tc.produces {
			produced[tc.reason] = true
		} else {
			counterpart[tc.reason] = true
		}
	}
	for _, h := range healthCases {
		for _, r := range h.reasons {
			produced[r] = true
		}
		for _, r := range h.counterpartOf {
			counterpart[r] = true
		}
	}
	for r := range knownReasons {
		if !produced[r] {
			t.Errorf("no test produces %s", r)
		}
		if !counterpart[r] {
			t.Errorf("no valid counterpart for %s", r)
		}
	}
}
