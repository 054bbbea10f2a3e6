// Package stack holds the DRAStack decisions that need no client: spec
// validation beyond what OpenAPI and CEL can say at admission, the feature
// requirements a spec implies, and how the Ready condition and the summary
// columns follow from the other conditions.
package stack
