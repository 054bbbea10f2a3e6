package pool

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

func TestDeviceNodeResolution(t *testing.T) {
	type where struct {
		node     string
		selector bool
		all      bool
	}
	for _, tc := range []struct {
		name  string
		slice *resourceapi.ResourceSlice
		want  map[string]where
	}{
		{
			name:  "node-local slice",
			slice: mkSlice("a", "p", 1, 1, onNode("n1"), devs(dev("d"))),
			want:  map[string]where{"d": {node: "n1"}},
		},
		{
			name:  "allNodes slice",
			slice: mkSlice("a", "p", 1, 1, allNodes(), devs(dev("d"))),
			want:  map[string]where{"d": {all: true}},
		},
		{
			name:  "nodeSelector slice",
			slice: mkSlice("a", "p", 1, 1, nodeSelector(1), devs(dev("d"))),
			want:  map[string]where{"d": {selector: true}},
		},
		{
			name: "per-device selection",
			slice: mkSlice("a", "p", 1, 1, perDevice(),
				devs(dev("n", devNode("n7")), dev("s", devSelector()), dev("all", devAll()))),
			want: map[string]where{"n": {node: "n7"}, "s": {selector: true}, "all": {all: true}},
		},
		{
			name:  "per-device selection, device without one resolves to nothing",
			slice: mkSlice("a", "p", 1, 1, perDevice(), devs(dev("d"))),
			want:  map[string]where{"d": {}},
		},
		{
			name:  "slice without node selection resolves to nothing",
			slice: mkSlice("a", "p", 1, 1, noNode(), devs(dev("d"))),
			want:  map[string]where{"d": {}},
		},
		{
			name:  "device fields on a node-local slice are ignored (and reported)",
			slice: mkSlice("a", "p", 1, 1, onNode("n1"), devs(dev("d", devAll()))),
			want:  map[string]where{"d": {node: "n1"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := onlyPool(t, tc.slice)
			if len(p.Devices) != len(tc.want) {
				t.Fatalf("%d devices, want %d", len(p.Devices), len(tc.want))
			}
			for _, d := range p.Devices {
				got := where{node: d.NodeName, selector: d.NodeSelector != nil, all: d.AllNodes}
				if got != tc.want[d.Device.Name] {
					t.Errorf("device %s: %+v, want %+v", d.Device.Name, got, tc.want[d.Device.Name])
				}
				if d.NodeSelector != nil && d.NodeSelector != tc.slice.Spec.NodeSelector && d.NodeSelector != d.Device.NodeSelector {
					t.Errorf("device %s: selector is a copy, want the API object's", d.Device.Name)
				}
			}
		})
	}
}

func TestPoolNode(t *testing.T) {
	for _, tc := range []struct {
		name   string
		slices []*resourceapi.ResourceSlice
		want   string
	}{
		{"all slices on one node", []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 2, onNode("n1")), mkSlice("b", "p", 1, 2, onNode("n1"))}, "n1"},
		{"slices on two nodes", []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 2, onNode("n1")), mkSlice("b", "p", 1, 2, onNode("n2"))}, ""},
		{"one slice not node-local", []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 2, onNode("n1")), mkSlice("b", "p", 1, 2, allNodes())}, ""},
		{"per-device devices on one node", []*resourceapi.ResourceSlice{mkSlice("a", "p", 1, 1, perDevice(), devs(dev("d", devNode("n1"))))}, ""},
		{"a stale slice on another node does not matter", []*resourceapi.ResourceSlice{mkSlice("a", "p", 2, 1, onNode("n1")), mkSlice("b", "p", 1, 1, onNode("n2"))}, "n1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := onlyPool(t, tc.slices...).Node; got != tc.want {
				t.Errorf("Node = %q, want %q", got, tc.want)
			}
		})
	}
}
