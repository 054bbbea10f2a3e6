package simdriver

import (
	"crypto/sha256"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Attribute names. Names without a domain belong to the driver's domain.
const (
	attrType           resourceapi.QualifiedName = "type"
	attrModel          resourceapi.QualifiedName = "model"
	attrUUID           resourceapi.QualifiedName = "uuid"
	attrIndex          resourceapi.QualifiedName = "index"
	attrDriverVersion  resourceapi.QualifiedName = "driverVersion"
	attrProfile        resourceapi.QualifiedName = "profile"
	attrParentUUID     resourceapi.QualifiedName = "parentUUID"
	attrPlacementStart resourceapi.QualifiedName = "placementStart"
	attrPlacementSize  resourceapi.QualifiedName = "placementSize"
	attrInterface      resourceapi.QualifiedName = "interface"
	attrRDMA           resourceapi.QualifiedName = "rdma"
	attrNUMANode       resourceapi.QualifiedName = "numaNode"
)

// Capacity names (C identifiers, unlike counter names).
const (
	capMemory          resourceapi.QualifiedName = "memory"
	capMultiprocessors resourceapi.QualifiedName = "multiprocessors"
	capCopyEngines     resourceapi.QualifiedName = "copyEngines"
	capDecoders        resourceapi.QualifiedName = "decoders"
	capEncoders        resourceapi.QualifiedName = "encoders"
	capJPEGEngines     resourceapi.QualifiedName = "jpegEngines"
	capOFAEngines      resourceapi.QualifiedName = "ofaEngines"
	capBandwidth       resourceapi.QualifiedName = "bandwidth"
	capCores           resourceapi.QualifiedName = "cores"
)

// simDriverVersion is what every simulated device reports as driverVersion,
// so that version selectors have something to compare.
const simDriverVersion = "1.0.0"

func stringAttr(s string) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{StringValue: &s}
}

func stringsAttr(s []string) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{StringValues: append([]string(nil), s...)}
}

func intAttr(i int) resourceapi.DeviceAttribute {
	v := int64(i)
	return resourceapi.DeviceAttribute{IntValue: &v}
}

func boolAttr(b bool) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{BoolValue: &b}
}

func versionAttr(v string) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{VersionValue: &v}
}

func capacity(q resource.Quantity) resourceapi.DeviceCapacity {
	return resourceapi.DeviceCapacity{Value: q}
}

func count(n int64) resource.Quantity {
	return *resource.NewQuantity(n, resource.DecimalSI)
}

// pcieRootName formats root r as a PCIe root complex, pci<domain>:<bus>,
// spacing the buses as real machines do.
func pcieRootName(r int) string {
	return fmt.Sprintf("pci0000:%02x", r*8)
}

// stableUUID derives a UUID-shaped identifier from its parts, so that a
// device keeps its identity across restarts of the sim.
func stableUUID(prefix string, parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	b := h.Sum(nil)
	return fmt.Sprintf("%s-%x-%x-%x-%x-%x", prefix, b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
