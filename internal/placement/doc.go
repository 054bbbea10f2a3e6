// Package placement decides whether a pod fits a node the way kube-scheduler's
// Filter plugins would, leaving out DRA (the engine decides devices).
//
// The claim controller places a gated pod's operator claims on a node and
// then lifts the gate; kube-scheduler must bind the pod to exactly that node,
// because the allocation pins it there. If the controller chose a node
// kube-scheduler would refuse (cordoned, tainted, outside the pod's node
// selector or affinity, or full), the pod would stay Pending for good. So
// the controller filters candidate nodes here first, with the same helpers
// kube-scheduler uses (k8s.io/component-helpers) and its messages.
//
// Covered filters, in kube-scheduler's order: NodeUnschedulable, NodeName,
// TaintToleration, NodeAffinity (nodeSelector and required node affinity),
// NodeResourcesFit for cpu, memory and the pod count. Not covered: host
// ports, volumes and their topology, inter-pod affinity, topology spread,
// extended and other scalar resources. A node this package accepts can
// therefore still be refused by kube-scheduler for those; the claim
// controller's placement timeout recovers from that.
package placement
