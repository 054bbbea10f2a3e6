package native

import (
	"context"
	"errors"
	"fmt"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
)

// This file is the engine's hook for explanations (internal/allocator/explain):
// it reports, per request, how the devices reachable from a node shrink
// under the same predicates the search applies (selector results from
// evalSelector, taints from tolerated, use from inUse, counters from
// countersFree, capacity from fit and capacityLeft), so an explanation
// cannot disagree with what the engine would consider. Constraints are not
// reported here: they depend on combinations, and the engine's own message
// from Allocate says which one failed.

// Funnel steps, in the order a Stage list holds them.
const (
	// StepNode: the devices reachable from the node (all drivers).
	StepNode = "node"
	// StepClassSelector: one CEL selector of the request's DeviceClass.
	StepClassSelector = "classSelector"
	// StepSelector: one CEL selector of the request itself.
	StepSelector = "selector"
	// StepGates: devices the gates refuse (binding conditions without
	// DRADeviceBindingConditions and DRAResourceClaimDeviceStatus,
	// skipNodeOperations without DRAOptionalNodeOperations or on a node
	// that does not declare it, counters without DRAPartitionableDevices)
	// and devices whose compatibility groups the devices already
	// allocated from their counter set exclude.
	StepGates = "gates"
	// StepTaints: devices with a NoSchedule or NoExecute taint the request
	// does not tolerate.
	StepTaints = "taints"
	// StepAllocated: devices already allocated to other claims.
	StepAllocated = "allocated"
	// StepCounters: devices whose counters (or whose pool's counters) do
	// not have enough left.
	StepCounters = "counters"
	// StepCapacity: shared devices without enough capacity left for the
	// request.
	StepCapacity = "capacity"
)

// DeviceRef names a device as allocation results do.
type DeviceRef struct {
	Driver, Pool, Device string
}

// String is driver/pool/device.
func (d DeviceRef) String() string { return d.Driver + "/" + d.Pool + "/" + d.Device }

// FunnelStage is one step of a Funnel: what was left after it and which
// devices it removed.
type FunnelStage struct {
	// Step is one of the Step constants.
	Step string
	// Selector is the index of the selector among the class's (or the
	// request's) selectors, for the selector steps.
	Selector int
	// Expression is the selector's CEL expression, for the selector steps.
	Expression string
	// Left is the number of devices still candidates after this step.
	Left int
	// Removed are the devices this step removed, in snapshot order.
	Removed []DeviceRef
	// Reasons say, for the gates step, why it removed devices: the gate
	// that is off and the field that needs it, or what else refused them.
	// Each reason once, sorted.
	Reasons []string
	// Capacity says, for the capacity step, what each removed device
	// lacks, in the order of Removed.
	Capacity []CapacityShort
}

// CapacityShort is why a device cannot serve a request's capacity
// requests: a consumption that does not fit what its shares leave (Needed
// and Left set), or Reason (a capacity the device lacks, a consumption its
// request policy does not allow or that exceeds the whole capacity).
type CapacityShort struct {
	Device DeviceRef
	// Capacity is the capacity's name.
	Capacity string
	// Needed is what the request consumes of it; Left what the device's
	// shares leave.
	Needed, Left string
	// Reason is set when the device could not serve the request even
	// unused.
	Reason string
}

// Funnel is how the candidates of one request (or subrequest) shrink on
// one node.
type Funnel struct {
	// Request is "req" or "req/sub".
	Request string
	// Class is the DeviceClass name.
	Class string
	// Count is the number of devices needed (1 or more), 0 for All.
	Count int
	// AdminAccess: devices in use stay candidates.
	AdminAccess bool
	// Stages in order; the first is StepNode.
	Stages []FunnelStage
	// Err is why the request has no funnel on this node (a selector that
	// fails at run time).
	Err error
}

// Funnel reports, for each request and subrequest of claim, how the devices
// reachable from node shrink under the engine's predicates, in the state of
// the session (recorded claims in use). An empty node means devices that
// need no node. A claim that cannot be planned (an invalid claim, a class
// that does not exist) returns the error Allocate would return.
func (s *Session) Funnel(ctx context.Context, claim *resourceapi.ResourceClaim, node string) ([]Funnel, error) {
	p, err := s.buildPlan([]*resourceapi.ResourceClaim{claim})
	if err != nil {
		return nil, err
	}
	if p.deferred != nil {
		return nil, p.deferred
	}
	ni := -1
	if node != "" {
		i, ok := s.nodeIdx[node]
		if !ok {
			return nil, fmt.Errorf("node %s is not in the session", node)
		}
		ni = i
	}
	var reach []int32
	if ni >= 0 {
		reach = append(reach, s.local[ni]...)
	}
	for _, d := range s.sharedDevs {
		if s.reachable(d, ni) {
			reach = append(reach, d)
		}
	}
	var out []Funnel
	for i := range p.slots {
		for b := range p.slots[i].subs {
			sb := &p.slots[i].subs[b]
			f, err := s.funnel(ctx, sb, ni, reach)
			if err != nil && ctx.Err() != nil {
				return out, err
			}
			out = append(out, f)
		}
	}
	return out, nil
}

// funnel computes one request's funnel over the reachable devices.
func (s *Session) funnel(ctx context.Context, sb *sub, ni int, reach []int32) (Funnel, error) {
	f := Funnel{Request: sb.name, Class: sb.class.Name, Count: sb.count, AdminAccess: sb.admin}
	if sb.all {
		f.Count = 0
	}
	left := slices.Clone(reach)
	f.Stages = append(f.Stages, FunnelStage{Step: StepNode, Left: len(left)})
	keep := func(st FunnelStage, ok func(d int32) (bool, error)) error {
		out := left[:0]
		for _, d := range left {
			m, err := ok(d)
			if err != nil {
				return err
			}
			if m {
				out = append(out, d)
			} else {
				st.Removed = append(st.Removed, s.ref(d))
			}
		}
		left = out
		st.Left = len(left)
		f.Stages = append(f.Stages, st)
		return nil
	}
	nClass := len(s.classInfo(sb.class).exprs)
	for i, expr := range sb.cs.exprs {
		st := FunnelStage{Step: StepClassSelector, Selector: i, Expression: expr}
		if i >= nClass {
			st.Step, st.Selector = StepSelector, i-nClass
		}
		err := keep(st, func(d int32) (bool, error) { return s.evalSelector(ctx, expr, d) })
		if err != nil {
			f.Err = err
			return f, err
		}
	}
	nodeOps := ni >= 0 && s.declaresNodeOps(ni)
	steps := []struct {
		step string
		ok   func(d int32) bool
	}{
		{StepGates, func(d int32) bool { return s.refusal(d, nodeOps) == "" }},
		{StepTaints, func(d int32) bool {
			dev := &s.devs[d]
			return !dev.hardTaints || tolerated(dev.dev.Taints, sb.tolerations)
		}},
		{StepAllocated, func(d int32) bool { return sb.admin || s.devs[d].multi || !s.inUse[d] }},
		{StepCounters, func(d int32) bool { return s.countersFree(d, 0) }},
		{StepCapacity, func(d int32) bool {
			fit := s.fit(sb, d)
			return fit.err == nil && s.capacityLeft(d, fit)
		}},
	}
	for _, st := range steps {
		_ = keep(FunnelStage{Step: st.step}, func(d int32) (bool, error) { return st.ok(d), nil })
	}
	for i := range f.Stages {
		st := &f.Stages[i]
		for _, r := range st.Removed {
			d := s.byID[deviceID{r.Driver, r.Pool, r.Device}]
			switch st.Step {
			case StepGates:
				st.Reasons = append(st.Reasons, s.refusal(d, nodeOps))
			case StepCapacity:
				st.Capacity = append(st.Capacity, s.capacityShort(sb, d))
			}
		}
		slices.Sort(st.Reasons)
		st.Reasons = slices.Compact(st.Reasons)
	}
	return f, nil
}

// refusal says why the gates, or the compatibility groups of the devices
// already allocated, keep device d off a node (nodeOps: the node declares
// DRAOptionalNodeOperations); empty when nothing does. The search tests
// the same flags (search.allowed, device.unselectable).
func (s *Session) refusal(d int32, nodeOps bool) string {
	dev := &s.devs[d]
	switch {
	case dev.unselectable:
		return "DRADeviceBindingConditions and DRAResourceClaimDeviceStatus are not both on: the device has binding conditions"
	case dev.refused && dev.usesCounters && !s.f.PartitionableDevices:
		return "DRAPartitionableDevices is off: the device consumes counters"
	case dev.refused:
		return "DRAOptionalNodeOperations is off: the device's slice skips node operations"
	case dev.nodeOps && !nodeOps:
		return "the node does not declare DRAOptionalNodeOperations, which the device's slice needs to skip node operations"
	case !s.compatAdmits(d, 0):
		return "its compatibility groups share none with the devices allocated from its counter set"
	}
	return ""
}

// capacityShort says what device d lacks to serve alternative sb (the
// capacity step removed it).
func (s *Session) capacityShort(sb *sub, d int32) CapacityShort {
	out := CapacityShort{Device: s.ref(d)}
	f := s.fit(sb, d)
	caps := s.devs[d].caps
	switch {
	case f.err != nil:
		out.Reason = f.err.Error()
		return out
	case len(f.consumed) == 0:
		for name := range sb.capacity {
			if !slices.ContainsFunc(caps, func(c devCap) bool { return c.name == name }) {
				out.Capacity = string(name)
				out.Reason = "the device has no capacity " + string(name)
				return out
			}
		}
	}
	used := s.capUsed[d]
	for k := range caps {
		c, v := &caps[k], f.consumed[k]
		out.Capacity, out.Needed = string(c.name), v.String()
		switch {
		case violatesPolicy(v, c.policy, s.f.FractionalCapacityRange):
			out.Reason = fmt.Sprintf("its request policy does not allow consuming %s", v.String())
			return out
		case v.Cmp(c.value) > 0:
			out.Reason = fmt.Sprintf("needs %s, the whole capacity is %s", v.String(), c.value.String())
			return out
		}
		left := c.value.DeepCopy()
		if used != nil {
			left.Sub(used[k])
		}
		if v.Cmp(left) > 0 {
			out.Left = left.String()
			return out
		}
	}
	out.Capacity, out.Needed = "", ""
	out.Reason = "the device cannot serve the request"
	return out
}

func (s *Session) ref(d int32) DeviceRef {
	id := s.devs[d].id
	return DeviceRef{Driver: id.driver, Pool: id.pool, Device: id.device}
}

// SkippedPool is an incomplete or invalid pool the engine does not use,
// or one with slices a gate that is off hides from it.
type SkippedPool struct {
	Driver, Pool string
	// Why is the DevicePool health and reason code, for example
	// "Invalid, MissingCounter" or "Incomplete, IncompletePool: 1 of 2 slices",
	// or for slices a gate hides, FeatureGateDisabled and the gate, for
	// example "FeatureGateDisabled: DRAPartitionableDevices is off and
	// slice s1 selects nodes per device".
	Why string
}

// SkippedPools lists the incomplete or invalid pools, and those with
// slices a gate that is off hides, with a slice reachable from node
// (empty: pools that need no node).
func (s *Session) SkippedPools(node string) []SkippedPool {
	ni := -1
	if node != "" {
		i, ok := s.nodeIdx[node]
		if !ok {
			return nil
		}
		ni = i
	}
	var out []SkippedPool
	for _, list := range [][]badPool{s.badPools, s.gatedPools} {
		for i := range list {
			bp := &list[i]
			if s.badPoolVisible(bp, ni) {
				out = append(out, SkippedPool{Driver: bp.id.Driver, Pool: bp.id.Pool, Why: bp.why})
			}
		}
	}
	return out
}

// CandidateNodes are the nodes a central allocation chooses from, in order.
func (s *Session) CandidateNodes() []string {
	out := make([]string, 0, s.candidates)
	for _, n := range s.nodes[:s.candidates] {
		out = append(out, n.Name)
	}
	return out
}

// ErrNotNative is returned by AsSession for sessions of other engines.
var ErrNotNative = errors.New("explanations need a session of the native engine")

// AsSession returns the native session behind an allocator.Session.
func AsSession(s any) (*Session, error) {
	ns, ok := s.(*Session)
	if !ok {
		return nil, ErrNotNative
	}
	return ns, nil
}
