package claimwebhook

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/claimpolicy"
)

// The tests' configuration: class "gpu" of driver tdrv is central.
const (
	tdrv  = "gpu.example.com"
	tns   = "ns"
	class = "gpu"
)

func testScheme(t testing.TB) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// stack is a DRAStack whose central entry holds the pools of tdrv named.
func stack(central ...string) *v1alpha1.DRAStack {
	st := &v1alpha1.DRAStack{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DRAStackName, UID: "stack-uid", Generation: 1}}
	if len(central) > 0 {
		st.Spec.Claims.Central = []v1alpha1.CentralDevices{{Driver: tdrv, Pools: central, Classes: []string{class}}}
	}
	return st
}

func gpuClaim(name string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: tns, Name: name, UID: types.UID("uid-" + name)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
		}}}},
	}
}

func immediateClaim(name string) *resourceapi.ResourceClaim {
	c := gpuClaim(name)
	c.Labels = map[string]string{claimpolicy.AllocationLabel: claimpolicy.AllocationImmediate}
	return c
}

// celClaim wants a device of the model.
func celClaim(name, model string) *resourceapi.ResourceClaim {
	c := gpuClaim(name)
	c.Annotations = map[string]string{allocator.CELConstraintsAnnotation: `[{"expression": "devices.all(d, d.attributes[\"` + tdrv + `\"].model == \"` + model + `\")"}]`}
	return c
}
