package topology

import (
	"fmt"
	"hash/fnv"
	"strings"
)

// Names of the objects Generate writes. They are derived from grid
// positions, never from node names, so that replacing the node at a
// position changes only the node selection of its devices.

// deviceName is "<prefix>-<shape>-at-<origin in chips>", e.g.
// "tpu-2x4-at-0-4": unique per pool because placements of one shape never
// share an origin, and readable as where the partition sits.
func deviceName(prefix, shape string, origin Coord, dims int) string {
	return prefix + "-" + shape + "-at-" + origin.join(dims, "-")
}

// counterName is the counter of one host, "<chip>-host-<host coords>".
func counterName(chipName string, host Coord, dims int) string {
	return chipName + "-host-" + host.join(dims, "-")
}

// counterSetName is the set of one block of hosts, named after the block's
// first host: "<prefix>-hosts-<host coords>".
func counterSetName(prefix string, firstHost Coord, dims int) string {
	return prefix + "-hosts-" + firstHost.join(dims, "-")
}

// maxObjectName is the length limit of a DNS subdomain (object names).
const maxObjectName = 253

// sliceName is "<pool>-<kind>-<index>". The index is zero-padded to the
// width of the largest index so that sorting by name keeps slice order,
// which first-fit allocators follow. A pool name may contain "/", which an
// object name may not; it becomes "-". A name that would be too long is
// cut and made unique again with a hash of the pool name.
//
// These names make the slices self-contained (tests, golden files, kubectl
// apply). The resourceslice library that the publisher uses assigns its own
// names when it writes the slices, keeping their order.
func sliceName(pool, kind string, index, count int) string {
	width := len(fmt.Sprint(max(count-1, 0)))
	suffix := fmt.Sprintf("-%s-%0*d", kind, width, index)
	base := strings.ReplaceAll(pool, "/", "-")
	if len(base)+len(suffix) > maxObjectName {
		h := fnv.New32a()
		_, _ = h.Write([]byte(pool))
		tag := fmt.Sprintf("-%08x", h.Sum32())
		base = strings.TrimRight(base[:maxObjectName-len(suffix)-len(tag)], ".-")
		base += tag
	}
	return base + suffix
}
