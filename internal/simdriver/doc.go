// Package simdriver is a simulated DRA driver for nodes without hardware: it
// publishes node-local ResourceSlices for kwok nodes, as a kubelet plugin
// would, from a small inventory file.
//
// The inventory lists drivers; each driver publishes one pool per matching
// node with whole GPUs, GPUs with MIG-like partitions expressed as shared
// counters (the NVIDIA A100 40GB profile table of KEP-4815), NICs and CPUs.
// Every device carries resource.kubernetes.io/pcieRoot so that claims can
// align GPUs, NICs and CPUs on one PCIe root (a string on GPUs and NICs, a
// list on CPUs, KEP-5491).
//
// Render turns an inventory and a node into pools (a pure function);
// Start runs the publisher: it watches Nodes and keeps their slices in
// step through k8s.io/dynamic-resource-allocation/resourceslice, one
// controller per node and driver with the Node as owner.
package simdriver
