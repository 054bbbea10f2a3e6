package simdriver

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// ProfileA100_40GB names the MIG profile table of an NVIDIA A100 40GB, as
// given in KEP-4815 ("Dynamic allocation of Multi-Instance GPUs").
const ProfileA100_40GB = "a100-40gb"

// migMemorySlices is how many memory slices an A100 40GB has; each MIG
// instance occupies a contiguous run of them.
const migMemorySlices = 8

// migProfile is one row of the KEP-4815 A100 40GB table plus where on the
// memory-slice axis instances of it may start (the layout diagram next to
// the table). Start positions past the last one that fits are the "X"
// cells of that diagram.
type migProfile struct {
	name            string // as NVIDIA writes it, e.g. "1g.5gb+me"
	memory          string // quantity
	memorySlices    int
	multiprocessors int64
	copyEngines     int64
	decoders        int64
	encoders        int64
	jpegEngines     int64
	ofaEngines      int64
	starts          []int
}

// a100Profiles is the table, largest profile first.
var a100Profiles = []migProfile{
	{name: "7g.40gb", memory: "40192Mi", memorySlices: 8, multiprocessors: 98, copyEngines: 7, decoders: 5, jpegEngines: 1, ofaEngines: 1, starts: []int{0}},
	{name: "4g.20gb", memory: "19968Mi", memorySlices: 4, multiprocessors: 56, copyEngines: 4, decoders: 2, starts: []int{0}},
	{name: "3g.20gb", memory: "19968Mi", memorySlices: 4, multiprocessors: 42, copyEngines: 3, decoders: 2, starts: []int{0, 4}},
	{name: "2g.10gb", memory: "9856Mi", memorySlices: 2, multiprocessors: 28, copyEngines: 2, decoders: 1, starts: []int{0, 2, 4}},
	{name: "1g.10gb", memory: "9856Mi", memorySlices: 2, multiprocessors: 14, copyEngines: 1, decoders: 1, starts: []int{0, 2, 4, 6}},
	{name: "1g.5gb+me", memory: "4864Mi", memorySlices: 1, multiprocessors: 14, copyEngines: 1, decoders: 1, jpegEngines: 1, ofaEngines: 1, starts: []int{0, 1, 2, 3, 4, 5, 6}},
	{name: "1g.5gb", memory: "4864Mi", memorySlices: 1, multiprocessors: 14, copyEngines: 1, starts: []int{0, 1, 2, 3, 4, 5, 6}},
}

// The whole A100 40GB: what its counter set holds and what the full-GPU
// device consumes. Encoders are left out: the A100 has none and no profile
// uses one.
const (
	a100Memory          = "40Gi"
	a100Multiprocessors = 98
	a100CopyEngines     = 7
	a100Decoders        = 5
	a100JPEGEngines     = 1
	a100OFAEngines      = 1
)

// Counter names. Counters must be DNS labels, so the KEP's camel-case
// "memorySlice0" becomes "memory-slice-0".
const (
	counterMemory          = "memory"
	counterMultiprocessors = "multiprocessors"
	counterCopyEngines     = "copy-engines"
	counterDecoders        = "decoders"
	counterJPEGEngines     = "jpeg-engines"
	counterOFAEngines      = "ofa-engines"
)

func memorySliceCounter(i int) string { return fmt.Sprintf("memory-slice-%d", i) }

// dnsProfile turns a profile name into a DNS-label fragment for device
// names: "1g.5gb+me" -> "1g-5gb-me".
func dnsProfile(name string) string {
	return strings.NewReplacer(".", "-", "+", "-").Replace(name)
}

// a100CounterSet returns the counters of one whole A100 40GB.
func a100CounterSet() map[string]resource.Quantity {
	c := map[string]resource.Quantity{
		counterMemory:          resource.MustParse(a100Memory),
		counterMultiprocessors: *resource.NewQuantity(a100Multiprocessors, resource.DecimalSI),
		counterCopyEngines:     *resource.NewQuantity(a100CopyEngines, resource.DecimalSI),
		counterDecoders:        *resource.NewQuantity(a100Decoders, resource.DecimalSI),
		counterJPEGEngines:     *resource.NewQuantity(a100JPEGEngines, resource.DecimalSI),
		counterOFAEngines:      *resource.NewQuantity(a100OFAEngines, resource.DecimalSI),
	}
	for i := range migMemorySlices {
		c[memorySliceCounter(i)] = *resource.NewQuantity(1, resource.DecimalSI)
	}
	return c
}

// consumption is what one instance of the profile starting at memory slice
// start takes from its GPU's counter set. Zero amounts are left out: they
// constrain nothing.
func (p migProfile) consumption(start int) map[string]resource.Quantity {
	c := map[string]resource.Quantity{
		counterMemory: resource.MustParse(p.memory),
	}
	for name, v := range map[string]int64{
		counterMultiprocessors: p.multiprocessors,
		counterCopyEngines:     p.copyEngines,
		counterDecoders:        p.decoders,
		counterJPEGEngines:     p.jpegEngines,
		counterOFAEngines:      p.ofaEngines,
	} {
		if v > 0 {
			c[name] = *resource.NewQuantity(v, resource.DecimalSI)
		}
	}
	for i := start; i < start+p.memorySlices; i++ {
		c[memorySliceCounter(i)] = *resource.NewQuantity(1, resource.DecimalSI)
	}
	return c
}
