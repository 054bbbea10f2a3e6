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

// ClaimsSpec configures the operator's claim allocation. The operator's
// claims are those with a request for one of the classes of central, those
// that carry the resource.drastack.io/cel-constraints annotation, those
// labelled resource.drastack.io/allocation=Immediate and those that use one
// of immediateClasses. The operator allocates them only from central
// devices, which it keeps tainted NoSchedule so that kube-scheduler never
// allocates them: the two allocators never share a device. Every other claim
// is kube-scheduler's and the operator never touches it.
// +kubebuilder:validation:XValidation:rule="!has(self.placementTimeout) || duration(self.placementTimeout) >= duration('5s')",message="placementTimeout must be at least 5s"
// +kubebuilder:validation:XValidation:rule="!has(self.allocationTimeout) || (duration(self.allocationTimeout) >= duration('100ms') && duration(self.allocationTimeout) <= duration('5m'))",message="allocationTimeout must be between 100ms and 5m"
// +kubebuilder:validation:XValidation:rule="!has(self.gangTimeout) || duration(self.gangTimeout) >= duration('1s')",message="gangTimeout must be at least 1s"
type ClaimsSpec struct {
	// engine is the allocation engine the operator uses.
	// +kubebuilder:default=native
	// +optional
	Engine Engine `json:"engine,omitempty"`
	// central declares the devices only the operator allocates, and the
	// DeviceClasses whose claims it serves from them. The operator taints
	// these devices NoSchedule with the key resource.drastack.io/central
	// through DeviceTaintRules it owns (and in the slices it publishes
	// itself), so kube-scheduler never allocates them. A device selected by
	// several entries may serve the classes of each of them. Removing an
	// entry removes its taints; existing allocations stay valid.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Central []CentralDevices `json:"central,omitempty"`
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
	// placementTimeout is how long the pod of an allocated but not yet
	// reserved operator claim may stay unschedulable before the operator
	// deallocates the claim and places it again on another node (for
	// example after the chosen node was cordoned). Claims without a pod
	// (immediate claims) are never moved. At least 5s.
	// +kubebuilder:default="60s"
	// +optional
	PlacementTimeout *metav1.Duration `json:"placementTimeout,omitempty"`
	// allocationTimeout is the deadline of one engine call; an engine call
	// that runs longer fails for this attempt and is retried with backoff.
	// The default matches kube-scheduler's DRA filter timeout. Between 100ms
	// and 5m.
	// +kubebuilder:default="10s"
	// +optional
	AllocationTimeout *metav1.Duration `json:"allocationTimeout,omitempty"`
	// placementPolicy chooses among the placements that fit a claim, a
	// pod's claims or a gang: Pack (the default) keeps the most capacity
	// usable for later claims (counter sets and nodes already partly used
	// first, and on them the devices that break the smallest free
	// partition: a MIG slice into the hole of a partly used GPU rather
	// than onto a whole one); FirstFit takes the first node and devices
	// that fit, as kube-scheduler does. Both allocate exactly the claims
	// that fit; they differ only in which devices they take.
	// +kubebuilder:default=Pack
	// +optional
	PlacementPolicy PlacementPolicy `json:"placementPolicy,omitempty"`
	// gangTimeout is how long a gang (pods that name one PodGroup with a
	// gang policy, or share the resource.drastack.io/gang label) may have
	// fewer pods than its minimum count before the operator reports it
	// with a GangIncomplete Event on each waiting pod. The gang keeps
	// waiting: it is never placed in part. At least 1s.
	// +kubebuilder:default="5m"
	// +optional
	GangTimeout *metav1.Duration `json:"gangTimeout,omitempty"`
}

// CentralDevices selects devices of one driver that only the operator
// allocates: all of the driver's devices, the devices of the listed pools,
// or the devices of the node-local pools of the nodes matching nodeSelector.
// pools and nodeSelector are mutually exclusive, because their combination
// has no obvious meaning (union or intersection) and the taint rules each
// one needs differ; write two entries for a union.
// +kubebuilder:validation:XValidation:rule="!(has(self.pools) && has(self.nodeSelector))",message="pools and nodeSelector are mutually exclusive; use two entries for both"
type CentralDevices struct {
	// driver is the DRA driver name whose devices are central, as in
	// ResourceSlices, for example gpu.example.com.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Driver string `json:"driver"`
	// pools narrows the entry to these pools of the driver (names as in
	// spec.pool.name of the ResourceSlices). Without pools and without
	// nodeSelector every device of the driver is central.
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +optional
	Pools []string `json:"pools,omitempty"`
	// nodeSelector narrows the entry to the node-local pools (slices with
	// spec.nodeName) of the nodes whose labels match. Pools of nodes that
	// start or stop matching join or leave the entry; slices that are not
	// node-local are not selected by it.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// classes are the DeviceClass names whose claims the operator allocates
	// from these devices: a claim with a request for one of them is the
	// operator's, and its request gets only devices of entries that list
	// the class. The operator creates each of these DeviceClasses that does
	// not exist, with a selector no real device meets (only the operator's
	// own view of the central devices does), so that kube-scheduler can
	// never allocate their claims, webhook or no webhook; a class of the
	// same name it did not create is used as it is, and reported.
	// Claims with the CEL constraints annotation or the Immediate label
	// must use these classes (the operator's admission policies refuse
	// others).
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	Classes []string `json:"classes,omitempty"`
	// namespaces limits who may use the entry's devices: only claims in
	// these namespaces get them. Empty: every namespace.
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Namespaces []string `json:"namespaces,omitempty"`
	// allowImmediate lets claims labelled
	// resource.drastack.io/allocation=Immediate (a label any tenant may
	// set, which takes devices before any pod needs them) use the entry's
	// devices. Claims of spec.claims.immediateClasses are immediate by the
	// platform's choice and need no permission. Default false.
	// +optional
	AllowImmediate bool `json:"allowImmediate,omitempty"`
}

// PoolsSpec configures pool validation.
// +kubebuilder:validation:XValidation:rule="!has(self.resyncPeriod) || duration(self.resyncPeriod) >= duration('10s')",message="resyncPeriod must be at least 10s"
// +kubebuilder:validation:XValidation:rule="!has(self.incompleteGracePeriod) || duration(self.incompleteGracePeriod) >= duration('0s')",message="incompleteGracePeriod must be a duration of 0s or more"
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
