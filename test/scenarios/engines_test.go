package scenarios

import (
	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/native"
)

// engines lists the engines every scenario runs on. Add an engine here and
// every scenario checks it too.
func engines() []allocator.Engine {
	return []allocator.Engine{native.New()}
}
