package topology

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/util/validation"
)

// shapeInfo is one allowed shape with everything Generate derives from it.
type shapeInfo struct {
	name string // canonical spelling, "2x4"
	size Coord  // chips per dimension
	// hostSpan is the hosts a placement covers per dimension (1 along a
	// dimension where the shape stays inside a host).
	hostSpan Coord
	// partial is true when the shape covers only part of its hosts.
	partial bool
	// chipsPerHost is the chips a placement covers on each of its hosts.
	chipsPerHost int
	chips        int // chips per placement
	hosts        int // hosts per placement
	placements   int // placements on the full grid
}

// plan is a validated Spec in the form Generate works with.
type plan struct {
	spec     *Spec
	dims     int
	hostGrid Coord // hosts per dimension (1 beyond dims)
	cph      Coord // chips per host per dimension (1 beyond dims)
	chipGrid Coord // chips per dimension (1 beyond dims)
	// shapes, smallest first (chips, then size per dimension).
	shapes     []shapeInfo
	prefix     string
	chipName   string
	hostChips  int // chips of one host
	policy     MissingHostPolicy
	extras     map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
	extraVals  int // attribute values the extras count toward the per-device limit
	ownAttrs   int // attributes this package writes on every device
	ownScalars int // the scalar ones among them, one attribute value each
}

// Limits of resource.k8s.io/v1 that constrain the pool, named after their
// API constants so that they move with the API.
const (
	maxCountersPerSet         = resourceapi.ResourceSliceMaxCountersPerCounterSet
	maxCounterSetsPerSlice    = resourceapi.ResourceSliceMaxCounterSets
	maxConsumptionsPerDevice  = resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice
	maxCountersPerConsumption = resourceapi.ResourceSliceMaxCountersPerDeviceCounterConsumption
	maxDevicesPerSlice        = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
	maxAttrsAndCapacities     = resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice
	maxAttributeValues        = resourceapi.ResourceSliceMaxAttributeValuesPerDevice
	maxAttributeValueLength   = resourceapi.DeviceAttributeMaxValueLength
	maxDNSLabel               = validation.DNS1123LabelMaxLength
	maxIDLength               = resourceapi.DeviceMaxIDLength
	maxDomainLength           = resourceapi.DeviceMaxDomainLength
)

// newPlan validates spec and derives the plan. The error lists every
// reason the spec is invalid, each naming the field (and shape) at fault.
func newPlan(spec *Spec) (*plan, error) {
	p := &plan{spec: spec}
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	// Names.
	if spec.Driver == "" {
		add("driver: required")
	} else if msgs := content.IsDNS1123Subdomain(spec.Driver); len(msgs) > 0 || len(spec.Driver) > resourceapi.DriverNameMaxLength {
		add("driver %q: must be a lower-case DNS subdomain of at most %d characters", spec.Driver, resourceapi.DriverNameMaxLength)
	}
	if err := checkPoolName(spec.Pool); err != nil {
		add("pool: %w", err)
	}
	switch {
	case spec.Domain == "":
		add("domain: required (it is the value of the %q attribute)", AttrDomain)
	case len(spec.Domain) > maxAttributeValueLength:
		add("domain %q: longer than %d characters, the limit for an attribute value", spec.Domain, maxAttributeValueLength)
	}
	p.prefix = spec.DeviceNamePrefix
	if p.prefix == "" && spec.Driver != "" {
		p.prefix, _, _ = strings.Cut(spec.Driver, ".")
	}
	// Without a driver there is no default prefix; that is reported above.
	if p.prefix != "" || spec.Driver != "" {
		if msgs := content.IsDNS1123Label(p.prefix); len(msgs) > 0 {
			add("device name prefix %q: must be a DNS label: %s", p.prefix, strings.Join(msgs, "; "))
		}
	}
	p.chipName = spec.ChipName
	if p.chipName == "" {
		p.chipName = DefaultChipName
	}
	if !isLowerAlnum(p.chipName) || len(p.chipName) > maxIDLength {
		add("chip name %q: must be lower-case letters and digits starting with a letter, at most %d characters (it names a capacity and prefixes counter names)", p.chipName, maxIDLength)
	}
	p.policy = spec.MissingHosts
	if p.policy == "" {
		p.policy = Withhold
	}
	if p.policy != Withhold && p.policy != PublishAvailable {
		add("missing hosts policy %q: want %s or %s", spec.MissingHosts, Withhold, PublishAvailable)
	}

	// Grid.
	gridOK := true
	if err := checkGrid("host grid", spec.HostGrid); err != nil {
		errs = append(errs, err)
		gridOK = false
	}
	if err := checkGrid("chips per host", spec.ChipsPerHost); err != nil {
		errs = append(errs, err)
		gridOK = false
	}
	if gridOK && len(spec.ChipsPerHost) != len(spec.HostGrid) {
		add("chips per host %v has %d dimensions but the host grid %v has %d", spec.ChipsPerHost, len(spec.ChipsPerHost), spec.HostGrid, len(spec.HostGrid))
		gridOK = false
	}
	if gridOK {
		p.dims = len(spec.HostGrid)
		p.hostGrid, p.cph, p.chipGrid = Coord{1, 1, 1}, Coord{1, 1, 1}, Coord{1, 1, 1}
		hosts, hostChips := 1, 1
		for d := 0; d < p.dims; d++ {
			p.hostGrid[d] = spec.HostGrid[d]
			p.cph[d] = spec.ChipsPerHost[d]
			p.chipGrid[d] = spec.HostGrid[d] * spec.ChipsPerHost[d]
			// Both factors are below maxAxis, so these stay far from overflow.
			hosts *= spec.HostGrid[d]
			hostChips *= spec.ChipsPerHost[d]
		}
		p.hostChips = hostChips
		if hosts > MaxHosts {
			add("host grid %v: more than %d hosts", spec.HostGrid, MaxHosts)
			gridOK = false
		}
		if hostChips > MaxChipsPerHost {
			add("chips per host %v: more than %d chips per host", spec.ChipsPerHost, MaxChipsPerHost)
			gridOK = false
		}
	}

	// Extra attributes; their count matters for the shape checks below.
	p.ownAttrs, p.ownScalars = 4, 4 // shape, origin, chips, domain
	if !spec.OmitHostsAttribute {
		p.ownAttrs++
	}
	if spec.Driver != "" {
		extras, vals, aerrs := checkExtraAttributes(spec.Driver, spec.Attributes)
		errs = append(errs, aerrs...)
		p.extras, p.extraVals = extras, vals
		// The capacity counts toward the same limit as the attributes.
		if n := p.ownAttrs + len(extras) + 1; n > maxAttrsAndCapacities {
			add("attributes: %d extra attributes give %d attributes and capacities per device, more than the limit of %d (ResourceSliceMaxAttributesAndCapacitiesPerDevice)",
				len(extras), n, maxAttrsAndCapacities)
		}
	}

	// Shapes.
	if len(spec.Partitions) == 0 {
		add("partitions: at least one shape is required")
	}
	if gridOK {
		errs = append(errs, p.addShapes(spec.Partitions)...)
		var lastHost Coord
		for d := 0; d < p.dims; d++ {
			lastHost[d] = p.hostGrid[d] - 1
		}
		if name := counterSetName(p.prefix, lastHost, p.dims); len(name) > maxDNSLabel {
			add("counter set names such as %q are longer than %d characters; use a shorter DeviceNamePrefix", name, maxDNSLabel)
		}
		if name := counterName(p.chipName, lastHost, p.dims); len(name) > maxDNSLabel {
			add("counter names such as %q are longer than %d characters; use a shorter ChipName", name, maxDNSLabel)
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("invalid multi-host spec for pool %q: %w", spec.Pool, errors.Join(errs...))
	}
	return p, nil
}

// addShapes parses, checks and orders the partition shapes.
func (p *plan) addShapes(partitions []string) []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	seen := map[string]bool{}
	devices := 0
	for _, s := range partitions {
		size, err := ParseShape(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("partitions: %w", err))
			continue
		}
		if len(size) != p.dims {
			add("partition %s: has %d dimensions but the grid has %d", s, len(size), p.dims)
			continue
		}
		si, serrs := p.shape(toCoord(size))
		if len(serrs) > 0 {
			errs = append(errs, serrs...)
			continue
		}
		if seen[si.name] {
			add("partition %s: listed twice", si.name)
			continue
		}
		seen[si.name] = true
		devices += si.placements
		p.shapes = append(p.shapes, si)
	}
	if devices > MaxDevices {
		add("partitions: %d placements in all, more than the bound of %d devices per pool", devices, MaxDevices)
	}
	var partial []string
	for _, si := range p.shapes {
		if si.partial {
			partial = append(partial, si.name)
		}
	}
	if len(partial) > 1 {
		add("partitions %s: each covers only part of a host (chips per host %s); with one chip counter per host, two such shapes could overlap on a chip and still be allocated together, so at most one partial shape is allowed",
			strings.Join(partial, ", "), formatShape(p.cph, p.dims))
	}
	slices.SortFunc(p.shapes, func(a, b shapeInfo) int {
		if a.chips != b.chips {
			return a.chips - b.chips
		}
		return slices.Compare(a.size[:], b.size[:])
	})
	return errs
}

// shape derives a shapeInfo and checks the alignment rule and the limits
// that depend on one shape alone.
func (p *plan) shape(size Coord) (shapeInfo, []error) {
	var errs []error
	si := shapeInfo{name: formatShape(size, p.dims), size: size, chipsPerHost: 1, chips: 1, hosts: 1, placements: 1}
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("partition %s: "+format, append([]any{si.name}, args...)...))
	}
	for d := 0; d < MaxDims; d++ {
		if d >= p.dims {
			si.size[d], si.hostSpan[d] = 1, 1
			continue
		}
		z, c, g := size[d], p.cph[d], p.chipGrid[d]
		switch {
		case z > g:
			add("%d chips along dimension %d, but the grid has %d", z, d, g)
			continue
		case g%z != 0:
			add("%d chips along dimension %d do not divide the grid's %d evenly", z, d, g)
			continue
		case z%c == 0:
			si.hostSpan[d] = z / c
			si.chipsPerHost *= c
		case c%z == 0:
			si.hostSpan[d] = 1
			si.chipsPerHost *= z
			si.partial = true
		default:
			add("%d chips along dimension %d is neither a multiple nor a divisor of the %d chips per host, so some placements would straddle hosts", z, d, c)
			continue
		}
		si.chips *= z
		si.hosts *= si.hostSpan[d]
		si.placements *= g / z
	}
	if len(errs) > 0 {
		return si, errs
	}
	// Limits that one shape alone can break.
	if limit := maxConsumptionsPerDevice * maxCountersPerConsumption; si.hosts > limit {
		add("spans %d hosts, but a device can consume at most %d counters (%d counter sets x %d counters, ResourceSliceMaxDeviceCounterConsumptionsPerDevice x ResourceSliceMaxCountersPerDeviceCounterConsumption) and every host is one counter",
			si.hosts, limit, maxConsumptionsPerDevice, maxCountersPerConsumption)
	}
	if !p.spec.OmitHostsAttribute {
		if n := p.ownScalars + p.extraVals + si.hosts; n > maxAttributeValues {
			add("spans %d hosts; with the %q list attribute a device would carry %d attribute values, more than the limit of %d (ResourceSliceMaxAttributeValuesPerDevice); set OmitHostsAttribute or use fewer extra attributes",
				si.hosts, AttrHosts, n, maxAttributeValues)
		}
	}
	var lastOrigin Coord
	for d := 0; d < p.dims; d++ {
		lastOrigin[d] = p.chipGrid[d] - si.size[d]
	}
	if name := deviceName(p.prefix, si.name, lastOrigin, p.dims); len(name) > maxDNSLabel {
		add("device names such as %q are longer than %d characters; use a shorter DeviceNamePrefix", name, maxDNSLabel)
	}
	return si, errs
}

// checkGrid checks a per-dimension size list.
func checkGrid(what string, v []int) error {
	if len(v) < 1 || len(v) > MaxDims {
		return fmt.Errorf("%s %v: want 1 to %d dimensions", what, v, MaxDims)
	}
	for d, n := range v {
		if n < 1 || n >= maxAxis {
			return fmt.Errorf("%s %v: dimension %d must be between 1 and %d", what, v, d, maxAxis-1)
		}
	}
	return nil
}

// checkPoolName applies the API's rule for pool names: at most 253
// characters, DNS subdomains separated by "/".
func checkPoolName(name string) error {
	if name == "" {
		return fmt.Errorf("required")
	}
	if len(name) > resourceapi.PoolNameMaxLength {
		return fmt.Errorf("%q is longer than %d characters", name, resourceapi.PoolNameMaxLength)
	}
	for _, part := range strings.Split(name, "/") {
		if msgs := content.IsDNS1123Subdomain(part); len(msgs) > 0 {
			return fmt.Errorf("%q: %q is not a DNS subdomain: %s", name, part, strings.Join(msgs, "; "))
		}
	}
	return nil
}

// isLowerAlnum reports whether s is a letter followed by lower-case letters
// and digits: valid both as a C identifier and inside a DNS label.
func isLowerAlnum(s string) bool {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !(s[i] >= 'a' && s[i] <= 'z' || s[i] >= '0' && s[i] <= '9') {
			return false
		}
	}
	return true
}
