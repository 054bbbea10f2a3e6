package central

import (
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
)

func TestTolerationToleratesOnlyTheOperatorsTaint(t *testing.T) {
	tol := Toleration()
	tests := []struct {
		taint resourcev1.DeviceTaint
		want  bool
	}{
		{Taint(), true},
		{resourcev1.DeviceTaint{Key: TaintKey, Value: "anything", Effect: resourcev1.DeviceTaintEffectNoSchedule}, true},
		{resourcev1.DeviceTaint{Key: TaintKey, Effect: resourcev1.DeviceTaintEffectNoExecute}, false},
		{resourcev1.DeviceTaint{Key: "drastack.io/driver-removal", Effect: resourcev1.DeviceTaintEffectNoSchedule}, false},
		{resourcev1.DeviceTaint{Key: "example.com/unhealthy", Effect: resourcev1.DeviceTaintEffectNoExecute}, false},
	}
	for _, tc := range tests {
		// resourceclaim.ToleratesTaint is what kube-scheduler and the
		// engines use, so this checks the toleration as they read it.
		if got := resourceclaim.ToleratesTaint(tol, tc.taint); got != tc.want {
			t.Errorf("toleration %+v tolerates %+v = %v, want %v", tol, tc.taint, got, tc.want)
		}
	}
}

func TestForOperator(t *testing.T) {
	other := resourcev1.DeviceToleration{Key: "example.com/maintenance", Operator: resourcev1.DeviceTolerationOpExists}
	claim := &resourcev1.ResourceClaim{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{
		{Name: "plain", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu"}},
		{Name: "tolerant", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu", Tolerations: []resourcev1.DeviceToleration{other}}},
		{Name: "already", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu", Tolerations: []resourcev1.DeviceToleration{Toleration()}}},
		{Name: "either", FirstAvailable: []resourcev1.DeviceSubRequest{
			{Name: "big", DeviceClassName: "gpu-big"},
			{Name: "small", DeviceClassName: "gpu-small", Tolerations: []resourcev1.DeviceToleration{other}},
		}},
	}}}}
	before := claim.DeepCopy()
	got := ForOperator(claim)
	if diff := diffYAML(before, claim); diff != "" {
		t.Fatalf("ForOperator modified its input:\n%s", diff)
	}
	want := before.DeepCopy()
	reqs := want.Spec.Devices.Requests
	reqs[0].Exactly.Tolerations = []resourcev1.DeviceToleration{Toleration()}
	reqs[1].Exactly.Tolerations = []resourcev1.DeviceToleration{other, Toleration()}
	reqs[3].FirstAvailable[0].Tolerations = []resourcev1.DeviceToleration{Toleration()}
	reqs[3].FirstAvailable[1].Tolerations = []resourcev1.DeviceToleration{other, Toleration()}
	if diff := diffYAML(want, got); diff != "" {
		t.Errorf("ForOperator:\n%s", diff)
	}
	if diff := diffYAML(got, ForOperator(got)); diff != "" {
		t.Errorf("ForOperator is not idempotent:\n%s", diff)
	}
	if ForOperator(nil) != nil || ForOperatorSpec(nil) != nil {
		t.Error("nil must stay nil")
	}
	if diff := diffYAML(&got.Spec, ForOperatorSpec(&claim.Spec)); diff != "" {
		t.Errorf("ForOperatorSpec differs from ForOperator:\n%s", diff)
	}
}
