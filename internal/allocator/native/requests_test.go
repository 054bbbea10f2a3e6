package native

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
)

// threeGPUs is node n1 with gpu-0 (model a), gpu-1 (model b), gpu-2 (model a).
func threeGPUs(extra ...func(*resourceapi.ResourceSlice)) []*resourceapi.ResourceSlice {
	s := nodeSlice("n1",
		dev("gpu-0", "model", "a", "index", 0, "roots", []string{"x", "y"}),
		dev("gpu-1", "model", "b", "index", 1, "roots", []string{"y"}),
		dev("gpu-2", "model", "a", "index", 2, "roots", []string{"z"}))
	for _, f := range extra {
		f(s)
	}
	return []*resourceapi.ResourceSlice{s}
}

func allMode(r resourceapi.DeviceRequest) resourceapi.DeviceRequest {
	r.Exactly.AllocationMode, r.Exactly.Count = resourceapi.DeviceAllocationModeAll, 0
	return r
}

func firstAvailable(name string, subs ...resourceapi.DeviceSubRequest) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: name, FirstAvailable: subs}
}

func subReq(name string, count int64, selectors ...string) resourceapi.DeviceSubRequest {
	s := resourceapi.DeviceSubRequest{Name: name, DeviceClassName: "gpu", Count: count, AllocationMode: resourceapi.DeviceAllocationModeExactCount}
	for _, e := range selectors {
		s.Selectors = append(s.Selectors, sel(e)...)
	}
	return s
}

func TestRequests(t *testing.T) {
	const modelA = `device.attributes["gpu.example.com"].model == "a"`
	const modelB = `device.attributes["gpu.example.com"].model == "b"`
	incomplete := poolSlice("broken", "broken", 2, dev("x-0"))
	incomplete.Spec.AllNodes, incomplete.Spec.NodeName = nil, ptr.To("n1")
	admin := req("r", 1)
	admin.Exactly.AdminAccess = ptr.To(true)
	adminAll := req("r", 4)
	adminAll.Exactly.AdminAccess = ptr.To(true)
	capacity := req("r", 1)
	capacity.Exactly.Capacity = &resourceapi.CapacityRequirements{}
	// Capacity requests are covered by capacity_test.go; an empty list
	// asks for nothing.
	badMode := req("r", 1)
	badMode.Exactly.AllocationMode = "Some"

	runCases(t, []testCase{
		{name: "one device, first in device order", slices: threeGPUs(), claim: claim("c", req("r", 1)), want: []string{"r=n1/gpu-0"}},
		{name: "count picks that many", slices: threeGPUs(), claim: claim("c", req("r", 2)), want: []string{"r=n1/gpu-0", "r=n1/gpu-1"}},
		{name: "count 0 means one", slices: threeGPUs(), claim: claim("c", req("r", 0)), want: []string{"r=n1/gpu-0"}},
		{name: "more devices than exist", slices: threeGPUs(), claim: claim("c", req("r", 4)), wantErr: allocator.ErrUnsatisfiable, wantMsg: "3 matching devices available, 4 needed"},
		{name: "request selector", slices: threeGPUs(), claim: claim("c", req("r", 1, modelB)), want: []string{"r=n1/gpu-1"}},
		{name: "class and request selectors both apply", slices: threeGPUs(), classes: []*resourceapi.DeviceClass{class("gpu", modelA)},
			claim: claim("c", req("r", 1, `device.attributes["gpu.example.com"].index > 0`)), want: []string{"r=n1/gpu-2"}},
		{name: "includes() works on lists and scalars", slices: threeGPUs(),
			claim: claim("c", req("r", 2, `device.attributes["gpu.example.com"].roots.includes("y")`)), want: []string{"r=n1/gpu-0", "r=n1/gpu-1"}},
		{name: "device in use is skipped", slices: threeGPUs(), allocated: []*resourceapi.ResourceClaim{allocatedClaim("old", false, "n1", "gpu-0")},
			claim: claim("c", req("r", 1)), want: []string{"r=n1/gpu-1"}},
		{name: "All takes every matching device", slices: threeGPUs(), claim: claim("c", allMode(req("r", 0, modelA))), want: []string{"r=n1/gpu-0", "r=n1/gpu-2"}},
		{name: "All fails when a matching device is in use", slices: threeGPUs(), allocated: []*resourceapi.ResourceClaim{allocatedClaim("old", false, "n1", "gpu-2")},
			claim: claim("c", allMode(req("r", 0, modelA))), wantErr: allocator.ErrUnsatisfiable},
		{name: "All fails when a pool on the node is incomplete", slices: append(threeGPUs(), incomplete),
			claim: claim("c", allMode(req("r", 0))), wantErr: allocator.ErrUnsatisfiable, wantMsg: "incomplete or invalid"},
		{name: "All needs at least one device", slices: threeGPUs(), claim: claim("c", allMode(req("r", 0, `device.attributes["gpu.example.com"].model == "c"`))), wantErr: allocator.ErrUnsatisfiable},
		{name: "firstAvailable falls back to the next alternative", slices: threeGPUs(),
			claim: claim("c", firstAvailable("r", subReq("big", 4), subReq("small", 1))), want: []string{"r/small=n1/gpu-0"}},
		{name: "firstAvailable takes the first alternative that fits", slices: threeGPUs(),
			claim: claim("c", firstAvailable("r", subReq("b", 1, modelB), subReq("any", 1))), want: []string{"r/b=n1/gpu-1"}},
		{name: "unknown class", slices: threeGPUs(), classes: []*resourceapi.DeviceClass{class("other")}, claim: claim("c", req("r", 1)),
			wantErr: allocator.ErrUnsatisfiable, wantMsg: `device class "gpu" does not exist`},
		{name: "request selector does not compile", slices: threeGPUs(), claim: claim("c", req("r", 1, `device.attributes[`)),
			wantField: "spec.devices.requests[0].exactly.selectors[0].cel.expression"},
		{name: "subrequest selector does not compile", slices: threeGPUs(), claim: claim("c", firstAvailable("r", subReq("a", 1), subReq("b", 1, `1 +`))),
			wantField: "spec.devices.requests[0].firstAvailable[1].selectors[0].cel.expression"},
		{name: "class selector does not compile", slices: threeGPUs(), classes: []*resourceapi.DeviceClass{class("gpu", `device.driver ==`)},
			claim: claim("c", req("r", 1)), wantField: "deviceclasses/gpu: spec.selectors[0].cel.expression"},
		{name: "selector that is not bool", slices: threeGPUs(), claim: claim("c", req("r", 1, `device.driver`)),
			wantField: "spec.devices.requests[0].exactly.selectors[0].cel.expression"},
		{name: "selector runtime error aborts", slices: threeGPUs(), claim: claim("c", req("r", 1, `device.attributes["gpu.example.com"].missing == 1`)),
			wantMsg: "CEL runtime error", wantErr: errAny},
		{name: "unknown allocation mode", slices: threeGPUs(), claim: claim("c", badMode), wantField: "spec.devices.requests[0].exactly.allocationMode"},
		{name: "count above 32", slices: threeGPUs(), claim: claim("c", req("r", 33)), wantField: "spec.devices.requests[0].exactly.count"},
		{name: "more than 32 devices in one claim", slices: threeGPUs(), claim: claim("c", req("a", 20), req("b", 20)), wantField: "spec.devices.requests"},
		{name: "empty capacity requests ask for nothing", slices: threeGPUs(), claim: claim("c", capacity), want: []string{"r=n1/gpu-0"}},
		{name: "admin access may use a device in use", slices: threeGPUs(), allocated: []*resourceapi.ResourceClaim{allocatedClaim("old", false, "n1", "gpu-0")},
			claim: claim("c", admin), want: []string{"r=n1/gpu-0"},
			check: func(t *testing.T, r allocator.Result) {
				if !ptr.Deref(r.Allocation.Devices.Results[0].AdminAccess, false) {
					t.Error("result does not say adminAccess")
				}
			}},
		{name: "admin access does not take a device twice", slices: threeGPUs(), claim: claim("c", adminAll), wantErr: allocator.ErrUnsatisfiable},
	})
}

func TestTaints(t *testing.T) {
	withTaint := func(effect resourceapi.DeviceTaintEffect) []*resourceapi.ResourceSlice {
		return threeGPUs(func(s *resourceapi.ResourceSlice) { s.Spec.Devices[0] = tainted(s.Spec.Devices[0], "broken", effect) })
	}
	tolerating := func(tol resourceapi.DeviceToleration) *resourceapi.ResourceClaim {
		r := req("r", 1)
		r.Exactly.Tolerations = []resourceapi.DeviceToleration{tol}
		return claim("c", r)
	}
	exists := resourceapi.DeviceToleration{Key: "broken", Operator: resourceapi.DeviceTolerationOpExists}
	runCases(t, []testCase{
		{name: "NoSchedule excludes the device", slices: withTaint(resourceapi.DeviceTaintEffectNoSchedule), claim: claim("c", req("r", 1)), want: []string{"r=n1/gpu-1"}},
		{name: "NoExecute excludes the device", slices: withTaint(resourceapi.DeviceTaintEffectNoExecute), claim: claim("c", req("r", 1)), want: []string{"r=n1/gpu-1"}},
		{name: "None is informational", slices: withTaint(resourceapi.DeviceTaintEffectNone), claim: claim("c", req("r", 1)), want: []string{"r=n1/gpu-0"}},
		{name: "tolerated taint allows the device", slices: withTaint(resourceapi.DeviceTaintEffectNoSchedule), claim: tolerating(exists), want: []string{"r=n1/gpu-0"},
			check: func(t *testing.T, r allocator.Result) {
				if len(r.Allocation.Devices.Results[0].Tolerations) != 1 {
					t.Error("tolerations are not copied into the result")
				}
			}},
		{name: "toleration with another value does not help", slices: withTaint(resourceapi.DeviceTaintEffectNoSchedule),
			claim: tolerating(resourceapi.DeviceToleration{Key: "broken", Operator: resourceapi.DeviceTolerationOpEqual, Value: "false"}), want: []string{"r=n1/gpu-1"}},
		{name: "toleration for another effect does not help", slices: withTaint(resourceapi.DeviceTaintEffectNoExecute),
			claim: tolerating(resourceapi.DeviceToleration{Key: "broken", Operator: resourceapi.DeviceTolerationOpExists, Effect: resourceapi.DeviceTaintEffectNoSchedule}), want: []string{"r=n1/gpu-1"}},
		{name: "All fails on an untolerated taint", slices: withTaint(resourceapi.DeviceTaintEffectNoSchedule), claim: claim("c", allMode(req("r", 0))), wantErr: allocator.ErrUnsatisfiable},
	})
}

func TestConfig(t *testing.T) {
	opaque := func(driver string) resourceapi.DeviceConfiguration {
		return resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(`{}`)}}}
	}
	gpu := class("gpu")
	gpu.Spec.Config = []resourceapi.DeviceClassConfiguration{{DeviceConfiguration: opaque("from-class")}}
	c := claim("c", req("a", 1), req("b", 1), firstAvailable("f", subReq("x", 1)))
	c.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{
		{Requests: []string{"a"}, DeviceConfiguration: opaque("only-a")},
		{DeviceConfiguration: opaque("everyone")},
		{Requests: []string{"f/x"}, DeviceConfiguration: opaque("sub")},
		{Requests: []string{"nobody"}, DeviceConfiguration: opaque("unused")},
	}
	runCases(t, []testCase{{
		name: "class config once for all its requests, claim config as named", slices: threeGPUs(),
		classes: []*resourceapi.DeviceClass{gpu}, claim: c,
		check: func(t *testing.T, r allocator.Result) {
			cfg := r.Allocation.Devices.Config
			type row struct {
				source resourceapi.AllocationConfigSource
				driver string
				reqs   int
			}
			want := []row{
				{resourceapi.AllocationConfigSourceClass, "from-class", 0}, // names a, b, f/x = all
				{resourceapi.AllocationConfigSourceClaim, "only-a", 1},
				{resourceapi.AllocationConfigSourceClaim, "everyone", 0},
				{resourceapi.AllocationConfigSourceClaim, "sub", 1},
			}
			if len(cfg) != len(want) {
				t.Fatalf("got %d configs, want %d: %+v", len(cfg), len(want), cfg)
			}
			for i, w := range want {
				if cfg[i].Source != w.source || cfg[i].Opaque.Driver != w.driver || len(cfg[i].Requests) != w.reqs {
					t.Errorf("config %d = %s %s %v, want %+v", i, cfg[i].Source, cfg[i].Opaque.Driver, cfg[i].Requests, w)
				}
			}
		},
	}})
}
