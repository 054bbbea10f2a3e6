package allocator

import (
	"errors"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParseCELConstraints(t *testing.T) {
	claim := func(annotation *string) *resourceapi.ResourceClaim {
		c := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
				{Name: "gpu"},
				{Name: "any", FirstAvailable: []resourceapi.DeviceSubRequest{{Name: "big"}}},
			}}},
		}
		if annotation != nil {
			c.Annotations = map[string]string{CELConstraintsAnnotation: *annotation}
		}
		return c
	}
	s := func(v string) *string { return &v }
	tests := []struct {
		name       string
		annotation *string
		want       int
		wantField  string
	}{
		{name: "no annotation", want: 0},
		{name: "empty array", annotation: s(`[]`), want: 0},
		{name: "all requests", annotation: s(`[{"expression": "size(devices) == 2"}]`), want: 1},
		{name: "named request and subrequest", annotation: s(`[{"requests": ["gpu", "any/big"], "expression": "true"}, {"expression": "true"}]`), want: 2},
		{name: "not an array", annotation: s(`{"expression": "true"}`), wantField: CELConstraintsField},
		{name: "unknown field", annotation: s(`[{"expr": "true"}]`), wantField: CELConstraintsField},
		{name: "trailing data", annotation: s(`[] []`), wantField: CELConstraintsField},
		{name: "empty expression", annotation: s(`[{"expression": "true"}, {"requests": ["gpu"]}]`), wantField: CELConstraintsField + "[1].expression"},
		{name: "unknown request", annotation: s(`[{"requests": ["gpu", "nic"], "expression": "true"}]`), wantField: CELConstraintsField + "[0].requests[1]"},
		{name: "subrequest without parent", annotation: s(`[{"requests": ["big"], "expression": "true"}]`), wantField: CELConstraintsField + "[0].requests[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCELConstraints(claim(tc.annotation))
			if tc.wantField != "" {
				var inv *InvalidClaimError
				if !errors.As(err, &inv) || inv.Field != tc.wantField || inv.Claim != "ns/c" {
					t.Fatalf("err = %v, want an InvalidClaimError for ns/c at %s", err, tc.wantField)
				}
				return
			}
			if err != nil || len(got) != tc.want {
				t.Fatalf("got %d constraints, err %v; want %d", len(got), err, tc.want)
			}
		})
	}
}
