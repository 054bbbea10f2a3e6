// Package driver decides everything about a DRA driver's lifecycle that
// needs no Kubernetes client: which manifests a DRAStack driver entry
// renders to, how a driver's observed state becomes DRAStack status, and
// what the next step of a safe removal is.
//
// Profiles (example, nvidia-gpu, amd-gpu, intel-gpu, dranet, custom) are
// kustomize bases embedded in the binary, one small Go file each behind the
// Profile interface (the vendor profiles without options share
// profile_vendors.go), with their manifests in numbered files applied in
// order; a profile's fixed/ folder holds the objects whose names its driver
// expects. Render builds them in memory with sigs.k8s.io/kustomize/api: a
// profile's typed options (nvidia-gpu) and the DRAStack fields are applied
// to the base objects first, then kustomize sets the name prefix, the
// namespace and labels and applies the user's patches, so patches see (and
// may override) everything the operator set. Each vendor profile has a
// fidelity test that holds it to its vendor's chart at the pinned release. Nothing here reads the cluster;
// internal/controller/driver moves data between the API server and these
// functions.
package driver
