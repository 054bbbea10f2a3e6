package central

import (
	resourcev1 "k8s.io/api/resource/v1"
)

// DriverSize is the size of the partition on one driver.
type DriverSize struct {
	// Total are its central devices.
	Total int
	// Allocated are those of them some allocation holds.
	Allocated int
}

// Size counts the central devices of each driver in the current
// generation of their pools (older generations are being replaced and
// would count devices twice), and those of them in allocated. Drivers
// without central devices are absent. A device allocated twice (shared)
// counts once; an allocated device that no current slice lists counts
// not at all, so Allocated never exceeds Total.
func Size(p *Partition, slices []*resourcev1.ResourceSlice, allocated map[DeviceID]bool) map[string]DriverSize {
	gen := map[PoolID]int64{}
	for _, s := range slices {
		if s == nil || !p.Central(s.Spec.Driver, s.Spec.Pool.Name, "") {
			continue
		}
		id := PoolID{Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name}
		if g, ok := gen[id]; !ok || s.Spec.Pool.Generation > g {
			gen[id] = s.Spec.Pool.Generation
		}
	}
	out := map[string]DriverSize{}
	seen := map[DeviceID]bool{}
	for _, s := range slices {
		if s == nil {
			continue
		}
		id := PoolID{Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name}
		if g, ok := gen[id]; !ok || s.Spec.Pool.Generation != g {
			continue
		}
		for _, d := range s.Spec.Devices {
			dev := DeviceID{Driver: id.Driver, Pool: id.Pool, Device: d.Name}
			if seen[dev] || !p.Central(dev.Driver, dev.Pool, dev.Device) {
				continue
			}
			seen[dev] = true
			n := out[id.Driver]
			n.Total++
			if allocated[dev] {
				n.Allocated++
			}
			out[id.Driver] = n
		}
	}
	return out
}

// AllocatedDevices are the devices the allocations hold.
func AllocatedDevices(allocations []*resourcev1.AllocationResult) map[DeviceID]bool {
	out := map[DeviceID]bool{}
	for _, a := range allocations {
		if a == nil {
			continue
		}
		for _, r := range a.Devices.Results {
			out[DeviceID{Driver: r.Driver, Pool: r.Pool, Device: r.Device}] = true
		}
	}
	return out
}
