// Package verify checks an allocation result against the cluster state it
// was made from, independently of any engine.
//
// It re-derives every rule of SEMANTICS.md from the inputs: it does not call
// an engine, shares no code with the native engine, and uses only the shared
// pool model (internal/pool), the selector evaluator kube-scheduler uses
// (k8s.io/dynamic-resource-allocation/cel) and its own CEL-constraint
// evaluator. The differential test and the scenario tests run every engine
// result through it, so an engine that returns a wrong allocation (and not
// only one that disagrees with another engine) is caught.
//
// What it does not check: that a firstAvailable request got its *first*
// satisfiable subrequest (that needs a search), binding conditions, and
// per-slice size limits. Consumable capacity is checked with the semantics
// of kube-scheduler 1.36/1.37 without fractional capacity ranges.
package verify

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/pool"
)

// Rule names the check a violation comes from, so that callers and tests can
// tell them apart without parsing messages.
type Rule string

// The rules, one per check.
const (
	// RuleAllocation: the allocation is missing or malformed.
	RuleAllocation Rule = "Allocation"
	// RuleRequest: a result names no request (or subrequest) of the claim,
	// or a request's class does not exist.
	RuleRequest Rule = "Request"
	// RuleSubrequest: a firstAvailable request got results from more than
	// one subrequest, or a plain request was given a subrequest name.
	RuleSubrequest Rule = "Subrequest"
	// RuleCount: a request got more or fewer devices than ExactCount asks,
	// or an All request did not get exactly all matching devices.
	RuleCount Rule = "Count"
	// RuleDevice: a device does not exist in a complete, valid pool at the
	// pool's current generation.
	RuleDevice Rule = "Device"
	// RuleSelector: a class or request CEL selector does not hold (or fails).
	RuleSelector Rule = "Selector"
	// RuleTaint: a device has a NoSchedule or NoExecute taint the request
	// does not tolerate.
	RuleTaint Rule = "Taint"
	// RuleAdminAccess: a result's adminAccess differs from its request's.
	RuleAdminAccess Rule = "AdminAccess"
	// RuleDoubleAllocation: a device is given twice in the claim, or is
	// already allocated to another claim without admin access.
	RuleDoubleAllocation Rule = "DoubleAllocation"
	// RuleMatchAttribute: a matchAttribute constraint does not hold.
	RuleMatchAttribute Rule = "MatchAttribute"
	// RuleDistinctAttribute: a distinctAttribute constraint does not hold.
	RuleDistinctAttribute Rule = "DistinctAttribute"
	// RuleCELConstraint: a KEP-5254 constraint from the annotation does not
	// hold, fails, or the annotation is malformed.
	RuleCELConstraint Rule = "CELConstraint"
	// RuleCounters: the allocation over-consumes a shared counter.
	RuleCounters Rule = "Counters"
	// RuleNode: the node the allocation was made for cannot reach a device,
	// or the allocation needs a node and none was given.
	RuleNode Rule = "Node"
	// RuleNodeSelector: the allocation's node selector is not the one its
	// devices call for.
	RuleNodeSelector Rule = "NodeSelector"
	// RuleShare: a share of a shared device (allowMultipleAllocations) has
	// no share ID, reuses one, or states another consumption than its
	// request and the device's request policy give; or a device that is
	// not shared carries a share ID or consumed capacity.
	RuleShare Rule = "Share"
	// RuleCompatibilityGroups: devices drawing on one counter set have no
	// compatibility group in common (KEP-5963, with the gate on).
	RuleCompatibilityGroups Rule = "CompatibilityGroups"
	// RuleCapacity: a request names a capacity the device lacks, consumes
	// what the capacity's request policy does not allow, or the shares of
	// a device consume more than its capacity.
	RuleCapacity Rule = "Capacity"
)

// Violation is one broken rule.
type Violation struct {
	Rule Rule
	// Claim is namespace/name.
	Claim string
	// Device is driver/pool/device when the violation is about one device.
	Device  string
	Message string
}

func (v *Violation) Error() string {
	if v.Device != "" {
		return fmt.Sprintf("claim %s: %s: device %s: %s", v.Claim, v.Rule, v.Device, v.Message)
	}
	return fmt.Sprintf("claim %s: %s: %s", v.Claim, v.Rule, v.Message)
}

// Checker checks allocations against one snapshot of inputs. Building it
// indexes pools, devices in use and consumed counters once, so checking
// many claims against the same state is cheap. It is safe for concurrent
// use: Check does not modify it.
type Checker struct {
	in allocator.Inputs
	// features are the gates of in (allocator.FeaturesOf).
	features allocator.Features
	pools    map[pool.ID]*pool.Pool
	devices  map[deviceID]*pool.Device
	classes  map[string]*resourceapi.DeviceClass
	nodes    map[string]*corev1.Node
	// inUse maps devices allocated without admin access (and without a
	// share ID) to a claim holding them.
	inUse map[deviceID]string
	// shares are the results with a share ID (KEP-5075) per device.
	shares map[deviceID][]*resourceapi.DeviceRequestAllocationResult
	// consumed is what Inputs.Allocated consume, per pool, counter set and counter.
	consumed map[pool.ID]counterUse
}

// Check checks one allocation of claim, made for node ("" when it was made
// without a node), against in. It returns every violation found; none means
// the allocation is correct.
func Check(in allocator.Inputs, claim *resourceapi.ResourceClaim, alloc *resourceapi.AllocationResult, node string) []error {
	return New(in).Check(claim, alloc, node)
}

// Check checks one allocation of claim made for node against the checker's
// inputs. The claim's own status is ignored: alloc is what is checked, and
// Inputs.Allocated must not contain the claim itself.
func (c *Checker) Check(claim *resourceapi.ResourceClaim, alloc *resourceapi.AllocationResult, node string) []error {
	k := &check{Checker: c, claim: claim, key: allocator.ClaimKey(claim), alloc: alloc, node: node}
	if alloc == nil {
		k.fail(RuleAllocation, "", "allocation is nil")
		return k.errs
	}
	k.resolveNode()
	k.resolveResults()
	k.checkCounts()
	k.checkDevices()
	k.checkConstraints()
	k.checkCELConstraints()
	k.checkCounters()
	k.checkCompatibilityGroups()
	k.checkCapacity()
	k.checkNodeSelector()
	return k.errs
}

// check is the state of one Check call.
type check struct {
	*Checker
	claim *resourceapi.ResourceClaim
	key   string
	alloc *resourceapi.AllocationResult
	node  string
	// nodeObj is the node object for node (nil when node is empty).
	nodeObj *corev1.Node
	// results are the allocation's results resolved against the claim.
	results []result
	errs    []error
}

func (k *check) fail(rule Rule, device, format string, args ...any) {
	k.errs = append(k.errs, &Violation{Rule: rule, Claim: k.key, Device: device, Message: fmt.Sprintf(format, args...)})
}
