// Package central decides which devices only the operator allocates.
//
// kube-scheduler and the operator's claim controller both allocate devices,
// and the API server does not arbitrate between two allocators writing the
// same devices. So they never share one: the devices selected by
// spec.claims.central are "central", the operator keeps them tainted
// NoSchedule with its own key (TaintKey) through DeviceTaintRules it owns,
// kube-scheduler never allocates a device so tainted, and the operator
// allocates its claims only from central devices, tolerating its own taint
// and honouring every other.
//
// Everything here is pure: the caller lists entries, ResourceSlices, Nodes
// and DeviceTaintRules, and writes what the functions decide. The partition
// is pool-granular (a pool is wholly central or not), because every way an
// entry selects devices (a driver, pools, the node-local pools of nodes)
// names whole pools, and because a pool split between two allocators would
// have them share its counters.
package central
