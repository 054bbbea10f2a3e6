package pool

import (
	"cmp"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
)

// DefaultPartitionAttribute is the device attribute that names a device's
// partition type when its slice sets no partitionTypeAttribute: "profile"
// in the driver's own domain. NVIDIA's GPU driver publishes MIG devices
// with it ("1g.5gb"), and so do the simulated drivers of this project.
// Upstream's ResourcePoolStatusRequest lets the caller name a default; a
// DevicePool has no caller, so the operator picks the one attribute in
// common use and says so in the summary's attribute field.
const DefaultPartitionAttribute = "profile"

// PartitionType is one partition type of a pool: the attribute that names
// it (fully qualified) and its value.
type PartitionType struct {
	Attribute string
	Type      string
}

// PartitionReport counts the devices of one partition type.
type PartitionReport struct {
	PartitionType
	// Total devices of the type.
	Total int
	// Allocatable devices of the type: available right now (see
	// Availability.Available).
	Allocatable int
}

// partitionOf returns the partition type of a partitionable device (one
// that consumes counters): the string value of its slice's
// partitionTypeAttribute, or of DefaultPartitionAttribute in the driver's
// domain when the slice sets none. Devices without that attribute have no
// partition type and are left out of the summary.
func partitionOf(d *Device, driver, defaultAttr string) (PartitionType, bool) {
	attr := defaultAttr
	if a := d.Slice.Spec.PartitionTypeAttribute; a != nil && *a != "" {
		attr = string(*a)
	}
	v, ok := d.Device.Attributes[resourceapi.QualifiedName(attr)]
	if !ok && len(attr) > len(driver)+1 && attr[:len(driver)+1] == driver+"/" {
		// An attribute of the driver's own domain may be published
		// without the domain.
		v, ok = d.Device.Attributes[resourceapi.QualifiedName(attr[len(driver)+1:])]
	}
	if !ok || v.StringValue == nil {
		return PartitionType{}, false
	}
	return PartitionType{Attribute: attr, Type: *v.StringValue}, true
}

// addPartition records device i's partition type.
func (t *counterTable) addPartition(p *Pool, i int) {
	if t.defaultAttr == "" {
		t.defaultAttr = p.Driver + "/" + DefaultPartitionAttribute
	}
	pt, ok := partitionOf(&p.Devices[i], p.Driver, t.defaultAttr)
	if !ok {
		return
	}
	if t.partition == nil {
		t.partition = make([]int32, len(p.Devices))
	}
	k := slices.Index(t.partitions, pt)
	if k < 0 {
		k = len(t.partitions)
		t.partitions = append(t.partitions, pt)
	}
	t.partition[i] = int32(k) + 1
}

func comparePartitions(a, b PartitionReport) int {
	return cmp.Or(cmp.Compare(a.Attribute, b.Attribute), cmp.Compare(a.Type, b.Type))
}
