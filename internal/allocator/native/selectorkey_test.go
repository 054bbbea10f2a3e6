package native

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

// TestAnalyzeSelector specifies which selectors share results between
// look-alike devices and what they read.
func TestAnalyzeSelector(t *testing.T) {
	tests := []struct {
		expr   string
		shared bool
		paths  []string // "a:domain/name" or "c:domain/name"
	}{
		{expr: `device.driver == "gpu.example.com"`, shared: true},
		{expr: `device.attributes["gpu.example.com"].model == "a"`, shared: true, paths: []string{"a:gpu.example.com/model"}},
		{expr: `device.attributes["gpu.example.com"]["model"] == "a"`, shared: true, paths: []string{"a:gpu.example.com/model"}},
		{expr: `has(device.attributes["gpu.example.com"].mem) && device.attributes["gpu.example.com"].mem >= 3`, shared: true,
			paths: []string{"a:gpu.example.com/mem", "a:gpu.example.com/mem"}},
		{expr: `device.capacity["gpu.example.com"].memory.compareTo(quantity("2Gi")) >= 0`, shared: true, paths: []string{"c:gpu.example.com/memory"}},
		{expr: `device.attributes["resource.kubernetes.io"].pcieRoot.includes("p0")`, shared: true, paths: []string{"a:resource.kubernetes.io/pcieRoot"}},
		{expr: `device.allowMultipleAllocations`, shared: true},
		{expr: `cel.bind(m, device.attributes["d.example.com"].model, m == "a" || m == "b")`, shared: true, paths: []string{"a:d.example.com/model"}},
		{expr: `[1, 2].all(device, device > 0)`, shared: false},
		{expr: `device.attributes["gpu.example.com"].exists(k, k == "model")`, shared: false},
		{expr: `"model" in device.attributes["gpu.example.com"]`, shared: false},
		{expr: `device.attributes[device.driver].model == "a"`, shared: false},
		{expr: `device.attributes["gpu.example.com"][device.driver] == "a"`, shared: false},
		{expr: `size(device.attributes) > 0`, shared: false},
		{expr: `device.attributes["gpu.example.com"].?model.orValue("") == "a"`, shared: false},
		{expr: `device == device`, shared: false},
		{expr: `device.attributes[`, shared: false},
	}
	for _, tc := range tests {
		sh := analyzeSelector(tc.expr)
		var paths []string
		for _, p := range sh.paths {
			kind := "a"
			if p.capacity {
				kind = "c"
			}
			paths = append(paths, kind+":"+p.domain+"/"+p.name)
		}
		if sh.shared != tc.shared || (tc.shared && !slices.Equal(paths, tc.paths)) {
			t.Errorf("%s: shared %v, paths %v; want %v, %v", tc.expr, sh.shared, paths, tc.shared, tc.paths)
		}
	}
}

// TestSharedSelectorResults: evaluating a selector through the shared
// cache gives exactly what evaluating it on each device gives, for random
// devices that often look alike and sometimes differ in what is read.
func TestSharedSelectorResults(t *testing.T) {
	exprs := []string{
		`device.attributes["gpu.example.com"].model == "a"`,
		`has(device.attributes["gpu.example.com"].mem) && device.attributes["gpu.example.com"].mem >= 2`,
		`device.capacity["gpu.example.com"].memory.compareTo(quantity("2Gi")) >= 0`,
		`device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].roots.includes("x")`,
		`!has(device.attributes["other.example.com"].model) || device.attributes["other.example.com"].model == "a"`,
	}
	r := rand.New(rand.NewPCG(1, 2))
	var devs []resourceapi.Device
	for i := range 400 {
		d := dev(fmt.Sprintf("d%d", i), "index", i, "roots", [][]string{{"x"}, {"y"}, {"x", "y"}}[r.IntN(3)])
		if r.IntN(4) > 0 {
			d.Attributes["model"] = attr([]string{"a", "b"}[r.IntN(2)])
		}
		if r.IntN(2) == 0 {
			// Qualified spelling of the driver's domain.
			d.Attributes["gpu.example.com/mem"] = attr(r.IntN(4))
		} else if r.IntN(2) == 0 {
			d.Attributes["mem"] = attr(r.IntN(4))
		}
		if r.IntN(3) == 0 {
			d.Attributes["other.example.com/model"] = attr([]string{"a", "b"}[r.IntN(2)])
		}
		d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: *resource.NewQuantity(int64(1+r.IntN(3))<<30, resource.BinarySI)}}
		if r.IntN(5) == 0 {
			d.AllowMultipleAllocations = ptr.To(r.IntN(2) == 0)
		}
		devs = append(devs, d)
	}
	s := newTestSession(t, allocator.Inputs{Slices: []*resourceapi.ResourceSlice{nodeSlice("n1", devs...)}})
	direct := dracel.NewCache(10, dracel.Features{EnableListTypeAttributes: true, EnableConsumableCapacity: true})
	for _, expr := range exprs {
		want := direct.GetOrCompile(expr)
		for d := range s.devs {
			got, gotErr := s.evalSelector(context.Background(), expr, int32(d))
			dv := &s.devs[d]
			w, _, wantErr := want.DeviceMatches(context.Background(), dracel.Device{Driver: dv.id.driver, Attributes: dv.dev.Attributes, Capacity: dv.dev.Capacity, AllowMultipleAllocations: dv.dev.AllowMultipleAllocations})
			if got != w || (gotErr == nil) != (wantErr == nil) {
				t.Fatalf("%s on %s: got %v (%v), want %v (%v)", expr, dv.id.device, got, gotErr, w, wantErr)
			}
		}
		if n := len(s.sharedResults[expr]); n == 0 || n >= len(s.devs)/2 {
			t.Errorf("%s: %d distinct keys for %d devices: sharing is not working", expr, n, len(s.devs))
		}
	}
}
