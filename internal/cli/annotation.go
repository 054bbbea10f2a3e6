package cli

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/drastack/drastack/internal/allocator"
)

// checkCELConstraintsAnnotation checks the shape of a claim's CEL
// constraints annotation (SEMANTICS.md). The native engine checks it too,
// but the upstream engine only says it does not support CEL constraints;
// checking here makes a broken annotation invalid input (exit 1) whichever
// engine runs.
func checkCELConstraintsAnnotation(c *resourceapi.ResourceClaim) error {
	_, err := allocator.ParseCELConstraints(c)
	return err
}
