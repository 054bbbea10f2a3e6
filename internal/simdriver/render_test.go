package simdriver

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
)

// migPlacementsA100 is the memory-slice layout diagram of KEP-4815 for an
// A100 40GB, written out independently of the table in a100.go: how many
// instances of each profile have a slot on the memory-slice axis.
var migPlacementsA100 = map[string]int{
	"7g.40gb": 1, "4g.20gb": 1, "3g.20gb": 2, "2g.10gb": 3, "1g.10gb": 4, "1g.5gb+me": 7, "1g.5gb": 7,
}

// devicesPerA100 is the whole GPU plus one device per placement.
func devicesPerA100() int {
	n := 1
	for _, v := range migPlacementsA100 {
		n += v
	}
	return n
}

// poolProblems checks a rendered pool against the API server's per-slice
// limits and the pool-wide rules of SEMANTICS.md. A valid pool has none.
func poolProblems(p Pool) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	sets := map[string]map[string]bool{}
	devices := map[string]bool{}
	for i, sl := range p.Slices {
		if len(sl.Devices) > 0 && len(sl.SharedCounters) > 0 {
			add("slice %d has devices and counters", i)
		}
		if len(sl.SharedCounters) > resourceapi.ResourceSliceMaxCounterSets {
			add("slice %d has %d counter sets", i, len(sl.SharedCounters))
		}
		limit := resourceapi.ResourceSliceMaxDevices
		for j := range sl.Devices {
			if usesAdvancedFeatures(&sl.Devices[j]) {
				limit = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
			}
		}
		if len(sl.Devices) > limit {
			add("slice %d has %d devices, limit %d", i, len(sl.Devices), limit)
		}
		for _, cs := range sl.SharedCounters {
			if sets[cs.Name] != nil {
				add("duplicate counter set %s", cs.Name)
			}
			if msgs := validation.IsDNS1123Label(cs.Name); len(msgs) > 0 {
				add("counter set name %s: %v", cs.Name, msgs)
			}
			if len(cs.Counters) > resourceapi.ResourceSliceMaxCountersPerCounterSet {
				add("counter set %s has %d counters", cs.Name, len(cs.Counters))
			}
			sets[cs.Name] = map[string]bool{}
			for c := range cs.Counters {
				sets[cs.Name][c] = true
				if msgs := validation.IsDNS1123Label(c); len(msgs) > 0 {
					add("counter name %s: %v", c, msgs)
				}
			}
		}
	}
	for _, sl := range p.Slices {
		for _, d := range sl.Devices {
			if devices[d.Name] {
				add("duplicate device %s", d.Name)
			}
			devices[d.Name] = true
			if msgs := validation.IsDNS1123Label(d.Name); len(msgs) > 0 {
				add("device name %s: %v", d.Name, msgs)
			}
			if n := len(d.Attributes) + len(d.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
				add("device %s has %d attributes and capacities", d.Name, n)
			}
			values := 0
			for _, a := range d.Attributes {
				values += max(1, len(a.StringValues)+len(a.IntValues)+len(a.BoolValues)+len(a.VersionValues))
			}
			if values > resourceapi.ResourceSliceMaxAttributeValuesPerDevice {
				add("device %s has %d attribute values", d.Name, values)
			}
			for c := range d.Capacity {
				if strings.ContainsAny(string(c), "-.") {
					add("capacity name %s of %s is not a C identifier", c, d.Name)
				}
			}
			if len(d.ConsumesCounters) > resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice {
				add("device %s consumes from %d counter sets", d.Name, len(d.ConsumesCounters))
			}
			for _, cc := range d.ConsumesCounters {
				set, ok := sets[cc.CounterSet]
				if !ok {
					add("device %s consumes from missing counter set %s", d.Name, cc.CounterSet)
					continue
				}
				for c := range cc.Counters {
					if !set[c] {
						add("device %s consumes counter %s that set %s does not define", d.Name, c, cc.CounterSet)
					}
				}
			}
		}
	}
	return problems
}

func deviceCount(p Pool) int {
	n := 0
	for _, sl := range p.Slices {
		n += len(sl.Devices)
	}
	return n
}

func findDevice(p Pool, name string) *resourceapi.Device {
	for _, sl := range p.Slices {
		for i := range sl.Devices {
			if sl.Devices[i].Name == name {
				return &sl.Devices[i]
			}
		}
	}
	return nil
}

func counterSet(p Pool, name string) map[string]resourceapi.Counter {
	for _, sl := range p.Slices {
		for _, cs := range sl.SharedCounters {
			if cs.Name == name {
				return cs.Counters
			}
		}
	}
	return nil
}

func poolOf(t *testing.T, pools []Pool, driver string) Pool {
	t.Helper()
	for _, p := range pools {
		if p.Driver == driver {
			return p
		}
	}
	t.Fatalf("no pool of driver %s among %d pools", driver, len(pools))
	return Pool{}
}

func TestRenderTestdataInventory(t *testing.T) {
	inv, err := LoadInventory("testdata/inventory.yaml")
	if err != nil {
		t.Fatal(err)
	}
	plain := map[string]string{"type": "kwok"}
	pools, err := Render(inv, "node-a", plain)
	if err != nil {
		t.Fatal(err)
	}
	if len(pools) != 3 {
		t.Fatalf("a plain kwok node gets %d pools, want gpu, nic and cpu", len(pools))
	}
	for _, p := range pools {
		if p.Name != "node-a" || p.Broken {
			t.Errorf("pool %s/%s broken=%v, want the node-named valid pool", p.Driver, p.Name, p.Broken)
		}
		if probs := poolProblems(p); len(probs) > 0 {
			t.Errorf("pool %s: %v", p.Driver, probs)
		}
	}

	gpu := poolOf(t, pools, "gpu.sim.drastack.io")
	// Two partitionable A100s and two whole L4s.
	if got, want := deviceCount(gpu), 2*devicesPerA100()+2; got != want {
		t.Errorf("gpu pool has %d devices, want %d", got, want)
	}
	if got := len(gpu.Slices[0].SharedCounters); got != 2 {
		t.Errorf("first gpu slice holds %d counter sets, want one per A100", got)
	}
	if l4 := findDevice(gpu, "gpu-3"); l4 == nil || *l4.Attributes[attrModel].StringValue != "L4" || !l4.Capacity[capMemory].Value.Equal(resource.MustParse("24Gi")) {
		t.Errorf("gpu-3 should be a 24Gi L4, got %+v", l4)
	}
	if len(poolOf(t, pools, "nic.sim.drastack.io").Slices) != 1 || deviceCount(poolOf(t, pools, "nic.sim.drastack.io")) != 4 {
		t.Error("nic pool should be one slice of four NICs")
	}

	brokenPools, err := Render(inv, "node-b", map[string]string{"type": "kwok", "sim.drastack.io/broken": "true"})
	if err != nil {
		t.Fatal(err)
	}
	broken := poolOf(t, brokenPools, "broken-gpu.sim.drastack.io")
	if !broken.Broken || broken.Name != "node-b-faulty" {
		t.Errorf("broken pool = %s broken=%v, want node-b-faulty broken=true", broken.Name, broken.Broken)
	}

	none, err := Render(inv, "node-c", map[string]string{"type": "real"})
	if err != nil || len(none) != 0 {
		t.Errorf("a node outside every selector got %d pools (err %v)", len(none), err)
	}
}

func TestRenderMIGDevices(t *testing.T) {
	inv := &Inventory{Drivers: []DriverSpec{{Name: "gpu.example.com", Devices: []DeviceGroup{{Kind: KindGPU, Count: 1, Partitions: ProfileA100_40GB}}}}}
	pools, err := Render(inv, "n", nil)
	if err != nil {
		t.Fatal(err)
	}
	p := pools[0]
	perProfile := map[string]int{}
	for _, sl := range p.Slices {
		for _, d := range sl.Devices {
			if *d.Attributes[attrType].StringValue == "mig" {
				perProfile[*d.Attributes[attrProfile].StringValue]++
				if *d.Attributes[attrParentUUID].StringValue != *findDevice(p, "gpu-0").Attributes[attrUUID].StringValue {
					t.Errorf("%s: parentUUID is not gpu-0's uuid", d.Name)
				}
			}
		}
	}
	if !reflect.DeepEqual(perProfile, migPlacementsA100) {
		t.Errorf("placements per profile = %v, want the KEP-4815 layout %v", perProfile, migPlacementsA100)
	}
	whole := findDevice(p, "gpu-0")
	set := counterSet(p, "gpu-0-counters")
	if len(whole.ConsumesCounters) != 1 || !reflect.DeepEqual(whole.ConsumesCounters[0].Counters, set) {
		t.Error("the whole GPU must consume its entire counter set")
	}
	if got := set["memory-slice-7"].Value; !got.Equal(resource.MustParse("1")) {
		t.Errorf("memory-slice-7 = %s, want 1", got.String())
	}
}

// fits reports whether the named devices can be allocated together: for
// every counter, the sum of what they consume stays within the set.
func fits(t *testing.T, p Pool, names ...string) bool {
	t.Helper()
	used := map[string]map[string]*resource.Quantity{}
	for _, n := range names {
		d := findDevice(p, n)
		if d == nil {
			t.Fatalf("no device %s", n)
		}
		for _, cc := range d.ConsumesCounters {
			if used[cc.CounterSet] == nil {
				used[cc.CounterSet] = map[string]*resource.Quantity{}
			}
			for c, v := range cc.Counters {
				if used[cc.CounterSet][c] == nil {
					q := resource.Quantity{}
					used[cc.CounterSet][c] = &q
				}
				used[cc.CounterSet][c].Add(v.Value)
			}
		}
	}
	for setName, counters := range used {
		set := counterSet(p, setName)
		for c, q := range counters {
			if q.Cmp(set[c].Value) > 0 {
				return false
			}
		}
	}
	return true
}

// TestMIGCountersAllowExactlyTheKEPCombinations reads the published
// counters as the allocator would and checks the combinations that
// KEP-4815 describes as possible and impossible on one A100 40GB.
func TestMIGCountersAllowExactlyTheKEPCombinations(t *testing.T) {
	inv := &Inventory{Drivers: []DriverSpec{{Name: "gpu.example.com", Devices: []DeviceGroup{{Kind: KindGPU, Count: 2, Partitions: ProfileA100_40GB}}}}}
	pools, err := Render(inv, "n", nil)
	if err != nil {
		t.Fatal(err)
	}
	p := pools[0]
	seq := func(format string, n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf(format, i))
		}
		return out
	}
	tests := []struct {
		name    string
		devices []string
		want    bool
	}{
		{"seven 1g.5gb fill the GPU", seq("gpu-0-mig-1g-5gb-%d", 7), true},
		{"four 1g.10gb fill the memory slices", []string{"gpu-0-mig-1g-10gb-0", "gpu-0-mig-1g-10gb-2", "gpu-0-mig-1g-10gb-4", "gpu-0-mig-1g-10gb-6"}, true},
		{"two 3g.20gb side by side", []string{"gpu-0-mig-3g-20gb-0", "gpu-0-mig-3g-20gb-4"}, true},
		{"4g.20gb next to 3g.20gb", []string{"gpu-0-mig-4g-20gb-0", "gpu-0-mig-3g-20gb-4"}, true},
		{"three 2g.10gb and a 1g.10gb", []string{"gpu-0-mig-2g-10gb-0", "gpu-0-mig-2g-10gb-2", "gpu-0-mig-2g-10gb-4", "gpu-0-mig-1g-10gb-6"}, true},
		{"the KEP's example claim: 1g.5gb x2, 2g.10gb, 3g.20gb", []string{"gpu-0-mig-1g-5gb-0", "gpu-0-mig-1g-5gb-1", "gpu-0-mig-2g-10gb-2", "gpu-0-mig-3g-20gb-4"}, true},
		{"partitions of different GPUs never compete", []string{"gpu-0", "gpu-1-mig-1g-5gb-0"}, true},
		{"overlapping memory slices", []string{"gpu-0-mig-1g-5gb-0", "gpu-0-mig-2g-10gb-0"}, false},
		{"4g.20gb and 3g.20gb on the same slices", []string{"gpu-0-mig-4g-20gb-0", "gpu-0-mig-3g-20gb-0"}, false},
		{"only one JPEG engine for two 1g.5gb+me", []string{"gpu-0-mig-1g-5gb-me-0", "gpu-0-mig-1g-5gb-me-1"}, false},
		{"7g.40gb takes everything", []string{"gpu-0-mig-7g-40gb-0", "gpu-0-mig-1g-5gb-6"}, false},
		{"the whole GPU takes everything", []string{"gpu-0", "gpu-0-mig-1g-5gb-6"}, false},
		{"six 1g.5gb and a 1g.10gb use all 98 multiprocessors and 7 copy engines", append(seq("gpu-0-mig-1g-5gb-%d", 6), "gpu-0-mig-1g-10gb-6"), true},
		{"a device cannot be taken twice", []string{"gpu-0-mig-1g-5gb-3", "gpu-0-mig-1g-5gb-3"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fits(t, p, tt.devices...); got != tt.want {
				t.Errorf("fits(%v) = %v, want %v", tt.devices, got, tt.want)
			}
		})
	}
}

func TestRenderPCIeAlignment(t *testing.T) {
	inv := &Inventory{
		Topology: Topology{PCIeRoots: 4},
		Drivers: []DriverSpec{
			{Name: "gpu.example.com", Devices: []DeviceGroup{{Kind: KindGPU, Count: 2, Partitions: ProfileA100_40GB}}},
			{Name: "nic.example.com", Devices: []DeviceGroup{{Kind: KindNIC, Count: 4}}},
			{Name: "cpu.example.com", Devices: []DeviceGroup{{Kind: KindCPU, Count: 2}}},
		},
	}
	pools, err := Render(inv, "n", nil)
	if err != nil {
		t.Fatal(err)
	}
	root := func(p Pool, dev string) string {
		t.Helper()
		d := findDevice(p, dev)
		if d == nil {
			t.Fatalf("no device %s", dev)
		}
		a := d.Attributes[deviceattribute.StandardDeviceAttributePCIeRoot]
		if a.StringValue == nil {
			t.Fatalf("%s: pcieRoot is not a string", dev)
		}
		return *a.StringValue
	}
	cpuRoots := func(dev string) []string {
		t.Helper()
		a := findDevice(poolOf(t, pools, "cpu.example.com"), dev).Attributes[deviceattribute.StandardDeviceAttributePCIeRoot]
		if a.StringValues == nil {
			t.Fatalf("%s: pcieRoot is not a list", dev)
		}
		return a.StringValues
	}
	gpus, nics := poolOf(t, pools, "gpu.example.com"), poolOf(t, pools, "nic.example.com")
	cpu0, cpu1 := cpuRoots("cpu-0"), cpuRoots("cpu-1")
	if len(cpu0) != 2 || len(cpu1) != 2 || slices.ContainsFunc(cpu0, func(r string) bool { return slices.Contains(cpu1, r) }) {
		t.Fatalf("the two CPUs should split the four roots: %v and %v", cpu0, cpu1)
	}
	if r := root(gpus, "gpu-0"); !slices.Contains(cpu0, r) || r != root(nics, "nic-0") {
		t.Errorf("gpu-0 (%s) should share a root with nic-0 (%s) under cpu-0 %v", r, root(nics, "nic-0"), cpu0)
	}
	if r := root(gpus, "gpu-1"); !slices.Contains(cpu1, r) || r != root(nics, "nic-2") {
		t.Errorf("gpu-1 (%s) should share a root with nic-2 under cpu-1 %v", r, cpu1)
	}
	if root(gpus, "gpu-0-mig-1g-5gb-3") != root(gpus, "gpu-0") {
		t.Error("a partition must sit on its GPU's root")
	}
	for _, n := range []string{"nic-0", "nic-1", "nic-2", "nic-3"} {
		r := root(nics, n)
		if slices.Contains(cpu0, r) == slices.Contains(cpu1, r) {
			t.Errorf("%s root %s should belong to exactly one CPU", n, r)
		}
	}
}

func TestRenderCPUsWithoutRoots(t *testing.T) {
	inv := &Inventory{Topology: Topology{PCIeRoots: 1}, Drivers: []DriverSpec{{Name: "cpu.example.com", Devices: []DeviceGroup{{Kind: KindCPU, Count: 2}}}}}
	pools, err := Render(inv, "n", nil)
	if err != nil {
		t.Fatal(err)
	}
	withRoot := 0
	for _, d := range pools[0].Slices[0].Devices {
		if a, ok := d.Attributes[deviceattribute.StandardDeviceAttributePCIeRoot]; ok {
			withRoot++
			if len(a.StringValues) == 0 {
				t.Errorf("%s has an empty pcieRoot list", d.Name)
			}
		}
	}
	if withRoot != 1 {
		t.Errorf("with one root and two CPUs, %d CPUs list a root, want 1", withRoot)
	}
}

func TestRenderBrokenPools(t *testing.T) {
	tests := []struct {
		name   string
		group  DeviceGroup
		broken bool
		want   string // substring of the only expected problem; empty = valid
	}{
		{"valid partitioned GPU", DeviceGroup{Kind: KindGPU, Count: 1, Partitions: ProfileA100_40GB}, false, ""},
		{"broken partitioned GPU consumes an undefined counter", DeviceGroup{Kind: KindGPU, Count: 1, Partitions: ProfileA100_40GB}, true, "consumes counter " + BrokenCounter},
		{"valid NICs", DeviceGroup{Kind: KindNIC, Count: 2}, false, ""},
		{"broken NICs get a device consuming a missing set", DeviceGroup{Kind: KindNIC, Count: 2}, true, "missing counter set " + BrokenCounterSet},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv := &Inventory{Drivers: []DriverSpec{{Name: "x.example.com", Broken: tt.broken, Devices: []DeviceGroup{tt.group}}}}
			pools, err := Render(inv, "n", nil)
			if err != nil {
				t.Fatal(err)
			}
			probs := poolProblems(pools[0])
			if tt.want == "" {
				if len(probs) != 0 {
					t.Fatalf("valid pool has problems: %v", probs)
				}
				return
			}
			if len(probs) != 1 || !strings.Contains(probs[0], tt.want) {
				t.Fatalf("problems = %v, want exactly one containing %q", probs, tt.want)
			}
			if pools[0].Broken != true {
				t.Error("pool not marked Broken")
			}
		})
	}
}

func TestRenderRejectsDuplicatePools(t *testing.T) {
	g := []DeviceGroup{{Kind: KindGPU, Count: 1}}
	inv := &Inventory{Drivers: []DriverSpec{{Name: "gpu.example.com", Devices: g}, {Name: "gpu.example.com", Devices: g}}}
	if _, err := Render(inv, "n", nil); err == nil || !strings.Contains(err.Error(), "second time") {
		t.Fatalf("err = %v, want a duplicate pool error", err)
	}
}

func TestRenderIsDeterministicAndPerNode(t *testing.T) {
	inv, err := LoadInventory("testdata/inventory.yaml")
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"type": "kwok"}
	a1, _ := Render(inv, "node-a", labels)
	a2, _ := Render(inv, "node-a", labels)
	if !reflect.DeepEqual(a1, a2) {
		t.Fatal("two renders of the same node differ")
	}
	b, _ := Render(inv, "node-b", labels)
	uuidA := *findDevice(poolOf(t, a1, "gpu.sim.drastack.io"), "gpu-0").Attributes[attrUUID].StringValue
	uuidB := *findDevice(poolOf(t, b, "gpu.sim.drastack.io"), "gpu-0").Attributes[attrUUID].StringValue
	if uuidA == uuidB {
		t.Error("gpu-0 of two nodes has the same UUID")
	}
}

// TestPackSlicesRespectsLimits drives packSlices with many GPUs of each
// shape and checks the number of slices against what the limits imply.
func TestPackSlicesRespectsLimits(t *testing.T) {
	perSlice := resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures / devicesPerA100() // A100s whose partitions fit one slice
	tests := []struct {
		name             string
		group            DeviceGroup
		wantDeviceSlices int
		wantCounterSlice int
	}{
		{"one whole GPU", DeviceGroup{Kind: KindGPU, Count: 1}, 1, 0},
		{"whole GPUs fill slices of 128", DeviceGroup{Kind: KindGPU, Count: 300}, ceilDiv(300, resourceapi.ResourceSliceMaxDevices), 0},
		{"CPUs with list attributes fill slices of 64", DeviceGroup{Kind: KindCPU, Count: 100}, ceilDiv(100, resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures), 0},
		{"partitioned GPUs are not split across slices", DeviceGroup{Kind: KindGPU, Count: 5, Partitions: ProfileA100_40GB}, ceilDiv(5, perSlice), 1},
		{"more than eight counter sets need a second counter slice", DeviceGroup{Kind: KindGPU, Count: 9, Partitions: ProfileA100_40GB}, ceilDiv(9, perSlice), 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv := &Inventory{Topology: Topology{PCIeRoots: 4}, Drivers: []DriverSpec{{Name: "x.example.com", Devices: []DeviceGroup{tt.group}}}}
			pools, err := Render(inv, "n", nil)
			if err != nil {
				t.Fatal(err)
			}
			var deviceSlices, counterSlices int
			for _, sl := range pools[0].Slices {
				if len(sl.Devices) > 0 {
					deviceSlices++
				}
				if len(sl.SharedCounters) > 0 {
					counterSlices++
				}
			}
			if deviceSlices != tt.wantDeviceSlices || counterSlices != tt.wantCounterSlice {
				t.Errorf("got %d device slices and %d counter slices, want %d and %d", deviceSlices, counterSlices, tt.wantDeviceSlices, tt.wantCounterSlice)
			}
			if probs := poolProblems(pools[0]); len(probs) > 0 {
				t.Errorf("problems: %v", probs)
			}
			// Every GPU's partitions stay in the slice of the GPU.
			for i := range tt.group.Count {
				if tt.group.Partitions == "" {
					break
				}
				home := sliceOf(pools[0], fmt.Sprintf("gpu-%d", i))
				for _, sl := range pools[0].Slices {
					for _, d := range sl.Devices {
						if strings.HasPrefix(d.Name, fmt.Sprintf("gpu-%d-mig-", i)) && sliceOf(pools[0], d.Name) != home {
							t.Errorf("%s is not in the slice of gpu-%d", d.Name, i)
						}
					}
				}
			}
		})
	}
}

func TestPackSlicesEmptyPool(t *testing.T) {
	got := packSlices(nil, nil)
	if len(got) != 1 || len(got[0].Devices) != 0 || len(got[0].SharedCounters) != 0 {
		t.Fatalf("an empty pool should be one empty slice, got %+v", got)
	}
}

func sliceOf(p Pool, device string) int {
	for i, sl := range p.Slices {
		for _, d := range sl.Devices {
			if d.Name == device {
				return i
			}
		}
	}
	return -1
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func TestSplitByDriver(t *testing.T) {
	pools := []Pool{
		{Driver: "a", Name: "n"},
		{Driver: "a", Name: "n-extra"},
		{Driver: "b", Name: "n", Broken: true},
	}
	valid, broken := splitByDriver(pools)
	if len(valid) != 1 || len(valid["a"].Pools) != 2 {
		t.Errorf("valid = %v, want driver a with two pools", valid)
	}
	if len(broken) != 1 || len(broken["b"]) != 1 || valid["b"] != nil {
		t.Errorf("broken = %v, want driver b only there", broken)
	}
}

func TestRenderGenerationLabel(t *testing.T) {
	inv := &Inventory{Drivers: []DriverSpec{{Name: "gpu.example.com", Devices: []DeviceGroup{{Kind: KindGPU, Count: 1}}}}}
	for _, tc := range []struct {
		label string
		want  int64
	}{{"", 0}, {"3", 3}, {"0", 0}, {"-2", 0}, {"two", 0}} {
		labels := map[string]string{}
		if tc.label != "" {
			labels[GenerationLabel] = tc.label
		}
		pools, err := Render(inv, "n", labels)
		if err != nil {
			t.Fatal(err)
		}
		if len(pools) != 1 || pools[0].Generation != tc.want {
			t.Errorf("label %q: pools %+v, want one with generation %d", tc.label, pools, tc.want)
		}
		valid, _ := splitByDriver(pools)
		if got := valid["gpu.example.com"].Pools["n"].Generation; got != tc.want {
			t.Errorf("label %q: slice controller pool generation %d, want %d", tc.label, got, tc.want)
		}
	}
}
