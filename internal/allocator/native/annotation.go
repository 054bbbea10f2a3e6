package native

import "github.com/drastack/drastack/internal/allocator"

// annotationField is the field path of the annotation in errors.
const annotationField = allocator.CELConstraintsField

// parseCELConstraints reads the claim's CEL constraints annotation with the
// parser every component shares.
var parseCELConstraints = allocator.ParseCELConstraints
