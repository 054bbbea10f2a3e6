package explain

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/native"
	"github.com/drastack/drastack/internal/pool"
)

// facts is what the pool model knows about the state that the engine does
// not keep: who holds a device and counter balances in their own units.
// It only describes; whether a device is a candidate is the engine's call.
type facts struct {
	ledger  *pool.Ledger
	devices map[native.DeviceRef]*resourceapi.Device
	// names maps the ledger's claim keys (UIDs, for claims read from the
	// API server) to namespace/name, which is what a reader can look up.
	names map[string]string
	// namespace, when set, is the only namespace whose holders are named
	// (Options.Namespace).
	namespace string
}

func newFacts(in allocator.Inputs) *facts {
	f := &facts{ledger: pool.NewLedger(), devices: map[native.DeviceRef]*resourceapi.Device{}, names: map[string]string{}}
	for _, p := range pool.Group(in.Slices) {
		f.ledger.SetPool(p)
		for _, d := range p.Devices {
			f.devices[native.DeviceRef{Driver: p.Driver, Pool: p.ID.Pool, Device: d.Device.Name}] = d.Device
		}
	}
	for _, c := range in.Allocated {
		f.ledger.AddClaim(c)
		f.names[pool.ClaimKey(c)] = allocator.ClaimKey(c)
	}
	return f
}

// holders are the claims that hold any of devs; with namespace set, the
// claims of other namespaces are counted, not named.
func (f *facts) holders(devs []native.DeviceRef, namespace string) []string {
	var out []string
	others := map[string]bool{}
	for _, d := range devs {
		_, _, claims := f.ledger.Holders(pool.ID{Driver: d.Driver, Pool: d.Pool}, d.Device)
		for _, k := range claims {
			if n, ok := f.names[k]; ok {
				k = n
			}
			if namespace != "" && !strings.HasPrefix(k, namespace+"/") {
				others[k] = true
				continue
			}
			out = append(out, k)
		}
	}
	out = sortedUnique(out)
	switch n := len(others); {
	case n == 1:
		out = append(out, "1 claim of another namespace")
	case n > 1:
		out = append(out, fmt.Sprintf("%d claims of other namespaces", n))
	}
	return out
}

// short lists, for devices the engine found short of counters, the
// counters whose balance is below what they need.
func (f *facts) short(devs []native.DeviceRef) []CounterShort {
	type key struct{ pool, set, counter string }
	found := map[key]int{}
	var out []CounterShort
	for _, d := range devs {
		dev := f.devices[d]
		u := f.ledger.Usage(pool.ID{Driver: d.Driver, Pool: d.Pool})
		if dev == nil || u == nil {
			continue
		}
		balances := u.Balances()
		for _, cc := range dev.ConsumesCounters {
			for name, need := range cc.Counters {
				for _, b := range balances {
					if b.CounterSet != cc.CounterSet || b.Counter != name {
						continue
					}
					left := b.Capacity.DeepCopy()
					left.Sub(b.Consumed)
					if left.Cmp(need.Value) >= 0 {
						continue
					}
					k := key{d.Driver + "/" + d.Pool, cc.CounterSet, name}
					i, ok := found[k]
					if !ok {
						i = len(out)
						found[k] = i
						out = append(out, CounterShort{Pool: k.pool, CounterSet: k.set, Counter: k.counter, Needed: need.Value.String(), Left: left.String()})
					}
					out[i].Devices++
					if q := resource.MustParse(out[i].Needed); need.Value.Cmp(q) > 0 {
						out[i].Needed = need.Value.String()
					}
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b CounterShort) int {
		return cmp.Or(cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.CounterSet, b.CounterSet), cmp.Compare(a.Counter, b.Counter))
	})
	return out
}
