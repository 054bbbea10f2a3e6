package ledger

import (
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
)

// Version is a resourceVersion read as the etcd revision it is, so that
// two versions of one object compare; 0 means unknown. The protocol only
// ever compares versions of one object, except for the fence (package
// fence), which compares a claim's version with the fence's: both are
// revisions of one etcd.
type Version uint64

// ParseVersion reads a resourceVersion; an empty or non-numeric one (a
// storage that is not etcd) is 0, which never counts as newer than
// anything, so evidence that needs an order is then never taken from it.
func ParseVersion(rv string) Version {
	v, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return 0
	}
	return Version(v)
}

// newer reports whether a is known to come after b.
func newer(a, b Version) bool { return a != 0 && a > b }

// SameAllocation reports whether two allocations give the same devices to
// the same requests: what a write's evidence is compared with. The rest
// (node selector, timestamp, config) follows from the devices and the
// writer; the API server may also default fields a client did not set.
func SameAllocation(a, b *resourceapi.AllocationResult) bool {
	if a == nil || b == nil {
		return a == b
	}
	if len(a.Devices.Results) != len(b.Devices.Results) {
		return false
	}
	for i := range a.Devices.Results {
		x, y := &a.Devices.Results[i], &b.Devices.Results[i]
		if x.Request != y.Request || x.Driver != y.Driver || x.Pool != y.Pool || x.Device != y.Device {
			return false
		}
		if (x.ShareID == nil) != (y.ShareID == nil) || (x.ShareID != nil && *x.ShareID != *y.ShareID) {
			return false
		}
	}
	return true
}
