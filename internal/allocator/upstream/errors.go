package upstream

import (
	"errors"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drastack/drastack/internal/allocator"
)

// errNilClaim is returned for a nil entry in the claims to allocate.
var errNilClaim = errors.New("claim is nil")

// errCELConstraints is the reason given for claims with KEP-5254 constraints.
var errCELConstraints = errors.New("CEL constraints (KEP-5254) are not supported by the upstream engine")

// checkSupported rejects claims the upstream allocator cannot honour. A claim
// whose annotation is present but holds an empty list asks for nothing, so it
// is allocated normally; anything else would be silently ignored upstream,
// which would give an allocation that breaks the claim's constraints.
func checkSupported(claims []*resourceapi.ResourceClaim) error {
	for i, claim := range claims {
		if claim == nil {
			return fmt.Errorf("claims[%d]: %w", i, errNilClaim)
		}
		value, ok := claim.Annotations[allocator.CELConstraintsAnnotation]
		if !ok {
			continue
		}
		switch strings.Join(strings.Fields(value), "") {
		case "", "[]", "null":
			continue
		}
		return fmt.Errorf("claim %s: %w: %w", allocator.ClaimKey(claim), errCELConstraints, allocator.ErrNotSupported)
	}
	return nil
}

// ErrAborted is wrapped (with allocator.ErrUnsatisfiable) when, on at
// least one node, the upstream allocator did not search to the end but
// stopped at a request for All devices: a reachable pool was incomplete or
// invalid, or a device of the All set broke a constraint. Upstream stops the
// whole call then, even when another subrequest of a firstAvailable request
// (or another choice for an earlier request) would have worked, so a claim
// failing with ErrAborted may still be satisfiable. The differential test
// uses it to tell this known upstream behaviour from a disagreement.
var ErrAborted = errors.New("the upstream allocator stopped at a request for all devices")

// allModeTransient are upstream errors that abort the call although they only
// say "not now, not here": a request for All devices that meets a pool which
// is being updated or is invalid, or a device of the All set that breaks a
// constraint. kube-scheduler reports them as a failed attempt and retries
// later; for a central allocator they mean "cannot allocate on this node".
var allModeTransient = []string{
	"asks for all devices, but resource pool",
	"because a claim constraint would not be satisfied",
}

// nodeFailure reports whether err only concerns the node the call was made
// for, returning the reason to pass on and whether the upstream search
// was aborted (see ErrAborted).
func nodeFailure(err error) (reason string, aborted, ok bool) {
	if errors.Is(err, structured.ErrFailedAllocationOnNode) {
		return err.Error(), false, true
	}
	msg := err.Error()
	for _, s := range allModeTransient {
		if strings.Contains(msg, s) {
			return msg, true, true
		}
	}
	return "", false, false
}

// invalidClaims turns any other upstream error (a selector that does not
// compile or fails at runtime, a missing class, a request the features do not
// allow) into an InvalidClaimError for the claim the message names. The
// upstream allocator does not say which field is wrong, only which request,
// so Field points at the claim's device requests.
func invalidClaims(claims []*resourceapi.ResourceClaim, err error) error {
	claim := claimKeys(claims)
	msg := err.Error()
	for _, c := range claims {
		if strings.HasPrefix(msg, "claim "+allocator.ClaimKey(c)+",") {
			claim = allocator.ClaimKey(c)
			break
		}
	}
	return &allocator.InvalidClaimError{Claim: claim, Field: "spec.devices", Err: fmt.Errorf("upstream allocator: %w", err)}
}

func claimKeys(claims []*resourceapi.ResourceClaim) string {
	keys := make([]string, len(claims))
	for i, c := range claims {
		keys[i] = keyOf(c)
	}
	return strings.Join(keys, ", ")
}

func keyOf(claim *resourceapi.ResourceClaim) string {
	if claim == nil {
		return "<nil>"
	}
	return allocator.ClaimKey(claim)
}
