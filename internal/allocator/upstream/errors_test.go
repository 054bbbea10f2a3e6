package upstream

import (
	"errors"
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/drastack/drastack/internal/allocator"
)

// TestInvalidClaimsField: the field of an upstream error is worked out from
// what the message names, as precisely as the message allows.
func TestInvalidClaimsField(t *testing.T) {
	sel := func(exprs ...string) []resourceapi.DeviceSelector {
		var out []resourceapi.DeviceSelector
		for _, e := range exprs {
			out = append(out, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: e}})
		}
		return out
	}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
			{Name: "a", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu", Selectors: sel("true", "good")}},
			{Name: "b", FirstAvailable: []resourceapi.DeviceSubRequest{
				{Name: "x", DeviceClassName: "nic", Selectors: sel("true")},
				{Name: "y", DeviceClassName: "nic", Selectors: sel("true", "bad")},
			}},
		}}},
	}
	other := claim.DeepCopy()
	other.Name = "other"
	other.Spec.Devices.Requests = other.Spec.Devices.Requests[:1]
	compiles := func(expr string) bool { return expr != "bad" }
	tests := []struct {
		name      string
		msg       string
		wantClaim string
		wantField string
	}{
		{"a request", "claim ns/c, request a: unsupported", "ns/c", "spec.devices.requests[0].exactly"},
		{"a subrequest", "claim ns/c, request b/y: unsupported", "ns/c", "spec.devices.requests[1].firstAvailable[1]"},
		{"an unknown subrequest", "claim ns/c, request b/z: unsupported", "ns/c", "spec.devices.requests[1]"},
		{"a compile error, the failing selector found", "claim ns/c: selector #1: CEL compile error: x", "ns/c",
			"spec.devices.requests[1].firstAvailable[1].selectors[1].cel.expression"},
		{"a runtime error at an index several requests have", "claim ns/c: selector #1 on device d/p/0: CEL runtime error: x", "ns/c", "spec.devices"},
		{"a class selector of one claim's class", "class nic: selector #0: CEL compile error: x", "ns/c", "deviceclasses/nic: spec.selectors[0].cel.expression"},
		{"a class selector two claims use", "class gpu: selector #2 on device d/p/0: CEL runtime error: x", "ns/c, ns/other", "deviceclasses/gpu: spec.selectors[2].cel.expression"},
		{"anything else", "something broke", "ns/c, ns/other", "spec.devices"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := invalidClaims([]*resourceapi.ResourceClaim{claim, other}, errors.New(tt.msg), compiles)
			var ie *allocator.InvalidClaimError
			if !errors.As(err, &ie) {
				t.Fatalf("%v is not an InvalidClaimError", err)
			}
			if ie.Claim != tt.wantClaim || ie.Field != tt.wantField {
				t.Errorf("claim %q field %q, want %q %q", ie.Claim, ie.Field, tt.wantClaim, tt.wantField)
			}
		})
	}
}

func TestMissingClass(t *testing.T) {
	notFound := apierrors.NewNotFound(schema.GroupResource{Group: resourceapi.GroupName, Resource: "deviceclasses"}, "gpu")
	if !missingClass(fmt.Errorf("claim ns/c, request a: could not retrieve device class gpu: %w", notFound)) {
		t.Error("a class that is not found is not recognised")
	}
	if missingClass(errors.New("claim ns/c, request a: could not retrieve device class gpu: boom")) {
		t.Error("any other error is taken for a missing class")
	}
}
