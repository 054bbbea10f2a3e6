package operator

import (
	"os"
	"runtime/debug"
)

// memoryLimitShare is the part of the container's memory limit that
// becomes the Go runtime's soft memory limit: the rest is for what the
// runtime does not count (memory the kernel holds for the process,
// fragmentation, pages not yet returned).
const memoryLimitShare = 0.9

// softMemoryLimit is the Go runtime's soft memory limit for a container
// memory limit (bytes; not positive: none), unless GOMEMLIMIT is set
// (gomemlimit, its value), which the runtime has applied already and
// which wins.
func softMemoryLimit(containerLimit int64, gomemlimit string) (int64, bool) {
	if containerLimit <= 0 || gomemlimit != "" {
		return 0, false
	}
	return int64(float64(containerLimit) * memoryLimitShare), true
}

// applyMemoryLimit sets the runtime's soft memory limit from the
// container's (Options.MemoryLimit) and returns it (0: unchanged). Without
// it the collector lets the heap grow to twice what is live before it
// collects: at 1,000 nodes that is well over the 1 GiB the Deployment
// allows, though less than half of it is live (docs/performance.md).
func applyMemoryLimit(containerLimit int64) int64 {
	limit, ok := softMemoryLimit(containerLimit, os.Getenv("GOMEMLIMIT"))
	if !ok {
		return 0
	}
	debug.SetMemoryLimit(limit)
	return limit
}
