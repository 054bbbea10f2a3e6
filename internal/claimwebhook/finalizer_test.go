package claimwebhook

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/drastack/drastack/internal/claimpolicy"
)

// The claim webhook adds the finalizer to the operator's claims alone, as
// one JSON patch operation, and never rejects a claim.
func TestClaimFinalizer(t *testing.T) {
	withFinalizers := func(c *resourceapi.ResourceClaim, f ...string) *resourceapi.ResourceClaim {
		c.Finalizers = f
		return c
	}
	for _, tc := range []struct {
		name    string
		stack   bool
		claim   *resourceapi.ResourceClaim
		op      admissionv1.Operation
		want    []string // finalizers after the patch; nil: no patch
		wantErr bool
	}{
		{name: "a claim for a central class", stack: true, claim: gpuClaim("c"), want: []string{claimpolicy.Finalizer}},
		{name: "an immediate claim", stack: true, claim: immediateClaim("c"), want: []string{claimpolicy.Finalizer}},
		{name: "a claim with CEL constraints, other finalizers kept", stack: true, claim: withFinalizers(celClaim("c", "a"), "example.com/keep"),
			want: []string{"example.com/keep", claimpolicy.Finalizer}},
		{name: "the finalizer is there already", stack: true, claim: withFinalizers(immediateClaim("c"), claimpolicy.Finalizer)},
		{name: "kube-scheduler's claim", stack: true, claim: func() *resourceapi.ResourceClaim {
			c := gpuClaim("c")
			c.Spec.Devices.Requests[0].Exactly.DeviceClassName = "other"
			return c
		}()},
		{name: "no DRAStack: nothing is the operator's", claim: immediateClaim("c")},
		{name: "an update is not touched", stack: true, claim: immediateClaim("c"), op: admissionv1.Update},
		{name: "a body that is not a claim", stack: true, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []client.Object
			if tc.stack {
				// Central: class gpu, which gpuClaim asks for.
				objs = append(objs, stack("mh"))
			}
			c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...).Build()
			h := &ClaimFinalizer{Client: c, APIReader: c, Decoder: admission.NewDecoder(testScheme(t))}
			raw := []byte(`{"kind": 7}`)
			if tc.claim != nil {
				var err error
				if raw, err = json.Marshal(tc.claim); err != nil {
					t.Fatal(err)
				}
			}
			op := tc.op
			if op == "" {
				op = admissionv1.Create
			}
			resp := h.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
				Operation: op, Namespace: tns, Object: runtime.RawExtension{Raw: raw},
			}})
			if tc.wantErr {
				if resp.Allowed || resp.Result == nil || resp.Result.Code != 400 {
					t.Fatalf("response %+v, want a 400 error", resp.Result)
				}
				return
			}
			if !resp.Allowed {
				t.Fatalf("claim rejected: %+v", resp.Result)
			}
			if tc.want == nil {
				if len(resp.Patches) > 0 {
					t.Errorf("patches %v, want none", resp.Patches)
				}
				return
			}
			if len(resp.Patches) != 1 {
				t.Fatalf("patches %v, want one operation", resp.Patches)
			}
			// Apply the operation as the API server would.
			var obj map[string]any
			if err := json.Unmarshal(raw, &obj); err != nil {
				t.Fatal(err)
			}
			md := obj["metadata"].(map[string]any)
			p := resp.Patches[0]
			switch p.Path {
			case "/metadata/finalizers":
				md["finalizers"] = p.Value
			case "/metadata/finalizers/-":
				md["finalizers"] = append(md["finalizers"].([]any), p.Value)
			default:
				t.Fatalf("patch %s %s, want an add to /metadata/finalizers", p.Operation, p.Path)
			}
			if p.Operation != "add" {
				t.Errorf("patch operation %s, want add", p.Operation)
			}
			out, _ := json.Marshal(obj)
			var got resourceapi.ResourceClaim
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Finalizers, tc.want) {
				t.Errorf("finalizers after the patch %v, want %v", got.Finalizers, tc.want)
			}
		})
	}
}
