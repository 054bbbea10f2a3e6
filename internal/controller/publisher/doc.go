// Package publisher is the central publisher for multi-host devices
// (KEP-4815). No kubelet plugin sees a device that spans several hosts, so
// the operator publishes those devices itself, from DRAStack
// spec.multiHost and the cluster's Nodes:
//
//   - every entry selects nodes with its nodeSelector (none: every node)
//     and groups them by the value of domainLabel; each domain is one pool,
//     named "<entry name>-<domain>" (the domain lower-cased with every other
//     character than a-z and 0-9 turned into "-", plus a short hash of the
//     raw value when that changed anything, so that two domains never share
//     a pool);
//   - each node's position in the domain's host grid is its
//     coordinatesLabel; internal/topology turns the grid, chips per host and
//     partition shapes into counter slices and device slices with
//     per-device node selection;
//   - the slices are written by k8s.io/dynamic-resource-allocation/resourceslice,
//     with the DRAStack as owner, so deleting the DRAStack garbage-collects
//     them, and the library bumps a pool's generation whenever its content
//     changes.
//
// The decisions (which nodes form which pool, what each pool publishes,
// what the status says) are pure functions in mapping.go and desired.go;
// the reconciler only reads Nodes and the DRAStack, calls them, hands the
// result to one resourceslice controller per driver and writes
// status.multiHost with server-side apply under its own field manager.
//
// # Ownership of node-less slices
//
// The resourceslice library reconciles every ResourceSlice of its driver
// name that has no spec.nodeName: a node-less slice of a pool it was not
// told about is deleted as obsolete, whoever wrote it. So a driver named in
// spec.multiHost belongs to this publisher for all of its node-less slices
// (nodeSelector, allNodes and perDeviceNodeSelection slices alike): no other
// component (a vendor's own central controller, a second operator) may
// publish node-less slices for that driver name. Node-local slices (with
// spec.nodeName, as kubelet plugins write them) are never touched, so a
// driver may still have a kubelet plugin for its node-local devices. When a
// driver leaves spec.multiHost its controller first removes its slices and
// is then stopped.
//
// # Which nodes are hosts
//
// A node is a usable host when it is selected, has a non-empty domain
// label, is not being deleted and is schedulable: a cordoned node
// (spec.unschedulable) counts as a missing host, because a pod that needs a
// device spanning it could not run there. Missing hosts, duplicate or
// out-of-grid coordinates are reported in status.multiHost[].problems, and
// the entry's missingHostPolicy decides whether the pool is withheld
// (Withhold, the default: a pool already published is removed) or published
// with only the devices whose hosts all exist (PublishAvailable). The
// readiness of a node is not looked at: node-local slices of kubelet
// plugins stay published while a node is NotReady too, and the scheduler
// already keeps pods off such nodes.
//
// Multi-host devices select their hosts by the kubernetes.io/hostname
// label (a node selector can only match labels); a node without that label
// is selected by its name, as on clusters where both agree.
//
// # Invalid entries
//
// An entry that internal/topology rejects (a shape that does not tile the
// grid, one that would need more counter sets per device than the API
// allows, a bad attribute) publishes nothing: its pools are removed, the
// reason is in status.multiHost[].problems, and a Warning Event on the
// DRAStack says so. Two entries of one driver whose pool names collide
// publish neither pool.
package publisher
