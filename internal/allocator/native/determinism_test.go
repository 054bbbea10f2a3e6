package native

import (
	"context"
	"fmt"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

// dynamicMIGNode is node n1 with eight identical H100-like GPUs, each with
// a counter set of its own (multiprocessors, copy engines, decoders,
// memory and eight memory slices) and every placement of the 1g, 2g, 3g
// and 7g profiles as a device consuming from it. Placements of the same
// profile on different GPUs are identical but for their names, so only a
// deterministic preference can tell them apart.
func dynamicMIGNode() []*resourceapi.ResourceSlice {
	type profile struct {
		name                   string
		sm, ce, dec, memGi, ms int
		starts                 []int
	}
	profiles := []profile{
		{"1g", 16, 1, 0, 10, 1, []int{0, 1, 2, 3, 4, 5, 6}},
		{"2g", 32, 2, 1, 20, 2, []int{0, 2, 4}},
		{"3g", 60, 3, 2, 40, 4, []int{0, 4}},
		{"7g", 132, 8, 7, 80, 8, []int{0}},
	}
	const gpus = 8
	var out []*resourceapi.ResourceSlice
	counters := poolSlice("n1-counters", "n1", gpus+1)
	for g := range gpus {
		set := fmt.Sprintf("gpu-%d", g)
		cs := counterSlice("", "n1", 1, set, map[string]string{
			"multiprocessors": "132", "copy-engines": "8", "decoders": "7", "memory": "80Gi",
			"memory-slice-0": "1", "memory-slice-1": "1", "memory-slice-2": "1", "memory-slice-3": "1",
			"memory-slice-4": "1", "memory-slice-5": "1", "memory-slice-6": "1", "memory-slice-7": "1",
		}).Spec.SharedCounters[0]
		counters.Spec.SharedCounters = append(counters.Spec.SharedCounters, cs)

		var devs []resourceapi.Device
		for _, p := range profiles {
			for _, start := range p.starts {
				use := map[string]string{
					"multiprocessors": fmt.Sprint(p.sm), "copy-engines": fmt.Sprint(p.ce),
					"decoders": fmt.Sprint(p.dec), "memory": fmt.Sprintf("%dGi", p.memGi),
				}
				for k := start; k < start+p.ms; k++ {
					use[fmt.Sprintf("memory-slice-%d", k)] = "1"
				}
				name := fmt.Sprintf("gpu-%d-mig-%s-%d", g, p.name, start)
				devs = append(devs, consumes(dev(name, "profile", p.name, "gpu", g), set, use))
			}
		}
		out = append(out, poolSlice(fmt.Sprintf("n1-gpu-%d", g), "n1", gpus+1, devs...))
	}
	out = append(out, counters)
	for _, s := range out {
		s.Spec.AllNodes, s.Spec.NodeName = nil, ptr.To("n1")
	}
	return out
}

// TestDeterministic allocates the same claims on the same snapshot twenty
// times, each with a new engine and session, and expects the same devices
// every time: preference among identical devices must depend neither on
// map iteration order nor on floating-point sums.
func TestDeterministic(t *testing.T) {
	claims := []*resourceapi.ResourceClaim{
		claim("a", req("r", 1, profile("1g"))),
		claim("b", req("r", 2, profile("2g"))),
		claim("c", req("r", 1, profile("3g"))),
		claim("d", req("r", 3)),
		claim("e", req("r", 1, profile("7g"))),
		claim("f", req("x", 1, profile("3g")), req("y", 2, profile("1g"))),
		claim("g", firstAvailable("r", subReq("big", 1, profile("7g")), subReq("small", 4, profile("2g")))),
	}
	run := func() string {
		s := newTestSession(t, allocator.Inputs{Slices: dynamicMIGNode()})
		var b strings.Builder
		for _, c := range claims {
			res, err := s.Allocate(context.Background(), []*resourceapi.ResourceClaim{c}, allocator.Options{})
			if err != nil {
				fmt.Fprintf(&b, "%s: %v\n", c.Name, err)
				continue
			}
			fmt.Fprintf(&b, "%s: %v\n", c.Name, picked(res[0]))
			done := c.DeepCopy()
			done.Status.Allocation = res[0].Allocation
			if err := s.Record(done); err != nil {
				t.Fatal(err)
			}
		}
		return b.String()
	}
	first := run()
	// The first device of the smallest profile in snapshot order.
	if want := "a: [r=n1/gpu-0-mig-1g-0]"; !strings.HasPrefix(first, want) {
		t.Errorf("first claim:\n%s\nwant it to start with %q", first, want)
	}
	for i := 1; i < 20; i++ {
		if got := run(); got != first {
			t.Fatalf("run %d differs:\n%s\nfirst run:\n%s", i, got, first)
		}
	}
	t.Logf("every run:\n%s", first)
}
