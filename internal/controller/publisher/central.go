package publisher

import (
	"slices"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/central"
)

// TaintCentral puts the operator's central taint (central.Taint) into
// every device of the desired pools that spec.claims.central makes
// central: an entry for the driver with no pools (the whole driver) or
// naming the pool. Entries with a nodeSelector select node-local pools
// only, never these node-less ones. The taint travels in the slice, so
// the devices are central from the moment they exist, also on clusters
// that do not serve DeviceTaintRule, and kube-scheduler never sees them
// untainted. The pools' device lists are copied before they change.
func TaintCentral(d *Desired, entries []v1alpha1.CentralDevices) {
	for driver, pools := range d.Drivers {
		for name, p := range pools {
			if !centralPool(entries, driver, name) {
				continue
			}
			for i := range p.Slices {
				devs := slices.Clone(p.Slices[i].Devices)
				for j := range devs {
					devs[j].Taints = append(slices.Clone(devs[j].Taints), central.Taint())
				}
				p.Slices[i].Devices = devs
			}
			pools[name] = p
		}
	}
}

func centralPool(entries []v1alpha1.CentralDevices, driver, pool string) bool {
	for _, e := range entries {
		if e.Driver == driver && e.NodeSelector == nil && (len(e.Pools) == 0 || slices.Contains(e.Pools, pool)) {
			return true
		}
	}
	return false
}
