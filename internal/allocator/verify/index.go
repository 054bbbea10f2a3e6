package verify

import (
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/pool"
)

// deviceID names a device the way allocation results do.
type deviceID struct{ driver, pool, device string }

func (d deviceID) String() string { return d.driver + "/" + d.pool + "/" + d.device }

func resultID(r *resourceapi.DeviceRequestAllocationResult) deviceID {
	return deviceID{r.Driver, r.Pool, r.Device}
}

// counterUse is an amount per counter set and counter.
type counterUse map[string]map[string]resource.Quantity

func (u counterUse) add(cs []resourceapi.DeviceCounterConsumption) {
	for _, c := range cs {
		set := u[c.CounterSet]
		if set == nil {
			set = map[string]resource.Quantity{}
			u[c.CounterSet] = set
		}
		for name, v := range c.Counters {
			q := set[name]
			q.Add(v.Value)
			set[name] = q
		}
	}
}

// New indexes in for checking. Pools come from the shared pool model; only
// current-generation devices are indexed, so a device of a stale slice is
// "missing".
func New(in allocator.Inputs) *Checker {
	c := &Checker{
		in:       in,
		features: allocator.FeaturesOf(in.Features),
		pools:    map[pool.ID]*pool.Pool{},
		devices:  map[deviceID]*pool.Device{},
		classes:  map[string]*resourceapi.DeviceClass{},
		nodes:    map[string]*corev1.Node{},
		inUse:    map[deviceID]string{},
		shares:   map[deviceID][]*resourceapi.DeviceRequestAllocationResult{},
		consumed: map[pool.ID]counterUse{},
	}
	for _, p := range pool.Group(in.Slices) {
		c.pools[p.ID] = p
		for i := range p.Devices {
			d := &p.Devices[i]
			id := deviceID{p.Driver, p.Pool, d.Device.Name}
			if _, dup := c.devices[id]; !dup {
				c.devices[id] = d
			}
		}
	}
	for _, cl := range in.Classes {
		if cl != nil {
			c.classes[cl.Name] = cl
		}
	}
	for _, n := range in.Nodes {
		if n != nil {
			c.nodes[n.Name] = n
		}
	}
	for _, claim := range in.Allocated {
		if claim == nil || claim.Status.Allocation == nil {
			continue
		}
		for i := range claim.Status.Allocation.Devices.Results {
			r := &claim.Status.Allocation.Devices.Results[i]
			if ptr.Deref(r.AdminAccess, false) {
				continue
			}
			id := resultID(r)
			_, charged := c.inUse[id]
			charged = charged || len(c.shares[id]) > 0
			if r.ShareID != nil {
				c.shares[id] = append(c.shares[id], r)
			} else {
				c.inUse[id] = allocator.ClaimKey(claim)
			}
			// A device's counters count once, however many claims hold it.
			if d, ok := c.devices[id]; ok && !charged {
				c.consumedBy(pool.ID{Driver: r.Driver, Pool: r.Pool}).add(d.Device.ConsumesCounters)
			}
		}
	}
	return c
}

func (c *Checker) consumedBy(id pool.ID) counterUse {
	u := c.consumed[id]
	if u == nil {
		u = counterUse{}
		c.consumed[id] = u
	}
	return u
}
