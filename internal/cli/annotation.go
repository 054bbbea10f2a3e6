package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
)

// annotationField is the path of the CEL constraints annotation in messages,
// written as the engines write it.
const annotationField = "metadata.annotations[" + allocator.CELConstraintsAnnotation + "]"

// checkCELConstraintsAnnotation checks the shape of a claim's CEL
// constraints annotation (SEMANTICS.md): a JSON array of
// {"requests": [...], "expression": "..."} naming requests of the claim.
//
// The native engine checks this too, but the upstream engine only says it
// does not support CEL constraints; checking here makes a broken annotation
// invalid input (exit 1) whichever engine runs. Whether the expressions
// compile is left to the engine that evaluates them.
func checkCELConstraintsAnnotation(c *resourceapi.ResourceClaim) error {
	raw, ok := c.Annotations[allocator.CELConstraintsAnnotation]
	if !ok {
		return nil
	}
	invalid := func(field string, err error) error {
		return &allocator.InvalidClaimError{Claim: allocator.ClaimKey(c), Field: field, Err: err}
	}
	var constraints []struct {
		Requests   []string `json:"requests"`
		Expression string   `json:"expression"`
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&constraints); err != nil {
		return invalid(annotationField, fmt.Errorf(`want a JSON array of {"requests": [...], "expression": "..."}: %w`, err))
	}
	if dec.More() {
		return invalid(annotationField, errors.New("unexpected data after the JSON array"))
	}
	requests := map[string]bool{}
	for _, r := range c.Spec.Devices.Requests {
		requests[r.Name] = true
		for _, sub := range r.FirstAvailable {
			requests[r.Name+"/"+sub.Name] = true
		}
	}
	for i, con := range constraints {
		if con.Expression == "" {
			return invalid(fmt.Sprintf("%s[%d].expression", annotationField, i), errors.New("must not be empty"))
		}
		for j, r := range con.Requests {
			if !requests[r] {
				return invalid(fmt.Sprintf("%s[%d].requests[%d]", annotationField, i, j), fmt.Errorf("the claim has no request or subrequest %q", r))
			}
		}
	}
	return nil
}
