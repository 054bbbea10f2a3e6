package upstream

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// missingClass reports whether err is the upstream allocator failing to find
// a request's DeviceClass. kube-scheduler keeps such a pod pending until the
// class exists, so it makes the claim unsatisfiable, not invalid (the native
// engine says the same).
func missingClass(err error) bool {
	return apierrors.IsNotFound(err) && strings.Contains(err.Error(), "could not retrieve device class")
}

// invalidClaims turns any other upstream error (a selector that does not
// compile or fails at runtime, a request the features do not allow) into an
// InvalidClaimError for the claim the message names. The upstream allocator
// names a claim and a request, or a claim or class and a selector's index,
// but not the field; fieldOf works the field out from the claims, naming it
// as the native engine does where the message leaves no doubt and falling
// back to the claim's device requests where it does.
func invalidClaims(claims []*resourceapi.ResourceClaim, err error, compiles func(expr string) bool) error {
	claim, field := claimKeys(claims), "spec.devices"
	msg := err.Error()
	for _, c := range claims {
		prefix := "claim " + allocator.ClaimKey(c)
		if rest, ok := strings.CutPrefix(msg, prefix); ok && (strings.HasPrefix(rest, ",") || strings.HasPrefix(rest, ":")) {
			claim = allocator.ClaimKey(c)
			field = claimField(c, rest, compiles)
			break
		}
	}
	if class, n, ok := selectorRef(msg, "class "); ok {
		field = fmt.Sprintf("deviceclasses/%s: spec.selectors[%d].cel.expression", class, n)
		if users := classUsers(claims, class); len(users) == 1 {
			claim = allocator.ClaimKey(users[0])
		}
	}
	return &allocator.InvalidClaimError{Claim: claim, Field: field, Err: fmt.Errorf("upstream allocator: %w", err)}
}

// subRequest is one place a claim asks for devices: an exactly request or a
// firstAvailable subrequest, with its field path.
type subRequest struct {
	name      string
	field     string
	class     string
	selectors []resourceapi.DeviceSelector
}

// subRequests lists the exactly requests and firstAvailable subrequests of
// c in order, with the field paths the native engine uses.
func subRequests(c *resourceapi.ResourceClaim) []subRequest {
	var out []subRequest
	for i := range c.Spec.Devices.Requests {
		r := &c.Spec.Devices.Requests[i]
		if r.Exactly != nil {
			out = append(out, subRequest{r.Name, fmt.Sprintf("spec.devices.requests[%d].exactly", i), r.Exactly.DeviceClassName, r.Exactly.Selectors})
		}
		for j := range r.FirstAvailable {
			fa := &r.FirstAvailable[j]
			out = append(out, subRequest{r.Name + "/" + fa.Name, fmt.Sprintf("spec.devices.requests[%d].firstAvailable[%d]", i, j), fa.DeviceClassName, fa.Selectors})
		}
	}
	return out
}

// claimField is the field an upstream message about claim c points at;
// rest is the message after "claim NS/NAME". Messages name either a
// request (", request NAME:" or ", request NAME/SUB:") or a selector by its
// index among the request's selectors (": selector #N"). A selector index
// is ambiguous when several requests have that many selectors; for a
// compile error, compiles tells which of them fails.
func claimField(c *resourceapi.ResourceClaim, rest string, compiles func(expr string) bool) string {
	subs := subRequests(c)
	if name, ok := strings.CutPrefix(rest, ", request "); ok {
		if i := strings.IndexAny(name, ":,"); i >= 0 {
			name = name[:i]
		}
		main, _, _ := strings.Cut(name, "/")
		for _, sr := range subs {
			if sr.name == name {
				return sr.field
			}
		}
		for i := range c.Spec.Devices.Requests {
			if c.Spec.Devices.Requests[i].Name == main {
				return fmt.Sprintf("spec.devices.requests[%d]", i)
			}
		}
		return "spec.devices"
	}
	_, n, ok := selectorRef(rest, ": ")
	if !ok {
		return "spec.devices"
	}
	compileError := strings.Contains(rest, "CEL compile error")
	var found []string
	for _, sr := range subs {
		if n >= len(sr.selectors) || sr.selectors[n].CEL == nil {
			continue
		}
		if compileError && compiles != nil && compiles(sr.selectors[n].CEL.Expression) {
			continue
		}
		found = append(found, fmt.Sprintf("%s.selectors[%d].cel.expression", sr.field, n))
	}
	if len(found) == 1 {
		return found[0]
	}
	return "spec.devices"
}

// selectorRef parses "<prefix>NAME: selector #N" (prefix "class ") or
// "<prefix>selector #N" (prefix ": ") at the start of msg.
func selectorRef(msg, prefix string) (name string, n int, ok bool) {
	rest, ok := strings.CutPrefix(msg, prefix)
	if !ok {
		return "", 0, false
	}
	if prefix != ": " {
		name, rest, ok = strings.Cut(rest, ": ")
		if !ok {
			return "", 0, false
		}
	}
	rest, ok = strings.CutPrefix(rest, "selector #")
	if !ok {
		return "", 0, false
	}
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	n, err := strconv.Atoi(rest[:end])
	if err != nil {
		return "", 0, false
	}
	return name, n, true
}

// classUsers are the claims with a request for class.
func classUsers(claims []*resourceapi.ResourceClaim, class string) []*resourceapi.ResourceClaim {
	var out []*resourceapi.ResourceClaim
	for _, c := range claims {
		for _, sr := range subRequests(c) {
			if sr.class == class {
				out = append(out, c)
				break
			}
		}
	}
	return out
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
