// Package explain says why claims are or are not allocated (issue 13).
//
// An explanation is computed by the native engine itself, so it can never
// disagree with an allocation: whether the claims fit on a node is the
// answer of Session.Allocate with Options.Node set to that node, and how the
// candidates of each request shrink is the engine's Funnel, which applies
// the search's own predicates (selectors, taints, use, counters, capacity).
// The pool model adds what the engine does not keep: which claims hold a
// device, and how much of a counter is left in the counter's own unit.
//
// The output shape is the contract of docs/cli-explain.md.
package explain

// Report is the explanation for one claim or for the claims of one pod
// (allocated together, all or none).
type Report struct {
	// Claims are the claims explained, namespace/name.
	Claims []string `json:"claims"`
	// Fits: a central allocation of the claims succeeds.
	Fits bool `json:"fits"`
	// Verdict is one line: where the claims would go, or the closest miss.
	Verdict string `json:"verdict"`
	// Node is where a central allocation puts the claims (empty when they
	// need no node or do not fit).
	Node string `json:"node,omitempty"`
	// Devices are the devices of that allocation, "claim request:
	// driver/pool/device".
	Devices []string `json:"devices,omitempty"`
	// Reason is the engine's message when the claims do not fit (or are
	// invalid).
	Reason string `json:"reason,omitempty"`
	// Invalid is set when a claim can never be allocated as written; Reason
	// then names the field.
	Invalid bool `json:"invalid,omitempty"`
	// Closest names the nodes of the group whose funnel got furthest, when
	// the claims do not fit.
	Closest []string `json:"closest,omitempty"`
	// Groups are the candidate nodes, nodes that look alike together, in
	// the order of the first node of each group. Without candidate nodes
	// there is one group with no nodes: the devices that need none.
	Groups []NodeGroup `json:"groups"`
	// NodesExamined counts the nodes explained; StoppedEarly says why not
	// all candidate nodes were (the deadline), empty when they were.
	NodesExamined int    `json:"nodesExamined"`
	NodesTotal    int    `json:"nodesTotal"`
	StoppedEarly  string `json:"stoppedEarly,omitempty"`
	// NodeFilters are the nodes a pod's node filters ruled out, by name,
	// with kube-scheduler's reason (pods only); FilterSummary counts them
	// as a FailedScheduling event does.
	NodeFilters   []NodeFilter `json:"nodeFilters,omitempty"`
	FilterSummary string       `json:"filterSummary,omitempty"`
}

// NodeGroup is the explanation for nodes whose accounts are the same.
type NodeGroup struct {
	// Nodes in this group, in candidate order (empty: no node).
	Nodes []string `json:"nodes"`
	// Fits: Allocate on each of these nodes succeeds.
	Fits bool `json:"fits"`
	// Devices chosen on the first node of the group, when it fits.
	Devices []string `json:"devices,omitempty"`
	// Message is the engine's reason on the first node, when it does not
	// fit (constraints included).
	Message string `json:"message,omitempty"`
	// Requests has one funnel per request and subrequest of every claim.
	Requests []Request `json:"requests"`
	// SkippedPools are incomplete or invalid pools visible from the nodes.
	SkippedPools []SkippedPool `json:"skippedPools,omitempty"`
}

// Request is how the candidates of one request or subrequest shrink.
type Request struct {
	// Claim is namespace/name.
	Claim string `json:"claim"`
	// Request is "req" or "req/sub".
	Request string `json:"request"`
	// Class is the DeviceClass.
	Class string `json:"class"`
	// Count is the number of devices needed; 0 means All.
	Count int `json:"count"`
	// Steps in order: node, classSelector..., selector..., gates, taints,
	// allocated, counters, capacity.
	Steps []Step `json:"steps"`
	// Error is why there is no funnel (a selector failing at run time).
	Error string `json:"error,omitempty"`
}

// Step is one step of a funnel.
type Step struct {
	// Step is node, classSelector, selector, gates, taints, allocated,
	// counters or capacity.
	Step string `json:"step"`
	// Selector is the 0-based index of the selector (selector steps).
	Selector *int `json:"selector,omitempty"`
	// Expression is the selector's CEL expression (selector steps).
	Expression string `json:"expression,omitempty"`
	// Left is the number of candidates after this step.
	Left int `json:"left"`
	// Removed is the number of candidates this step removed.
	Removed int `json:"removed"`
	// Holders are the claims holding the removed devices (allocated step).
	Holders []string `json:"holders,omitempty"`
	// Counters are the counters that ran short (counters step).
	Counters []CounterShort `json:"counters,omitempty"`
	// Reasons say why the gates step removed devices: a gate that is off
	// and the field that needs it, or what else refused them.
	Reasons []string `json:"reasons,omitempty"`
	// Capacities say what the devices the capacity step removed lack.
	Capacities []CapacityShort `json:"capacities,omitempty"`
}

// CapacityShort is what one shared device lacks for a request's capacity
// requests: Needed and Left, or a Reason when it could not serve the
// request even unused.
type CapacityShort struct {
	// Device is driver/pool/device.
	Device string `json:"device"`
	// Capacity is the capacity's name.
	Capacity string `json:"capacity,omitempty"`
	// Needed is what the request would consume of it, Left what the
	// device's shares leave.
	Needed string `json:"needed,omitempty"`
	Left   string `json:"left,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// CounterShort is one counter too short for some removed devices.
type CounterShort struct {
	// Pool is driver/pool.
	Pool       string `json:"pool"`
	CounterSet string `json:"counterSet"`
	Counter    string `json:"counter"`
	// Needed is the largest amount a removed device needs; Left what the
	// counter has left.
	Needed string `json:"needed"`
	Left   string `json:"left"`
	// Devices counts the removed devices short of this counter.
	Devices int `json:"devices"`
}

// SkippedPool is a pool the engine does not use.
type SkippedPool struct {
	// Pool is driver/pool.
	Pool string `json:"pool"`
	// Why is the DevicePool health and reason code.
	Why string `json:"why"`
}
