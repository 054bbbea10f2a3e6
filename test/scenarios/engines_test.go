package scenarios

import (
	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/native"
	"github.com/drastack/drastack/internal/allocator/upstream"
)

// engineUnderTest is an engine and what it is expected to support.
type engineUnderTest struct {
	allocator.Engine
	// celConstraints: the engine implements KEP-5254 CEL constraints. An
	// engine that does not must answer every claim carrying them with
	// allocator.ErrNotSupported, never with an allocation that ignores them.
	celConstraints bool
}

// engines lists the engines every scenario runs on. Add an engine here and
// every scenario checks it too.
func engines() []engineUnderTest {
	return []engineUnderTest{
		{Engine: native.New(), celConstraints: true},
		{Engine: upstream.New(), celConstraints: false},
	}
}
