package native

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
)

// celConstraint is one entry of the CEL constraints annotation.
type celConstraint struct {
	// Requests names the requests ("req" or "req/sub") whose devices the
	// expression sees; empty means all requests of the claim.
	Requests []string `json:"requests,omitempty"`
	// Expression is evaluated with `devices` bound to the chosen devices and
	// must return a bool.
	Expression string `json:"expression"`
}

// annotationField is the field path of the annotation in errors.
const annotationField = "metadata.annotations[" + allocator.CELConstraintsAnnotation + "]"

// parseCELConstraints reads the claim's CEL constraints annotation. A
// missing annotation means no constraints; anything that does not parse as
// a JSON array of constraints with known request names is an invalid claim.
func parseCELConstraints(claim *resourceapi.ResourceClaim) ([]celConstraint, error) {
	raw, ok := claim.Annotations[allocator.CELConstraintsAnnotation]
	if !ok {
		return nil, nil
	}
	invalid := func(field string, err error) error {
		return &allocator.InvalidClaimError{Claim: allocator.ClaimKey(claim), Field: field, Err: err}
	}
	var out []celConstraint
	dec := json.NewDecoder(bytes.NewReader([]byte(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		return nil, invalid(annotationField, fmt.Errorf("want a JSON array of {\"requests\": [...], \"expression\": \"...\"}: %w", err))
	}
	if dec.More() {
		return nil, invalid(annotationField, errors.New("trailing data after the JSON array"))
	}
	known := map[string]bool{}
	for _, r := range claim.Spec.Devices.Requests {
		known[r.Name] = true
		for _, sub := range r.FirstAvailable {
			known[r.Name+"/"+sub.Name] = true
		}
	}
	for i, c := range out {
		if c.Expression == "" {
			return nil, invalid(fmt.Sprintf("%s[%d].expression", annotationField, i), errors.New("must not be empty"))
		}
		for j, r := range c.Requests {
			if !known[r] {
				return nil, invalid(fmt.Sprintf("%s[%d].requests[%d]", annotationField, i, j), fmt.Errorf("no request or subrequest %q in the claim", r))
			}
		}
	}
	return out, nil
}
