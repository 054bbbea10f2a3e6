package cli

import (
	"slices"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/native"
	"github.com/drastack/drastack/internal/allocator/upstream"
)

// defaultEngine is what simulate uses without --engine.
const defaultEngine = "native"

// DefaultEngines are the engines simulate offers: drastack's own and the
// adapter over kube-scheduler's allocator, so a user can compare them on
// the same files.
func DefaultEngines() map[string]func() allocator.Engine {
	return map[string]func() allocator.Engine{
		"native":   func() allocator.Engine { return native.New() },
		"upstream": upstream.New,
	}
}

// engineNames lists the engine names in order, for help and errors.
func engineNames(engines map[string]func() allocator.Engine) []string {
	names := make([]string, 0, len(engines))
	for n := range engines {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
