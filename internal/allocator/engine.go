// Package allocator defines the allocation engine interface shared by the
// native engine, the upstream adapter, the claim controller, kubectl-dra and
// the benchmark harness.
//
// An engine turns a snapshot of the cluster (slices, classes, nodes and the
// claims that are already allocated) into allocation results for claims that
// are not. It never talks to the API server: callers give it the state and
// write the results.
package allocator

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
)

// CELConstraintsAnnotation carries KEP-5254 CEL constraints on a claim: a JSON
// array of {"requests": [...], "expression": "..."}. The API server of
// Kubernetes 1.34-1.37 has no field for them, so they travel as an annotation
// (and are copied from a ResourceClaimTemplate's spec.metadata.annotations).
const CELConstraintsAnnotation = "resource.drastack.io/cel-constraints"

// Inputs is the cluster state an allocation reads. Engines must not modify
// any object they are given.
type Inputs struct {
	// Slices are all ResourceSlices, of every generation; engines use only
	// complete, valid pools at their current generation.
	Slices []*resourceapi.ResourceSlice
	// Classes are all DeviceClasses.
	Classes []*resourceapi.DeviceClass
	// Nodes are the candidate nodes. A central allocator (Options.Node empty)
	// chooses among them.
	Nodes []*corev1.Node
	// Allocated are claims that already have status.allocation: their
	// devices are in use and their counters consumed.
	Allocated []*resourceapi.ResourceClaim
	// TaintRules are DeviceTaintRules. With Features.DeviceTaintRules on,
	// the NoSchedule and NoExecute taint of a rule applies to every device
	// the rule selects, as if the slice listed it: such a device is not
	// allocated unless the request tolerates the taint.
	TaintRules []resourceapi.DeviceTaintRule
	// Features are the feature gates to allocate under, as kube-scheduler
	// with the same gates would; nil means DefaultFeatures.
	Features *Features
}

// Options tune one Allocate call.
type Options struct {
	// Node restricts the allocation to devices reachable from this node, like
	// one kube-scheduler Filter call. Empty means the engine picks a node
	// itself (or none, when the devices need none).
	Node string
	// MaxSteps bounds the search (devices tried); 0 means the engine default.
	// Exceeding it fails with ErrSearchBound instead of running away.
	MaxSteps int64
	// Policy chooses among the placements that fit (see PlacementPolicy);
	// empty means PlacementFirstFit, kube-scheduler's behaviour, so that
	// callers comparing engines get the same answers as before. The
	// upstream engine places first fit whatever the policy: it is
	// kube-scheduler's allocator, and that is what it does.
	Policy PlacementPolicy
}

// Result is the allocation of one claim.
type Result struct {
	// Claim is the claim this result is for (the object passed in).
	Claim *resourceapi.ResourceClaim
	// Allocation is what goes into claim.status.allocation. Engines leave
	// AllocationTimestamp unset; writers set it.
	Allocation *resourceapi.AllocationResult
	// Node is the node the allocation was made for; empty when the result
	// needs no node (only allNodes or per-device node selection devices).
	Node string
}

// Engine creates sessions. An engine may keep caches that outlive sessions
// (for example compiled CEL and per-device selector results keyed by slice
// UID and resourceVersion).
type Engine interface {
	// Name is "native" or "upstream".
	Name() string
	// NewSession prepares allocation over a snapshot of the cluster.
	NewSession(ctx context.Context, in Inputs) (Session, error)
}

// Session allocates claims against one snapshot. Claims allocated through a
// session are not in use until Record is called with them, so callers decide
// whether a result is kept (for example after writing it to the API server).
// A Session is not safe for concurrent use.
type Session interface {
	// Allocate allocates all claims together (the claims of one pod), or none.
	// It returns one Result per claim in the same order. When the claims
	// cannot be allocated it returns an error that satisfies
	// errors.Is(err, ErrUnsatisfiable) with a message saying why. Invalid
	// claims (bad CEL, a broken annotation) return an *InvalidClaimError.
	// Context cancellation is honoured.
	Allocate(ctx context.Context, claims []*resourceapi.ResourceClaim, opts Options) ([]Result, error)
	// Record marks the devices of an allocated claim (claim.Status.Allocation
	// set) as in use, consuming their counters, for later Allocate calls.
	Record(claim *resourceapi.ResourceClaim) error
}

// Sentinel errors; wrap them with the reason.
var (
	// ErrUnsatisfiable means the claims cannot be allocated in this state.
	ErrUnsatisfiable = errors.New("cannot allocate all claims")
	// ErrNotSupported means the engine does not implement a feature the claim
	// uses (for example CEL constraints in the upstream engine).
	ErrNotSupported = errors.New("not supported by this engine")
	// ErrSearchBound means the search gave up after Options.MaxSteps.
	ErrSearchBound = errors.New("search bound exceeded")
)

// InvalidClaimError is a claim that can never be allocated as written: the
// caller should report it (an Event on the claim) and not retry until the
// claim changes.
type InvalidClaimError struct {
	// Claim is namespace/name.
	Claim string
	// Field is the path of the offending field, for example
	// "spec.devices.requests[0].exactly.selectors[1].cel.expression" or
	// "metadata.annotations[resource.drastack.io/cel-constraints]".
	Field string
	// Err is the underlying problem.
	Err error
}

func (e *InvalidClaimError) Error() string {
	return fmt.Sprintf("claim %s: %s: %v", e.Claim, e.Field, e.Err)
}

func (e *InvalidClaimError) Unwrap() error { return e.Err }

// ClaimKey returns namespace/name for messages.
func ClaimKey(claim *resourceapi.ResourceClaim) string {
	return claim.Namespace + "/" + claim.Name
}
