package topology

import (
	resourceapi "k8s.io/api/resource/v1"
)

// MissingHostPolicy says what to publish when grid positions have no usable
// host (a node is down, not labelled yet, or its labels are wrong).
type MissingHostPolicy string

const (
	// Withhold publishes nothing for the pool until every position has a
	// host: a partial pool is never visible. This is the default because
	// it is the one that cannot surprise a scheduler.
	Withhold MissingHostPolicy = "Withhold"
	// PublishAvailable publishes the devices whose hosts all exist, and
	// counters for the hosts that exist.
	PublishAvailable MissingHostPolicy = "PublishAvailable"
)

// Spec describes one multi-host pool. It is independent of the DRAStack
// CRD so that the publisher, the bench harness and tests can all build one;
// the publisher maps DRAStack.spec.multiHost plus the nodes of one domain
// onto it.
type Spec struct {
	// Driver is the DRA driver name of the slices and the domain of the
	// attributes and capacity this package writes. Required.
	Driver string
	// Pool is the pool name: DNS subdomains separated by "/". Required.
	Pool string
	// Domain is the value of the "domain" attribute, usually the value of
	// the node label that groups hosts into pools, so that a claim can ask
	// for devices of one interconnect domain. Required.
	Domain string

	// HostGrid is the number of hosts along each dimension (1 to 3
	// dimensions).
	HostGrid []int
	// ChipsPerHost is the number of chips each host has along each
	// dimension; it must have as many dimensions as HostGrid.
	ChipsPerHost []int
	// Partitions are the allowed shapes in chips, e.g. "2x4". See the
	// package documentation for the alignment rule.
	Partitions []string

	// Attributes are added to every device. A name without a domain belongs
	// to the driver's domain, as in the API; names that this package writes
	// itself (shape, origin, chips, domain, hosts) are rejected.
	Attributes map[resourceapi.QualifiedName]resourceapi.DeviceAttribute

	// Hosts are the nodes at their grid positions (see BuildHosts).
	Hosts HostMap
	// MissingHosts says what to publish when a position has no host.
	// Empty means Withhold.
	MissingHosts MissingHostPolicy

	// DeviceNamePrefix starts every device name and counter set name
	// ("tpu" gives "tpu-2x4-at-0-4"). Empty means the first label of
	// Driver ("tpu" for "tpu.example.com").
	DeviceNamePrefix string
	// ChipName names the capacity of every device and prefixes the per-host
	// counters ("tpus" gives capacity "tpus" and counter "tpus-host-0-1").
	// Lower-case letters and digits, starting with a letter. Empty means
	// "chips".
	ChipName string
	// OmitHostsAttribute leaves out the list-valued "hosts" attribute. List
	// attributes need the DRAListTypeAttributes feature gate (alpha in
	// 1.37), and a device can carry at most 48 attribute values, which caps
	// the hosts a device may span while the list is published.
	OmitHostsAttribute bool
}

// Attribute names written on every device, in the driver's domain.
const (
	// AttrShape is the partition shape in chips, e.g. "2x4".
	AttrShape resourceapi.QualifiedName = "shape"
	// AttrOrigin is the first chip of the placement, in chips, with the
	// coordinates syntax ("0.4").
	AttrOrigin resourceapi.QualifiedName = "origin"
	// AttrChips is the number of chips of the device.
	AttrChips resourceapi.QualifiedName = "chips"
	// AttrDomain is Spec.Domain.
	AttrDomain resourceapi.QualifiedName = "domain"
	// AttrHosts lists the node names the device spans (a list of strings),
	// in grid order.
	AttrHosts resourceapi.QualifiedName = "hosts"
)

// reservedAttributes are the names an extra attribute may not take.
var reservedAttributes = []resourceapi.QualifiedName{AttrShape, AttrOrigin, AttrChips, AttrDomain, AttrHosts}

// DefaultChipName is the ChipName used when Spec.ChipName is empty.
const DefaultChipName = "chips"

// Hard bounds that keep Generate's work and output finite whatever the
// input. They are far above real topologies (the largest TPU pods have a
// few thousand hosts) and exist so that a typo cannot make the publisher
// allocate without bound.
const (
	// MaxHosts is the largest number of grid positions.
	MaxHosts = 1 << 14
	// MaxChipsPerHost is the largest number of chips of one host.
	MaxChipsPerHost = 1 << 12
	// MaxDevices is the largest number of devices a pool may have.
	MaxDevices = 1 << 16
)
