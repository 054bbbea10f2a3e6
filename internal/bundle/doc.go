// Package bundle turns the output of `kustomize build config/manifests` into
// an OLM registry+v1 bundle in the layout operator-sdk's `generate bundle`
// produces: the ClusterServiceVersion with the manager Deployment and its
// RBAC folded in, one file per CRD and per other object OLM can carry,
// bundle/metadata/annotations.yaml and bundle.Dockerfile.
//
// operator-sdk cannot be fetched on our build machines, so this package is
// the generator behind `make bundle` (hack/bundlegen). Its output is fully
// deterministic (no createdAt timestamp) so that a regenerated bundle can be
// compared byte for byte with the committed one.
package bundle
