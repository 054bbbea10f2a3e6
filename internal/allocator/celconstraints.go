package allocator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
)

// CELConstraintsField is the path of the CEL constraints annotation in
// errors; entries are addressed as CELConstraintsField + "[i].expression".
const CELConstraintsField = "metadata.annotations[" + CELConstraintsAnnotation + "]"

// CELConstraint is one entry of the CEL constraints annotation (KEP-5254).
type CELConstraint struct {
	// Requests names the requests ("req" or "req/sub") whose devices the
	// expression sees; empty means all requests of the claim.
	Requests []string `json:"requests,omitempty"`
	// Expression is evaluated with `devices` bound to the chosen devices and
	// must return a bool.
	Expression string `json:"expression"`
}

// ParseCELConstraints reads a claim's CEL constraints annotation. A missing
// annotation means no constraints; anything that is not a JSON array of
// constraints with non-empty expressions naming requests of the claim is an
// *InvalidClaimError naming the field. Whether the expressions compile is
// left to the engine that evaluates them.
func ParseCELConstraints(claim *resourceapi.ResourceClaim) ([]CELConstraint, error) {
	raw, ok := claim.Annotations[CELConstraintsAnnotation]
	if !ok {
		return nil, nil
	}
	invalid := func(field string, err error) error {
		return &InvalidClaimError{Claim: ClaimKey(claim), Field: field, Err: err}
	}
	var out []CELConstraint
	dec := json.NewDecoder(bytes.NewReader([]byte(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		return nil, invalid(CELConstraintsField, fmt.Errorf(`want a JSON array of {"requests": [...], "expression": "..."}: %w`, err))
	}
	if dec.More() {
		return nil, invalid(CELConstraintsField, errors.New("unexpected data after the JSON array"))
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
			return nil, invalid(fmt.Sprintf("%s[%d].expression", CELConstraintsField, i), errors.New("must not be empty"))
		}
		for j, r := range c.Requests {
			if !known[r] {
				return nil, invalid(fmt.Sprintf("%s[%d].requests[%d]", CELConstraintsField, i, j), fmt.Errorf("the claim has no request or subrequest %q", r))
			}
		}
	}
	return out, nil
}
