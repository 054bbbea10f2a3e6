// Package scale is the cluster-scale check of the pool controller and the
// operator's central allocation, on the real local control plane (package
// test/cluster): kwok nodes with slowed heartbeats, the simulated driver
// (package internal/simdriver) publishing a GPU driver with MIG-like partitions and a
// NIC driver on every node, multi-host domains from the operator's central
// publisher, and the operator under its own ServiceAccount and RBAC.
//
// Run measures, in order: the time from the last slice written to every
// DevicePool agreeing with the pure pool model (internal/pool); a burst of
// immediate claims for whole GPUs (allocations per second, latency from
// create to allocation seen in a watch); and the time to converge after a
// tenth of the nodes republish their pools under a new generation. It
// counts the operator's API requests by verb and resource, and, when the
// operator runs in a child process, its CPU time and peak RSS.
//
// `make bench-scale` runs it at 1,000 nodes (cmd/scalebench); the e2e
// suite runs it at 100 nodes and asserts correctness only (TestScale100).
package scale
