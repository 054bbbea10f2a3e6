package topology

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/api/validate/content"

	"github.com/drastack/drastack/internal/pool"
)

// box is the chips a device covers, read back from its attributes.
type box struct {
	dims         int
	origin, size Coord
}

// chips lists every chip of the box.
func (b box) chips() []Coord {
	var out []Coord
	size := b.size
	for d := b.dims; d < MaxDims; d++ {
		size[d] = 1
	}
	forEach(b.origin, size, func(c Coord) { out = append(out, c) })
	return out
}

// hosts lists the host coordinates the box touches, in grid order.
func (b box) hosts(cph []int) []Coord {
	seen := map[Coord]bool{}
	var out []Coord
	for _, c := range b.chips() {
		var h Coord
		for d := 0; d < b.dims; d++ {
			h[d] = c[d] / cph[d]
		}
		if !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	slices.SortFunc(out, func(a, b Coord) int { return slices.Compare(a[:], b[:]) })
	return out
}

// overlaps reports whether two boxes share a chip.
func (b box) overlaps(o box) bool {
	for d := 0; d < b.dims; d++ {
		if b.origin[d]+b.size[d] <= o.origin[d] || o.origin[d]+o.size[d] <= b.origin[d] {
			return false
		}
	}
	return true
}

// deviceBox reads a device's placement from its shape and origin
// attributes, independently of how Generate computed it.
func deviceBox(t *testing.T, dims int, d *resourceapi.Device) box {
	t.Helper()
	shape, origin := d.Attributes[AttrShape].StringValue, d.Attributes[AttrOrigin].StringValue
	if shape == nil || origin == nil {
		t.Fatalf("device %s lacks the shape or origin attribute", d.Name)
	}
	size, err := ParseShape(*shape)
	if err != nil {
		t.Fatalf("device %s: %v", d.Name, err)
	}
	o, err := ParseCoords(*origin, dims)
	if err != nil {
		t.Fatalf("device %s: %v", d.Name, err)
	}
	return box{dims: dims, origin: o, size: toCoord(size)}
}

// counterKey is one counter of the pool.
type counterKey struct{ set, counter string }

// consumption flattens what a device consumes.
func consumption(d *resourceapi.Device) map[counterKey]int64 {
	out := map[counterKey]int64{}
	for _, c := range d.ConsumesCounters {
		for name, v := range c.Counters {
			out[counterKey{c.CounterSet, name}] = v.Value.Value()
		}
	}
	return out
}

// poolCounters flattens the counter sets of a pool.
func poolCounters(slices []*resourceapi.ResourceSlice) map[counterKey]int64 {
	out := map[counterKey]int64{}
	for _, s := range slices {
		for _, cs := range s.Spec.SharedCounters {
			for name, v := range cs.Counters {
				out[counterKey{cs.Name, name}] = v.Value.Value()
			}
		}
	}
	return out
}

// allDevices lists the devices of all slices in order.
func allDevices(slices []*resourceapi.ResourceSlice) []*resourceapi.Device {
	var out []*resourceapi.Device
	for _, s := range slices {
		for i := range s.Spec.Devices {
			out = append(out, &s.Spec.Devices[i])
		}
	}
	return out
}

// checkSlices checks a generated pool against the rules of the API server
// and of SEMANTICS.md, written out here independently of internal/pool,
// then asks internal/pool too, then checks what the topology promises:
// every device's hosts, node selection, capacity and counters follow from
// its shape and origin.
func checkSlices(t *testing.T, spec Spec, got []*resourceapi.ResourceSlice) {
	t.Helper()
	errorf := func(format string, args ...any) {
		t.Helper()
		t.Errorf(format, args...)
	}
	if len(got) == 0 {
		t.Fatal("no slices")
	}
	dims := len(spec.HostGrid)
	sliceNames := map[string]bool{}
	setNames := map[string]bool{}
	deviceNames := map[string]bool{}
	counters := poolCounters(got)
	for _, s := range got {
		if sliceNames[s.Name] {
			errorf("slice name %s is used twice", s.Name)
		}
		sliceNames[s.Name] = true
		if msgs := content.IsDNS1123Subdomain(s.Name); len(msgs) > 0 {
			errorf("slice name %q: %v", s.Name, msgs)
		}
		ps := s.Spec.Pool
		if s.Spec.Driver != spec.Driver || ps.Name != spec.Pool || ps.ResourceSliceCount != int64(len(got)) || ps.Generation != got[0].Spec.Pool.Generation {
			errorf("slice %s: driver %s pool %+v; want driver %s, pool %s, %d slices, one generation", s.Name, s.Spec.Driver, ps, spec.Driver, spec.Pool, len(got))
		}
		if s.Spec.PerDeviceNodeSelection == nil || !*s.Spec.PerDeviceNodeSelection || s.Spec.NodeName != nil || s.Spec.NodeSelector != nil || s.Spec.AllNodes != nil {
			errorf("slice %s: want perDeviceNodeSelection: true and no other node selection", s.Name)
		}
		if len(s.Spec.Devices) > 0 && len(s.Spec.SharedCounters) > 0 {
			errorf("slice %s mixes devices and counters", s.Name)
		}
		if n := len(s.Spec.SharedCounters); n > resourceapi.ResourceSliceMaxCounterSets {
			errorf("slice %s: %d counter sets", s.Name, n)
		}
		if n := len(s.Spec.Devices); n > resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures {
			errorf("slice %s: %d devices", s.Name, n)
		}
		for _, cs := range s.Spec.SharedCounters {
			if setNames[cs.Name] {
				errorf("counter set %s defined twice", cs.Name)
			}
			setNames[cs.Name] = true
			if msgs := content.IsDNS1123Label(cs.Name); len(msgs) > 0 {
				errorf("counter set name %q: %v", cs.Name, msgs)
			}
			if n := len(cs.Counters); n == 0 || n > resourceapi.ResourceSliceMaxCountersPerCounterSet {
				errorf("counter set %s: %d counters", cs.Name, n)
			}
			for name := range cs.Counters {
				if msgs := content.IsDNS1123Label(name); len(msgs) > 0 {
					errorf("counter name %q: %v", name, msgs)
				}
			}
		}
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			if deviceNames[d.Name] {
				errorf("device %s published twice", d.Name)
			}
			deviceNames[d.Name] = true
			if msgs := content.IsDNS1123Label(d.Name); len(msgs) > 0 {
				errorf("device name %q: %v", d.Name, msgs)
			}
			if n := len(d.ConsumesCounters); n == 0 || n > resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice {
				errorf("device %s consumes from %d counter sets", d.Name, n)
			}
			seenSet := map[string]bool{}
			for _, c := range d.ConsumesCounters {
				if seenSet[c.CounterSet] {
					errorf("device %s consumes from set %s twice", d.Name, c.CounterSet)
				}
				seenSet[c.CounterSet] = true
				if n := len(c.Counters); n == 0 || n > resourceapi.ResourceSliceMaxCountersPerDeviceCounterConsumption {
					errorf("device %s consumes %d counters of %s", d.Name, n, c.CounterSet)
				}
				for name := range c.Counters {
					if _, ok := counters[counterKey{c.CounterSet, name}]; !ok {
						errorf("device %s consumes counter %s/%s that does not exist", d.Name, c.CounterSet, name)
					}
				}
			}
			if n := len(d.Attributes) + len(d.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
				errorf("device %s: %d attributes and capacities", d.Name, n)
			}
			values := 0
			for _, a := range d.Attributes {
				values += max(1, len(a.StringValues)+len(a.IntValues)+len(a.BoolValues)+len(a.VersionValues))
			}
			if values > resourceapi.ResourceSliceMaxAttributeValuesPerDevice {
				errorf("device %s: %d attribute values", d.Name, values)
			}
			if (d.NodeName == nil) == (d.NodeSelector == nil) || d.AllNodes != nil {
				errorf("device %s: want exactly one of nodeName and nodeSelector", d.Name)
			}
			checkDeviceTopology(t, spec, dims, d)
		}
	}
	p := pool.Build(pool.ID{Driver: spec.Driver, Pool: spec.Pool}, got)
	if p == nil || !p.Complete() || len(p.Problems) > 0 {
		if p == nil {
			t.Fatalf("internal/pool sees no pool")
		}
		t.Errorf("internal/pool: complete=%v problems=%v", p.Complete(), p.Problems)
	}
}

// checkDeviceTopology checks one device against its own shape and origin.
func checkDeviceTopology(t *testing.T, spec Spec, dims int, d *resourceapi.Device) {
	t.Helper()
	b := deviceBox(t, dims, d)
	for dd := 0; dd < dims; dd++ {
		if b.origin[dd]%b.size[dd] != 0 {
			t.Errorf("device %s: origin %v is not aligned to its shape %v", d.Name, b.origin, b.size)
		}
	}
	wantName := fmt.Sprintf("-%s-at-%s", *d.Attributes[AttrShape].StringValue, strings.ReplaceAll(*d.Attributes[AttrOrigin].StringValue, ".", "-"))
	if !strings.HasSuffix(d.Name, wantName) {
		t.Errorf("device %s: name does not end in %s", d.Name, wantName)
	}
	chips := int64(len(b.chips()))
	if got := d.Attributes[AttrChips].IntValue; got == nil || *got != chips {
		t.Errorf("device %s: chips attribute %v, want %d", d.Name, got, chips)
	}
	chipName := spec.ChipName
	if chipName == "" {
		chipName = DefaultChipName
	}
	if c, ok := d.Capacity[resourceapi.QualifiedName(chipName)]; !ok || c.Value.Cmp(*resource.NewQuantity(chips, resource.DecimalSI)) != 0 {
		t.Errorf("device %s: capacity %v, want %s: %d", d.Name, d.Capacity, chipName, chips)
	}
	if got := d.Attributes[AttrDomain].StringValue; got == nil || *got != spec.Domain {
		t.Errorf("device %s: domain attribute %v, want %s", d.Name, got, spec.Domain)
	}

	hosts := b.hosts(spec.ChipsPerHost)
	var nodes, hostnames []string
	for _, h := range hosts {
		host, ok := spec.Hosts.Hosts[h]
		if !ok {
			t.Errorf("device %s covers host %v, which is missing", d.Name, h)
			return
		}
		nodes = append(nodes, host.Node)
		hostnames = append(hostnames, host.hostname())
	}
	if spec.OmitHostsAttribute {
		if _, ok := d.Attributes[AttrHosts]; ok {
			t.Errorf("device %s has a hosts attribute although it is omitted", d.Name)
		}
	} else if got := d.Attributes[AttrHosts].StringValues; !slices.Equal(got, nodes) {
		t.Errorf("device %s: hosts attribute %v, want %v", d.Name, got, nodes)
	}
	if len(hosts) == 1 {
		if d.NodeName == nil || *d.NodeName != nodes[0] {
			t.Errorf("device %s on one host: nodeName %v, want %s", d.Name, d.NodeName, nodes[0])
		}
	} else {
		sel := d.NodeSelector
		if sel == nil || len(sel.NodeSelectorTerms) != 1 || len(sel.NodeSelectorTerms[0].MatchExpressions) != 1 || len(sel.NodeSelectorTerms[0].MatchFields) != 0 {
			t.Errorf("device %s on %d hosts: want one term with one expression, got %+v", d.Name, len(hosts), sel)
			return
		}
		req := sel.NodeSelectorTerms[0].MatchExpressions[0]
		if req.Key != "kubernetes.io/hostname" || req.Operator != "In" || !slices.Equal(req.Values, hostnames) {
			t.Errorf("device %s: selector %+v, want kubernetes.io/hostname In %v", d.Name, req, hostnames)
		}
	}

	// Counters: one per host touched, each the chips covered on that host.
	perHost := map[Coord]int64{}
	for _, c := range b.chips() {
		var h Coord
		for dd := 0; dd < dims; dd++ {
			h[dd] = c[dd] / spec.ChipsPerHost[dd]
		}
		perHost[h]++
	}
	cons := consumption(d)
	if len(cons) != len(perHost) {
		t.Errorf("device %s consumes %d counters for %d hosts", d.Name, len(cons), len(perHost))
	}
	for k, v := range cons {
		h := hostOfCounter(t, chipName, dims, k.counter)
		if perHost[h] != v {
			t.Errorf("device %s consumes %d of %s, but covers %d chips of host %v", d.Name, v, k.counter, perHost[h], h)
		}
	}
}

// hostOfCounter reads the host coordinates back from a counter name.
func hostOfCounter(t *testing.T, chipName string, dims int, name string) Coord {
	t.Helper()
	rest, ok := strings.CutPrefix(name, chipName+"-host-")
	if !ok {
		t.Fatalf("counter %q does not name a host", name)
	}
	parts := strings.Split(rest, "-")
	if len(parts) != dims {
		t.Fatalf("counter %q: want %d coordinates", name, dims)
	}
	var h Coord
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			t.Fatalf("counter %q: %v", name, err)
		}
		h[i] = n
	}
	return h
}
