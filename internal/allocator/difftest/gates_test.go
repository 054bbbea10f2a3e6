package difftest

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

// TestFeatureGates: each case is allocated with a gate on and with it off;
// both engines must give the verdict the table says under each (so the gate
// changes the outcome, as it does in kube-scheduler), agree with each other
// and have their allocations verified.
func TestFeatureGates(t *testing.T) {
	node := func(name string, declared ...string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		n.Status.DeclaredFeatures = declared
		return n
	}
	plain := func() []*resourceapi.ResourceSlice {
		return []*resourceapi.ResourceSlice{regSlice("s", "node-0", 1, resourceapi.Device{Name: "a"})}
	}
	groupPool := func(groupsA, groupsB []string) []*resourceapi.ResourceSlice {
		pool := counterPool(groupDev("a", "1", 1), groupDev("b", "1", 1))
		devs := pool[1].Spec.Devices
		devs[0].ConsumesCounters[0].CompatibilityGroups = groupsA
		devs[1].ConsumesCounters[0].CompatibilityGroups = groupsB
		return pool
	}
	tainted := func() []*resourceapi.ResourceSlice {
		d := resourceapi.Device{Name: "a", Taints: []resourceapi.DeviceTaint{{Key: "broken", Effect: resourceapi.DeviceTaintEffectNoSchedule}}}
		return []*resourceapi.ResourceSlice{regSlice("s", "node-0", 1, d)}
	}
	tests := []struct {
		name   string
		gate   string
		nodes  []*corev1.Node
		slices []*resourceapi.ResourceSlice
		rules  []resourceapi.DeviceTaintRule
		claim  *resourceapi.ResourceClaim
		// on and off are the verdicts with the gate on and off.
		on, off Verdict
	}{{
		name:   "firstAvailable needs DRAPrioritizedList",
		gate:   "DRAPrioritizedList",
		slices: plain(),
		claim: regClaim([]resourceapi.DeviceRequest{{Name: "r0", FirstAvailable: []resourceapi.DeviceSubRequest{{
			Name: "one", DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
		}}}}),
		on: Allocated, off: Invalid,
	}, {
		name:   "adminAccess needs DRAAdminAccess",
		gate:   "DRAAdminAccess",
		slices: plain(),
		claim: func() *resourceapi.ResourceClaim {
			r := regRequest("r0", 1)
			r.Exactly.AdminAccess = ptr.To(true)
			return regClaim([]resourceapi.DeviceRequest{r})
		}(),
		on: Allocated, off: Invalid,
	}, {
		name:   "capacity requests need DRAConsumableCapacity",
		gate:   "DRAConsumableCapacity",
		slices: plain(),
		claim: func() *resourceapi.ResourceClaim {
			r := regRequest("r0", 1)
			r.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"mem": resource.MustParse("1")}}
			return regClaim([]resourceapi.DeviceRequest{r})
		}(),
		// A device without the capacity cannot serve the request.
		on: Unsatisfiable, off: Invalid,
	}, {
		name:   "taints keep devices off only with DRADeviceTaints",
		gate:   "DRADeviceTaints",
		slices: tainted(),
		claim:  regClaim([]resourceapi.DeviceRequest{regRequest("r0", 1)}),
		on:     Unsatisfiable, off: Allocated,
	}, {
		name:   "DeviceTaintRules apply only with DRADeviceTaintRules",
		gate:   "DRADeviceTaintRules",
		slices: plain(),
		rules: []resourceapi.DeviceTaintRule{{
			ObjectMeta: metav1.ObjectMeta{Name: "drain"},
			Spec: resourceapi.DeviceTaintRuleSpec{
				DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: ptr.To(gpuDriver), Device: ptr.To("a")},
				Taint:          resourceapi.DeviceTaint{Key: "drain", Effect: resourceapi.DeviceTaintEffectNoExecute},
			},
		}},
		claim: regClaim([]resourceapi.DeviceRequest{regRequest("r0", 1)}),
		on:    Unsatisfiable, off: Allocated,
	}, {
		name: "devices with binding conditions need DRADeviceBindingConditions",
		gate: "DRADeviceBindingConditions",
		slices: []*resourceapi.ResourceSlice{regSlice("s", "node-0", 1, resourceapi.Device{
			Name: "a", BindingConditions: []string{"attached"}, BindingFailureConditions: []string{"failed"},
		})},
		claim: regClaim([]resourceapi.DeviceRequest{regRequest("r0", 1)}),
		on:    Allocated, off: Unsatisfiable,
	}, {
		name:   "devices that consume counters need DRAPartitionableDevices",
		gate:   "DRAPartitionableDevices",
		slices: counterPool(groupDev("a", "1", 1)),
		claim:  regClaim([]resourceapi.DeviceRequest{regRequest("r0", 1)}),
		on:     Allocated, off: Unsatisfiable,
	}, {
		name: "a slice with compatibility groups leaves its pool incomplete without DRADeviceCompatibilityGroups",
		gate: "DRADeviceCompatibilityGroups",
		// a and b share a group: with the gate on both fit together.
		slices: groupPool([]string{"x"}, []string{"x", "y"}),
		claim:  regClaim([]resourceapi.DeviceRequest{regRequest("r0", 2)}),
		on:     Allocated, off: Unsatisfiable,
	}, {
		name:   "devices whose compatibility groups do not overlap are not co-allocated",
		gate:   "DRADeviceCompatibilityGroups",
		slices: groupPool([]string{"x"}, []string{"y"}),
		claim:  regClaim([]resourceapi.DeviceRequest{regRequest("r0", 2)}),
		on:     Unsatisfiable, off: Unsatisfiable,
	}, {
		name:   "a device without groups does not go with one that declares groups",
		gate:   "DRADeviceCompatibilityGroups",
		slices: groupPool(nil, []string{"y"}),
		claim:  regClaim([]resourceapi.DeviceRequest{regRequest("r0", 2)}),
		on:     Unsatisfiable, off: Unsatisfiable,
	}, {
		name:  "skipNodeOperations needs DRAOptionalNodeOperations and a node that declares it",
		gate:  "DRAOptionalNodeOperations",
		nodes: []*corev1.Node{node("node-0", "DRAOptionalNodeOperations")},
		slices: func() []*resourceapi.ResourceSlice {
			s := plain()
			s[0].Spec.SkipNodeOperations = []resourceapi.SkipNodeOperation{"*"}
			return s
		}(),
		claim: regClaim([]resourceapi.DeviceRequest{regRequest("r0", 1)}),
		on:    Allocated, off: Unsatisfiable,
	}, {
		name:  "skipNodeOperations on a node that does not declare it",
		gate:  "DRAOptionalNodeOperations",
		nodes: []*corev1.Node{node("node-0")},
		slices: func() []*resourceapi.ResourceSlice {
			s := plain()
			s[0].Spec.SkipNodeOperations = []resourceapi.SkipNodeOperation{"*"}
			return s
		}(),
		claim: regClaim([]resourceapi.DeviceRequest{regRequest("r0", 1)}),
		on:    Unsatisfiable, off: Unsatisfiable,
	}, {
		name:   "list values match only with DRAListTypeAttributes",
		gate:   "DRAListTypeAttributes",
		slices: []*resourceapi.ResourceSlice{regSlice("s", "node-0", 1, rootDev("a", "p0", "p1"), rootDev("b", "p1"))},
		claim: regClaim([]resourceapi.DeviceRequest{regRequest("r0", 2)},
			resourceapi.DeviceConstraint{MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(pcieRoot))}),
		on: Allocated, off: Unsatisfiable,
	}, {
		// kube-scheduler without the gate compares scalars only and
		// takes a device with list values only as the first device of a
		// distinctAttribute constraint: never two of them.
		name:   "distinct list values: never two devices with lists without DRAListTypeAttributes",
		gate:   "DRAListTypeAttributes",
		slices: []*resourceapi.ResourceSlice{regSlice("s", "node-0", 1, rootDev("a", "p0", "p1"), rootDev("b", "p2"))},
		claim:  regClaim([]resourceapi.DeviceRequest{regRequest("r0", 2)}, distinctRoot()),
		on:     Allocated, off: Unsatisfiable,
	}, {
		name:   "distinct list values: a list first is not compared with the scalars after it without DRAListTypeAttributes",
		gate:   "DRAListTypeAttributes",
		slices: []*resourceapi.ResourceSlice{regSlice("s", "node-0", 1, rootDev("a", "p0", "p1"), scalarRootDev("b", "p1"))},
		claim:  regClaim([]resourceapi.DeviceRequest{regRequest("r0", 2)}, distinctRoot()),
		on:     Unsatisfiable, off: Allocated,
	}, {
		name:   "distinct list values: a list after a scalar is refused without DRAListTypeAttributes",
		gate:   "DRAListTypeAttributes",
		slices: []*resourceapi.ResourceSlice{regSlice("s", "node-0", 1, scalarRootDev("a", "p1"), rootDev("b", "p0", "p2"))},
		claim:  regClaim([]resourceapi.DeviceRequest{regRequest("r0", 2)}, distinctRoot()),
		on:     Allocated, off: Unsatisfiable,
	}, {
		// The first device of the constraint in kube-scheduler's order is
		// the first request's, whatever order another engine searches in.
		name:   "distinct list values: the list must be in the first constrained request without DRAListTypeAttributes",
		gate:   "DRAListTypeAttributes",
		slices: []*resourceapi.ResourceSlice{regSlice("s", "node-0", 1, scalarRootDev("a", "p1"), rootDev("b", "p0", "p2"))},
		claim: func() *resourceapi.ResourceClaim {
			scalar, list := regRequest("scalar", 1), regRequest("list", 1)
			scalar.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.attributes["resource.kubernetes.io"].pcieRoot == "p1"`}}}
			list.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.attributes["resource.kubernetes.io"].pcieRoot != "p1"`}}}
			return regClaim([]resourceapi.DeviceRequest{scalar, list}, distinctRoot())
		}(),
		on: Allocated, off: Unsatisfiable,
	}, {
		// A shared device may serve two requests; without the gate its
		// list value matches nothing, not even itself.
		name:   "matchAttribute: a shared device's list value does not match itself without DRAListTypeAttributes",
		gate:   "DRAListTypeAttributes",
		slices: []*resourceapi.ResourceSlice{regSlice("s", "node-0", 1, sharedRootDev("a", "p0", "p1"))},
		claim: regClaim([]resourceapi.DeviceRequest{regRequest("r0", 1), regRequest("r1", 1)},
			resourceapi.DeviceConstraint{MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(pcieRoot))}),
		on: Allocated, off: Unsatisfiable,
	}, {
		// index % 2 is 0 for a and c, 1 for b: only {a, c} match.
		name:   "a derived attribute matches devices whose own attributes differ",
		gate:   "DRADerivedAttributes",
		slices: []*resourceapi.ResourceSlice{regSlice("s", "node-0", 1, indexDev("a", 0), indexDev("b", 1), indexDev("c", 2))},
		claim: regClaim([]resourceapi.DeviceRequest{derivedRequest("r0", 2, "derived/parity", `device.attributes["gpu.example.com"].index % 2`)},
			resourceapi.DeviceConstraint{MatchAttribute: ptr.To(resourceapi.FullyQualifiedName("derived/parity"))}),
		on: Allocated, off: Invalid,
	}, {
		// The derived attribute shadows "index": all three are distinct
		// by index but not by the derived value, so no two fit.
		name:   "a derived attribute shadows the device attribute of its name",
		gate:   "DRADerivedAttributes",
		slices: []*resourceapi.ResourceSlice{regSlice("s", "node-0", 1, indexDev("a", 0), indexDev("b", 1), indexDev("c", 2))},
		claim: regClaim([]resourceapi.DeviceRequest{derivedRequest("r0", 2, gpuDriver+"/index", `"same"`)},
			resourceapi.DeviceConstraint{DistinctAttribute: ptr.To(resourceapi.FullyQualifiedName(gpuDriver + "/index"))}),
		on: Unsatisfiable, off: Invalid,
	}, {
		name:   "a derived attribute that fails on every device makes the claim invalid",
		gate:   "DRADerivedAttributes",
		slices: []*resourceapi.ResourceSlice{regSlice("s", "node-0", 1, indexDev("a", 0), indexDev("b", 1))},
		claim: regClaim([]resourceapi.DeviceRequest{derivedRequest("r0", 2, "derived/x", `device.attributes["gpu.example.com"].nosuch`)},
			resourceapi.DeviceConstraint{MatchAttribute: ptr.To(resourceapi.FullyQualifiedName("derived/x"))}),
		on: Invalid, off: Invalid,
	}, {
		name:   "a derived attribute that does not compile makes the claim invalid",
		gate:   "DRADerivedAttributes",
		slices: []*resourceapi.ResourceSlice{regSlice("s", "node-0", 1, indexDev("a", 0), indexDev("b", 1))},
		claim: regClaim([]resourceapi.DeviceRequest{derivedRequest("r0", 2, "derived/x", `device.attributes[`)},
			resourceapi.DeviceConstraint{MatchAttribute: ptr.To(resourceapi.FullyQualifiedName("derived/x"))}),
		on: Invalid, off: Invalid,
	}, {
		// 1100m cores, min 500m, step 300m: 1100m in milli-units (fits
		// 1500m), 2 in whole units (does not).
		name:   "fractional request policy ranges round in milli-units",
		gate:   "DRAFractionalCapacityRange",
		slices: []*resourceapi.ResourceSlice{regSlice("s", "node-0", 1, coresDev("a", "1500m", "500m", "300m"))},
		claim:  regClaim([]resourceapi.DeviceRequest{coresRequest("r0", "1100m")}),
		on:     Allocated, off: Unsatisfiable,
	}, {
		// kube-scheduler checks the gate request by request: it gives up
		// at the All request r0 (its pool is incomplete) before it reaches
		// r1's capacity request, so the claim waits instead of failing.
		name:   "a capacity request after an All request on a node with an incomplete pool waits",
		gate:   "DRAConsumableCapacity",
		slices: []*resourceapi.ResourceSlice{regSlice("s", "node-0", 2, resourceapi.Device{Name: "a"})},
		claim: regClaim([]resourceapi.DeviceRequest{
			{Name: "r0", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeAll}},
			coresRequest("r1", "1"),
		}),
		on: Unsatisfiable, off: Unsatisfiable,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, on := range []bool{true, false} {
				features, err := allocator.ParseFeatures(allocator.AllFeatures(), tc.gate+"="+map[bool]string{true: "true", false: "false"}[on])
				if err != nil {
					t.Fatal(err)
				}
				if tc.gate == "DRADeviceBindingConditions" {
					features.ResourceClaimDeviceStatus = true
				}
				want := tc.off
				if on {
					want = tc.on
				}
				nodes := tc.nodes
				if nodes == nil {
					nodes = []*corev1.Node{node("node-0")}
				}
				c := &Case{
					Inputs: allocator.Inputs{
						Nodes:      nodes,
						Classes:    []*resourceapi.DeviceClass{{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}}},
						Slices:     tc.slices,
						TaintRules: tc.rules,
						Features:   &features,
					},
					Claims: []*resourceapi.ResourceClaim{tc.claim},
					Node:   []string{""},
				}
				var out [2][]Outcome
				for i, e := range engines() {
					o, err := Run(t.Context(), e, c)
					if err != nil {
						t.Fatal(err)
					}
					out[i] = o
					if got := o[0].Verdict.compared(); got != want {
						t.Errorf("%s=%v: %s: %s (%v), want %s", tc.gate, on, e.Name(), got, o[0].Err, want)
					}
				}
				problems, _ := Compare(c, engineNames, out[0], out[1])
				for _, p := range problems {
					t.Errorf("%s=%v: %v", tc.gate, on, p)
				}
			}
		})
	}
}

func indexDev(name string, index int64) resourceapi.Device {
	return resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"index": {IntValue: ptr.To(index)}}}
}

func derivedRequest(name string, count int64, attr, expr string) resourceapi.DeviceRequest {
	r := regRequest(name, count)
	r.Exactly.DerivedAttributes = []resourceapi.DeviceDerivedAttribute{{Name: resourceapi.FullyQualifiedName(attr), Expression: expr}}
	return r
}

func coresDev(name, value, lowest, step string) resourceapi.Device {
	return resourceapi.Device{Name: name, Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"cores": {
		Value: resource.MustParse(value),
		RequestPolicy: &resourceapi.CapacityRequestPolicy{ValidRange: &resourceapi.CapacityRequestPolicyRange{
			Min: ptr.To(resource.MustParse(lowest)), Step: ptr.To(resource.MustParse(step))}},
	}}}
}

func coresRequest(name, cores string) resourceapi.DeviceRequest {
	r := regRequest(name, 1)
	r.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"cores": resource.MustParse(cores)}}
	return r
}
