package pool

import (
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Report is everything DevicePool status, `kubectl dra validate` and the
// metrics say about one pool.
type Report struct {
	ID
	// Node is set for node-local pools (Pool.Node).
	Node           string
	Generation     int64
	Slices         int
	ExpectedSlices int64
	StaleSlices    int
	Health         Health
	Devices        DeviceCounts
	// CounterSets sorted by name, each with its counters sorted by name.
	CounterSets []CounterSetReport
	// Problems: the pool's structural problems, IncompletePool after the
	// grace period, and allocation problems; sorted with CompareProblems.
	Problems []Problem
	// IncompleteFor is how long the pool has been incomplete (0 if complete).
	IncompleteFor time.Duration
	// Availability splits the devices into available and unavailable by
	// why.
	Availability Availability
	// Partitions summarises partitionable devices per partition type,
	// sorted by attribute and type (see partitionOf).
	Partitions []PartitionReport
	// Fragmentation of the pool's counter capacity; nil for a pool
	// without counter sets or one that is not allocatable (incomplete,
	// invalid).
	Fragmentation *Fragmentation
}

// DeviceCounts summarises a pool's devices.
type DeviceCounts struct {
	// Total devices of the current generation.
	Total int
	// Allocated devices: named by at least one allocation without
	// adminAccess.
	Allocated int
	// AdminAccess devices: named by at least one allocation with
	// adminAccess (they may be Allocated too).
	AdminAccess int
	// Tainted devices: with a NoSchedule or NoExecute taint in the slice
	// or from a DeviceTaintRule given to AssessPool.
	Tainted int
	// Free devices: what a request without tolerations or admin access
	// could get right now: the pool is allocatable, the device is not in
	// use, not tainted, and its counters fit. 0 when the pool is not
	// allocatable.
	Free int
}

// CounterSetReport is one counter set with capacity and consumption.
type CounterSetReport struct {
	Name     string
	Slice    string
	Counters []CounterReport
}

// CounterReport is one counter: its capacity and what allocated devices
// consume (exact quantities).
type CounterReport struct {
	Name     string
	Capacity resource.Quantity
	Consumed resource.Quantity
}
