package handover

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/native"
	"github.com/drastack/drastack/internal/central"
)

func modelDevices(model string, names ...string) []resourceapi.Device {
	var out []resourceapi.Device
	for _, n := range names {
		out = append(out, resourceapi.Device{Name: n, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"model": {StringValue: ptr.To(model)}},
			Taints: []resourceapi.DeviceTaint{central.Taint(), {Key: "example.com/broken", Effect: resourceapi.DeviceTaintEffectNoSchedule}}})
	}
	return out
}

func request(name, class, selector string, count int64) resourceapi.DeviceRequest {
	r := resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}}
	if selector != "" {
		r.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}
	}
	return r
}

func claimWith(reqs ...resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "uid-c",
			Annotations: map[string]string{allocator.CELConstraintsAnnotation: `[{"expression": "false"}]`}},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: reqs}},
	}
}

func TestCouldServe(t *testing.T) {
	slices := []*resourceapi.ResourceSlice{
		// The joining pool: node-local on a node the cache does not have.
		{ObjectMeta: metav1.ObjectMeta{Name: "joining"}, Spec: resourceapi.ResourceSliceSpec{Driver: gpu, NodeName: ptr.To("new-node"),
			Pool: resourceapi.ResourcePool{Name: "joining", Generation: 1, ResourceSliceCount: 1}, Devices: modelDevices("a100", "j0")}},
		// Another pool with other devices: never part of the view.
		{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: resourceapi.ResourceSliceSpec{Driver: gpu, AllNodes: ptr.To(true),
			Pool: resourceapi.ResourcePool{Name: "other", Generation: 1, ResourceSliceCount: 1}, Devices: modelDevices("h100", "o0", "o1", "o2")}},
	}
	classes := []*resourceapi.DeviceClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + gpu + `"`}}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "other-driver"}, Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "x.example.com"`}}}}},
	}
	pools := func(id central.PoolID) bool { return id == central.PoolID{Driver: gpu, Pool: "joining"} }
	in := ServeView(slices, pools, classes, []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}}, allocator.DefaultFeatures())
	if len(in.Slices) != 1 || len(slices[0].Spec.Devices[0].Taints) != 2 || len(in.Slices[0].Spec.Devices[0].Taints) != 0 {
		t.Fatalf("ServeView: %d slices, want only the joining pool's, untainted, inputs untouched", len(in.Slices))
	}
	srv, err := NewServer(context.Background(), native.New(), in)
	if err != nil {
		t.Fatal(err)
	}
	model := func(m string) string { return `device.attributes["` + gpu + `"].model == "` + m + `"` }
	tests := []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  bool
	}{
		{"a request the pool's device matches, tainted and on an unknown node", claimWith(request("r", "gpu", model("a100"), 1)), true},
		{"more devices than the pool has: one of them could come from it", claimWith(request("r", "gpu", "", 4)), true},
		{"every device of the driver", claimWith(resourceapi.DeviceRequest{Name: "r", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeAll}}), true},
		{"a selector no device of the pool meets", claimWith(request("r", "gpu", model("h100"), 1)), false},
		{"a class of another driver", claimWith(request("r", "other-driver", "", 1)), false},
		{"one request of two could use the pool", claimWith(request("r1", "other-driver", "", 1), request("r2", "gpu", model("a100"), 1)), true},
		{"a subrequest could", claimWith(resourceapi.DeviceRequest{Name: "r", FirstAvailable: []resourceapi.DeviceSubRequest{
			{Name: "big", DeviceClassName: "gpu", Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: model("h100")}}}, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
			{Name: "small", DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2},
		}}), true},
		{"an unknown class: kube-scheduler's view may have it", claimWith(request("r", "not-there", "", 1)), true},
		{"a selector that does not compile", claimWith(request("r", "gpu", "device.attributes[", 1)), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.claim.UID = types.UID("uid-" + tt.name)
			if got := srv.CouldServe(context.Background(), tt.claim); got != tt.want {
				t.Errorf("CouldServe = %v, want %v", got, tt.want)
			}
		})
	}
}
