package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PoolHealth is a pool's overall state.
// +kubebuilder:validation:Enum=Healthy;Incomplete;Invalid;Degraded
type PoolHealth string

// Pool health values (SEMANTICS.md).
const (
	// PoolHealthy: complete, valid, allocations consistent.
	PoolHealthy PoolHealth = "Healthy"
	// PoolIncomplete: the current generation is missing slices.
	PoolIncomplete PoolHealth = "Incomplete"
	// PoolInvalid: a validation rule is broken; allocators ignore the pool.
	PoolInvalid PoolHealth = "Invalid"
	// PoolDegraded: valid, but allocations disagree with the slices.
	PoolDegraded PoolHealth = "Degraded"
)

// DevicePool reports one resource pool, identified by (driver, pool): its
// slices, devices, counters, health and problems. It is written only by the
// operator; the name is derived from driver and pool, and the real names
// are in status.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=pool;pools,categories=dra
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Driver",type=string,JSONPath=`.status.driver`
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.status.pool`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.node`
// +kubebuilder:printcolumn:name="Devices",type=integer,JSONPath=`.status.devices.total`
// +kubebuilder:printcolumn:name="Allocated",type=integer,JSONPath=`.status.devices.allocated`
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.devices.available`
// +kubebuilder:printcolumn:name="Free-Sets",type=string,JSONPath=`.status.fragmentation.freeCapacity`,description="Free capacity of the shared counters, in counter sets (GPUs, hosts)"
// +kubebuilder:printcolumn:name="Largest-Free",type=string,JSONPath=`.status.fragmentation.largestAvailable`,description="Partition type of the largest device the counters leave room for"
// +kubebuilder:printcolumn:name="Health",type=string,JSONPath=`.status.health`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type DevicePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// status is the operator's report on the pool.
	// +optional
	Status DevicePoolStatus `json:"status,omitempty"`
}

// DevicePoolStatus is the operator's report on one pool.
type DevicePoolStatus struct {
	// driver is the DRA driver name.
	// +optional
	Driver string `json:"driver,omitempty"`
	// pool is the pool name within the driver.
	// +optional
	Pool string `json:"pool,omitempty"`
	// node is set for node-local pools.
	// +optional
	Node string `json:"node,omitempty"`
	// generation is the pool's current generation.
	// +optional
	Generation int64 `json:"generation,omitempty"`
	// slices counts the pool's ResourceSlices.
	// +optional
	Slices SliceCounts `json:"slices,omitempty"`
	// devices counts the pool's devices by state.
	// +optional
	Devices DeviceCounts `json:"devices,omitempty"`
	// partitionSummary counts, per partition type, the pool's partitionable
	// devices (devices that consume shared counters) and how many of them
	// are available right now, like the partitionSummary of the alpha
	// ResourcePoolStatusRequest. A device's partition type is the value of
	// the string attribute its slice's partitionTypeAttribute names or,
	// when the slice sets none, of the driver's own "profile" attribute
	// (what NVIDIA's GPU driver publishes for MIG devices); devices with
	// neither attribute are left out. Sorted by attribute, then type.
	// +listType=map
	// +listMapKey=attribute
	// +listMapKey=type
	// +optional
	PartitionSummary []PartitionTypeStatus `json:"partitionSummary,omitempty"`
	// fragmentation says whether the free capacity of the pool's shared
	// counters is in one piece: the free capacity next to the largest
	// partition available now. Set for allocatable pools with counter
	// sets.
	// +optional
	Fragmentation *PoolFragmentation `json:"fragmentation,omitempty"`
	// counterSets are the pool's shared counters with their consumption by
	// allocated devices.
	// +listType=map
	// +listMapKey=name
	// +optional
	CounterSets []CounterSetStatus `json:"counterSets,omitempty"`
	// health is Healthy, Incomplete, Invalid or Degraded.
	// +optional
	Health PoolHealth `json:"health,omitempty"`
	// reason is the reason code of the most important problem, if any.
	// +optional
	Reason string `json:"reason,omitempty"`
	// healthTransitionTime is when health last changed.
	// +optional
	HealthTransitionTime *metav1.Time `json:"healthTransitionTime,omitempty"`
	// incompleteSince is when the pool's current generation was first seen
	// incomplete; unset when complete.
	// +optional
	IncompleteSince *metav1.Time `json:"incompleteSince,omitempty"`
	// problems found, most severe first, capped by spec.pools.maxProblems.
	// +listType=atomic
	// +optional
	Problems []PoolProblem `json:"problems,omitempty"`
	// moreProblems counts problems not listed.
	// +optional
	MoreProblems int32 `json:"moreProblems,omitempty"`
	// conditions: Valid, Complete, Consistent, and for node-local pools
	// NodePresent (false when the pool's node no longer exists).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SliceCounts counts a pool's slices.
type SliceCounts struct {
	// current is the number of slices of the current generation.
	Current int32 `json:"current"`
	// expected is resourceSliceCount of the current generation.
	Expected int32 `json:"expected"`
	// stale is the number of slices of older generations.
	// +optional
	Stale int32 `json:"stale,omitempty"`
}

// DeviceCounts counts a pool's devices.
type DeviceCounts struct {
	// total devices in the current generation.
	Total int32 `json:"total"`
	// allocated devices: named by an allocation without adminAccess in
	// some claim (shared devices included; overlaps with tainted).
	Allocated int32 `json:"allocated"`
	// tainted devices: with a NoSchedule or NoExecute taint from their
	// slice or from a DeviceTaintRule (overlaps with allocated).
	Tainted int32 `json:"tainted"`
	// free is the same number as available; kept for clients that read
	// it before available existed.
	Free int32 `json:"free"`
	// available devices: what a request without tolerations or admin
	// access could be given right now: the pool is complete and valid,
	// the device is not in use, not tainted, and its counters fit.
	// available plus the fields of unavailable is total.
	// +optional
	Available int32 `json:"available"`
	// shared counts the available devices that allow multiple allocations
	// and already serve some: shared devices with capacity left.
	// +optional
	Shared int32 `json:"shared,omitempty"`
	// unavailable counts the devices that are not available, each under
	// the first reason that applies.
	// +optional
	Unavailable UnavailableDevices `json:"unavailable,omitempty"`
}

// UnavailableDevices says why devices are not available. Each device is
// counted once, under the first of poolUnusable, allocated, tainted and
// blockedByCounters that applies.
//
// Its counts are always written (no omitempty): an all-zero object must not
// become an empty one, which server-side apply sends as null and the API
// server refuses for an object-typed field.
type UnavailableDevices struct {
	// poolUnusable: the pool is incomplete or invalid, so the scheduler
	// allocates none of its devices.
	// +optional
	PoolUnusable int32 `json:"poolUnusable"`
	// allocated: in use by an allocation without adminAccess (or a shared
	// device with a capacity used up).
	// +optional
	Allocated int32 `json:"allocated"`
	// tainted: a NoSchedule or NoExecute taint from the device's slice or
	// from a DeviceTaintRule keeps requests without a toleration away.
	// +optional
	Tainted int32 `json:"tainted"`
	// blockedByCounters: the device would over-consume a shared counter
	// that allocated devices consume (or the pool's counters are already
	// over-consumed, which blocks every counter-consuming device).
	// +optional
	BlockedByCounters int32 `json:"blockedByCounters"`
}

// PartitionTypeStatus counts the devices of one partition type.
type PartitionTypeStatus struct {
	// attribute is the fully qualified name of the device attribute whose
	// value is the partition type: the slice's partitionTypeAttribute, or
	// <driver>/profile when the slice sets none.
	Attribute string `json:"attribute"`
	// type is the partition type (the attribute's value, e.g. "1g.5gb").
	Type string `json:"type"`
	// total devices of this type in the pool.
	Total int32 `json:"total"`
	// allocatable devices of this type: available right now (see
	// devices.available).
	Allocatable int32 `json:"allocatable"`
}

// PoolFragmentation measures capacity in counter sets (a GPU, the chips of
// a host): a device's size is, summed over the counter sets it draws on,
// the share of the set it consumes, averaged over the set's counters (a
// 7g.40gb MIG partition of an A100 is about 1, a 1g.5gb about 0.1, a
// multi-host slice over four hosts 4). After many arrivals and departures
// the free capacity can be large while the largest available partition
// is small: small partitions scattered over every GPU.
type PoolFragmentation struct {
	// counterSets with capacity in the pool.
	CounterSets int32 `json:"counterSets"`
	// wholeCounterSetsFree: counter sets nothing consumes (whole GPUs or
	// hosts).
	WholeCounterSetsFree int32 `json:"wholeCounterSetsFree"`
	// freeCapacity is the free capacity in counter sets: each set's free
	// share (averaged over its counters), summed.
	FreeCapacity resource.Quantity `json:"freeCapacity"`
	// largestAvailable is the partition type (see partitionSummary) of the
	// largest device the pool's counters leave room for right now (not
	// allocated; taints aside, so that devices only the operator
	// allocates count); empty when there is none.
	// +optional
	LargestAvailable string `json:"largestAvailable,omitempty"`
	// largestAvailableSize is that device's size in counter sets.
	// +optional
	LargestAvailableSize *resource.Quantity `json:"largestAvailableSize,omitempty"`
}

// CounterSetStatus is one shared counter set.
type CounterSetStatus struct {
	// name of the counter set.
	Name string `json:"name"`
	// counters with capacity and consumption.
	// +listType=map
	// +listMapKey=name
	// +optional
	Counters []CounterStatus `json:"counters,omitempty"`
}

// CounterStatus is one counter of a counter set.
type CounterStatus struct {
	// name of the counter.
	Name string `json:"name"`
	// capacity published by the driver.
	Capacity resource.Quantity `json:"capacity"`
	// consumed by allocated devices.
	Consumed resource.Quantity `json:"consumed"`
}

// PoolProblem is one finding about a pool.
type PoolProblem struct {
	// reason is a reason code (IncompletePool, MissingCounter, ...).
	Reason string `json:"reason"`
	// severity is Error or Warning.
	// +kubebuilder:validation:Enum=Error;Warning
	Severity string `json:"severity"`
	// slice where the problem is, if in one slice.
	// +optional
	Slice string `json:"slice,omitempty"`
	// device where the problem is, if in one device.
	// +optional
	Device string `json:"device,omitempty"`
	// message explains the problem.
	Message string `json:"message"`
}

// +kubebuilder:object:root=true

// DevicePoolList is a list of DevicePools.
type DevicePoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DevicePool `json:"items"`
}

func init() {
	SchemeBuilder.Register(&DevicePool{}, &DevicePoolList{})
}
