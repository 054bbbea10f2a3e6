// Package clusterprobe finds out what DRA features a cluster really has.
//
// Discovery tells which resource.k8s.io versions are served, but not which
// feature gates are on: a gated field is accepted on write and silently
// dropped when its gate is off. So the probe sends server-side dry-run
// writes that use each feature and checks whether the returned object kept
// the field. Dry-run writes persist nothing.
package clusterprobe
