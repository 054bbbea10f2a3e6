// Package driver decides everything about a DRA driver's lifecycle that
// needs no Kubernetes client: which manifests a DRAStack driver entry
// renders to, how a driver's observed state becomes DRAStack status, and
// what the next step of a safe removal is.
//
// Profiles (example, nvidia-gpu, custom) are kustomize bases embedded in the
// binary, one small Go file each behind the Profile interface, with their
// manifests in numbered files applied in order. Render builds them in
// memory with sigs.k8s.io/kustomize/api: the DRAStack fields are applied to
// the base workloads first, then kustomize sets the namespace, name prefix
// and labels and applies the user's patches, so patches see (and may
// override) everything the operator set. Nothing here reads the cluster;
// internal/controller/driver moves data between the API server and these
// functions.
package driver
