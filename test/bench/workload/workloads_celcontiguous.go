package workload

import (
	"encoding/json"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

const mlaDriver = "mla.example.com"

// The KEP-5254 stories: four devices with contiguous indices, and a 2x2
// grid (every device has at least two grid neighbours in the set).
const (
	contiguous4 = `size(devices) == 4 && ` +
		`devices.map(d, d.attributes["mla.example.com"].index).max() - ` +
		`devices.map(d, d.attributes["mla.example.com"].index).min() == 3`
	grid2x2 = `size(devices) == 4 && devices.all(d, devices.filter(other, d != other && (` +
		`(d.attributes["mla.example.com"].row == other.attributes["mla.example.com"].row && ` +
		`(d.attributes["mla.example.com"].col == other.attributes["mla.example.com"].col + 1 || ` +
		`d.attributes["mla.example.com"].col == other.attributes["mla.example.com"].col - 1)) || ` +
		`(d.attributes["mla.example.com"].col == other.attributes["mla.example.com"].col && ` +
		`(d.attributes["mla.example.com"].row == other.attributes["mla.example.com"].row + 1 || ` +
		`d.attributes["mla.example.com"].row == other.attributes["mla.example.com"].row - 1)))).size() >= 2)`
)

// CELContiguous is cel-contiguous (native only): 10 nodes with a line of 32
// devices and 10 nodes with a 4x4 grid of 16, and claims for 4 contiguous
// devices and for a 2x2 grid as CEL constraints.
//
// The last two nodes of each kind are the hard case: on the line nodes
// every fourth device is already in use (24 free devices, never 4 in a row:
// proving it means evaluating all C(24,4) = 10,626 sets), on the grid nodes
// the four cells (1,1), (1,3), (3,1), (3,3) are (12 free cells, every 2x2
// block broken: C(12,4) = 495 sets). The other nodes take 8 line claims or 4
// grid claims each, so 64 of the 100 line claims and 32 of the 50 grid
// claims are allocated; the rest must be proven unsatisfiable, and the
// first of them searches the hard nodes in full. The hard nodes come last
// in node order, so a satisfiable claim never has to prove one of them
// infeasible first (that would cost it one such proof, measured as the
// time to prove a claim unsatisfiable).
func CELContiguous() *Workload {
	const lineNodes, gridNodes, hard, lineClaims, gridClaims = 10, 10, 2, 100, 50
	b := newBuilder("cel-contiguous")
	b.w.NativeOnly = true
	b.class("mla", mlaDriver)
	for n := 0; n < lineNodes; n++ {
		node := fmt.Sprintf("line-%02d", n)
		b.node(node, nil)
		b.slice(node+"-mla", mlaDriver, node, 1, func(s *resourceapi.ResourceSliceSpec) {
			s.NodeName = ptr.To(node)
			for i := 0; i < 32; i++ {
				s.Devices = append(s.Devices, resourceapi.Device{
					Name: fmt.Sprintf("mla-%d", i), Attributes: attrs("topology", strAttr("line"), "index", intAttr(int64(i))),
				})
			}
		})
		if n >= lineNodes-hard {
			var held []string
			for i := 3; i < 32; i += 4 {
				held = append(held, fmt.Sprintf("mla-%d", i))
			}
			b.held(node, "mla", mlaDriver, node, held...)
		}
	}
	for n := 0; n < gridNodes; n++ {
		node := fmt.Sprintf("grid-%02d", n)
		b.node(node, nil)
		b.slice(node+"-mla", mlaDriver, node, 1, func(s *resourceapi.ResourceSliceSpec) {
			s.NodeName = ptr.To(node)
			for r := 0; r < 4; r++ {
				for c := 0; c < 4; c++ {
					s.Devices = append(s.Devices, resourceapi.Device{
						Name:       fmt.Sprintf("mla-%d-%d", r, c),
						Attributes: attrs("topology", strAttr("grid"), "row", intAttr(int64(r)), "col", intAttr(int64(c))),
					})
				}
			}
		})
		if n >= gridNodes-hard {
			b.held(node, "mla", mlaDriver, node, "mla-1-1", "mla-1-3", "mla-3-1", "mla-3-3")
		}
	}
	line, grid := 0, 0
	for line < lineClaims || grid < gridClaims {
		if line < lineClaims {
			celClaim(b, fmt.Sprintf("line-%03d", line), "line", contiguous4)
			line++
		}
		if line < lineClaims {
			celClaim(b, fmt.Sprintf("line-%03d", line), "line", contiguous4)
			line++
		}
		if grid < gridClaims {
			celClaim(b, fmt.Sprintf("grid-%03d", grid), "grid", grid2x2)
			grid++
		}
	}
	return b.w
}

func celClaim(b *builder, name, topology, expr string) {
	// Marshalling strings cannot fail.
	value, _ := json.Marshal([]map[string]any{{"requests": []string{"mla"}, "expression": expr}})
	b.claim(name, map[string]string{allocator.CELConstraintsAnnotation: string(value)}, []resourceapi.DeviceRequest{
		request("mla", "mla", 4, fmt.Sprintf(`device.attributes["mla.example.com"].topology == %q`, topology)),
	})
}
