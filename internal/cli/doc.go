// Package cli implements kubectl-dra, the drastack kubectl plugin (the
// README's kubectl-dra section and docs/cli-explain.md are the contract):
//
//   - validate: read ResourceSlices, DeviceClasses, ResourceClaims and Nodes
//     from YAML files, group the slices into pools and report each pool's
//     health and problems with the reason codes of internal/pool;
//   - simulate: allocate the unallocated claims of those files in document
//     order with the native or the upstream engine (--explain: say why
//     each is or is not allocated);
//   - explain: why a claim or a pod is or is not allocated, in the state
//     of the files or live;
//   - pools: the live view of the DevicePools of a cluster.
//
// Everything lives here rather than in cmd/kubectl-dra so that the whole
// command, including flag parsing, exit codes and output, is tested by
// calling Run.
package cli
