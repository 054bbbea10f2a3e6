package v1alpha1

import (
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MissingHostPolicy says what the publisher does with a domain whose host
// grid is incomplete.
// +kubebuilder:validation:Enum=Withhold;PublishAvailable
type MissingHostPolicy string

// Missing host policies.
const (
	// MissingHostWithhold publishes nothing for an incomplete domain.
	MissingHostWithhold MissingHostPolicy = "Withhold"
	// MissingHostPublishAvailable publishes only devices whose hosts all exist.
	MissingHostPublishAvailable MissingHostPolicy = "PublishAvailable"
)

// MultiHostSpec describes one family of multi-host devices. Every distinct
// value of domainLabel among the selected nodes becomes one pool; the
// operator publishes a counter slice and device slices with per-device
// node selection for it.
// +kubebuilder:validation:XValidation:rule="size(self.chipsPerHost) == size(self.hostGrid)",message="chipsPerHost must have one entry per hostGrid dimension"
// +kubebuilder:validation:XValidation:rule="self.partitions.all(p, size(p.split('x')) == size(self.hostGrid))",message="every partition shape must have one size per hostGrid dimension"
type MultiHostSpec struct {
	// name of this entry; pools are named <name>-<domain>.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// driver is the DRA driver name the slices are published under. The
	// publisher owns every node-less slice of this driver.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Driver string `json:"driver"`
	// nodeSelector selects the nodes that belong to some domain; without it
	// every node with the domainLabel is a candidate. Cordoned nodes count
	// as missing hosts.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// domainLabel is the node label whose value names a node's domain.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=316
	DomainLabel string `json:"domainLabel"`
	// coordinatesLabel is the node label holding the host's position in the
	// grid, one integer per dimension separated by dots, for example "1.0".
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=316
	CoordinatesLabel string `json:"coordinatesLabel"`
	// hostGrid is the number of hosts per dimension (1 to 3 dimensions).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=3
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=64
	// +listType=atomic
	HostGrid []int32 `json:"hostGrid"`
	// chipsPerHost is the number of chips per host per dimension.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=3
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=64
	// +listType=atomic
	ChipsPerHost []int32 `json:"chipsPerHost"`
	// partitions are the allowed device shapes in chips, for example 2x2,
	// 2x4, 4x4; each aligned placement of each shape becomes a device.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Pattern=`^[1-9][0-9]{0,3}(x[1-9][0-9]{0,3}){0,2}$`
	// +kubebuilder:validation:items:MaxLength=14
	// +listType=set
	Partitions []string `json:"partitions"`
	// attributes are added to every device, keyed by qualified name.
	// +kubebuilder:validation:MaxProperties=16
	// +optional
	Attributes map[resourcev1.QualifiedName]resourcev1.DeviceAttribute `json:"attributes,omitempty"`
	// missingHostPolicy says what to publish when a domain's grid has
	// missing hosts: Withhold publishes nothing for that domain,
	// PublishAvailable publishes only the devices whose hosts all exist.
	// +kubebuilder:default=Withhold
	// +optional
	MissingHostPolicy MissingHostPolicy `json:"missingHostPolicy,omitempty"`
}

// Engine names an allocation engine.
// +kubebuilder:validation:Enum=native;upstream
type Engine string

// Allocation engines.
const (
	// EngineNative is drastack's own engine, with CEL constraints.
	EngineNative Engine = "native"
	// EngineUpstream is the allocator kube-scheduler runs; no CEL constraints.
	EngineUpstream Engine = "upstream"
)

// ClaimsSpec configures the operator's claim allocation. Claims that carry
// the resource.drastack.io/cel-constraints annotation, claims labelled
// resource.drastack.io/allocation=Immediate and claims that use one of
// immediateClasses are allocated by the operator as soon as they exist; all
// others are left to kube-scheduler.
type ClaimsSpec struct {
	// engine is the allocation engine the operator uses.
	// +kubebuilder:default=native
	// +optional
	Engine Engine `json:"engine,omitempty"`
	// immediateClasses are DeviceClass names whose claims are allocated as
	// soon as they exist, before any pod uses them.
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	// +optional
	ImmediateClasses []string `json:"immediateClasses,omitempty"`
	// gatePods holds pods whose claims the operator must allocate with a
	// scheduling gate until those claims are allocated, so kube-scheduler
	// does not allocate them without their CEL constraints.
	// +kubebuilder:default=true
	// +optional
	GatePods *bool `json:"gatePods,omitempty"`
}

// PoolsSpec configures pool validation.
// +kubebuilder:validation:XValidation:rule="!has(self.resyncPeriod) || duration(self.resyncPeriod) >= duration('10s')",message="resyncPeriod must be at least 10s"
type PoolsSpec struct {
	// resyncPeriod is how often every pool is revalidated even without
	// changes, to catch missed events.
	// +kubebuilder:default="5m"
	// +optional
	ResyncPeriod *metav1.Duration `json:"resyncPeriod,omitempty"`
	// incompleteGracePeriod is how long a pool may miss slices of its
	// current generation (normal while a driver republishes) before that is
	// reported as a problem; also how long a DevicePool outlives its pool.
	// +kubebuilder:default="2m"
	// +optional
	IncompleteGracePeriod *metav1.Duration `json:"incompleteGracePeriod,omitempty"`
	// maxProblems caps the problems listed in a DevicePool's status; the
	// rest are counted.
	// +kubebuilder:default=20
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=200
	// +optional
	MaxProblems int32 `json:"maxProblems,omitempty"`
}
