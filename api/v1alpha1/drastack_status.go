package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types of a DRAStack.
const (
	// ConditionReady is true when the whole stack is valid, compatible and
	// every part reports ready.
	ConditionReady = "Ready"
	// ConditionSpecValid is false when the spec has values the operator
	// cannot act on; the reason says which field.
	ConditionSpecValid = "SpecValid"
	// ConditionClusterCompatible is false when the cluster lacks an API or
	// feature the spec needs.
	ConditionClusterCompatible = "ClusterCompatible"
	// ConditionDriversReady is true when every driver is installed and ready.
	ConditionDriversReady = "DriversReady"
	// ConditionPoolsHealthy is true when every device pool is Healthy.
	ConditionPoolsHealthy = "PoolsHealthy"
	// ConditionClaimsReady is true when the claim controller keeps up.
	ConditionClaimsReady = "ClaimsReady"
	// ConditionProgressing is true while a driver rolls out.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is true when a driver runs but does not work.
	ConditionDegraded = "Degraded"
)

// DRAStackStatus reports what the operator observed.
type DRAStackStatus struct {
	// observedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready, SpecValid, ClusterCompatible, DriversReady,
	// PoolsHealthy, ClaimsReady, Progressing, Degraded.
	// Ready is True only when SpecValid and ClusterCompatible are True,
	// DriversReady is True and reported for every driver of spec.drivers
	// (so never before a new driver is installed), ClaimsReady is not False
	// and Degraded is not True; otherwise its reason and message are those of the first
	// condition that holds it back. PoolsHealthy does not count: a broken
	// pool is the vendor's data plane, not the operator.
	// SpecValid is False when the spec has values the operator cannot act on.
	// ClusterCompatible is False when the cluster lacks an API or feature the
	// spec needs.
	// DriversReady is True when every driver of spec.drivers serves: its
	// kubelet plugin runs and is ready on every node it targets (at least
	// one node), those nodes publish ResourceSlices, its controllers and
	// DeviceClasses exist and the cluster has what it needs. An upgrade that
	// keeps every node publishing keeps it True (Progressing tells the
	// upgrade). When False, its reason is the first unready driver's
	// (Installing, WaitingForSlices, NoMatchingNodes, ImagePullBackOff,
	// CrashLoopBackOff, NotPublishing, RolloutStalled, ApplyFailed,
	// ApplyConflict, InvalidSpec, FeatureMissing).
	// Progressing is True while a driver installs, rolls out, waits for
	// its first ResourceSlices or is removed; a rollout past its
	// updateStrategy.progressDeadlineSeconds keeps it True with reason
	// RolloutStalled.
	// Degraded is True when something will not heal by waiting: a failing
	// plugin (ImagePullBackOff, CrashLoopBackOff, ...), a stalled rollout
	// (RolloutStalled), a plugin that publishes nothing (NotPublishing), an
	// object that cannot be applied.
	// PoolsHealthy is True when every device pool is Healthy.
	// ClaimsReady is False when the claim controller cannot keep up.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// summary holds short strings for kubectl's table.
	// +optional
	Summary *StackSummary `json:"summary,omitempty"`

	// cluster is what the cluster supports, found by discovery and by
	// server-side dry-run writes.
	// +optional
	Cluster *ClusterStatus `json:"cluster,omitempty"`

	// drivers reports each driver of the spec.
	// +listType=map
	// +listMapKey=name
	// +optional
	Drivers []DriverStatus `json:"drivers,omitempty"`

	// multiHost reports each multi-host entry of the spec.
	// +listType=map
	// +listMapKey=name
	// +optional
	MultiHost []MultiHostStatus `json:"multiHost,omitempty"`

	// pools counts DevicePools by health.
	// +optional
	Pools *PoolCounts `json:"pools,omitempty"`

	// claims counts the claims the operator allocates.
	// +optional
	Claims *ClaimCounts `json:"claims,omitempty"`
}

// StackSummary holds short human-readable counts for printer columns.
type StackSummary struct {
	// drivers is "ready/total" drivers.
	// +optional
	Drivers string `json:"drivers,omitempty"`
	// pools is "healthy/total" device pools.
	// +optional
	Pools string `json:"pools,omitempty"`
}

// ClusterStatus is what the cluster's API server supports.
type ClusterStatus struct {
	// kubernetesVersion is the API server's git version.
	// +optional
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// resourceAPIVersions are the served versions of resource.k8s.io, newest first.
	// +listType=atomic
	// +optional
	ResourceAPIVersions []string `json:"resourceAPIVersions,omitempty"`
	// features are the DRA features the API server really keeps, found by
	// server-side dry-run writes: a field the server drops means its
	// feature gate is off.
	// +optional
	Features ClusterFeatures `json:"features,omitempty"`
	// lastProbeTime is when the cluster was last probed.
	// +optional
	LastProbeTime *metav1.Time `json:"lastProbeTime,omitempty"`
}

// ClusterFeatures are DRA features and whether the API server keeps them.
// Each is named after what it lets a driver, a claim or the operator do; the
// doc of each field names its Kubernetes feature gate. A feature found by a
// dry-run write is true only when the API server kept the gated field; the
// scheduler and the kubelet need the same gate, which no API call can show.
type ClusterFeatures struct {
	// partitionableDevices: shared counters and per-device node selection in
	// ResourceSlices (KEP-4815, feature gate DRAPartitionableDevices).
	PartitionableDevices bool `json:"partitionableDevices"`
	// listTypeAttributes: list-valued device attributes such as strings: [...]
	// (KEP-5491, feature gate DRAListTypeAttributes).
	ListTypeAttributes bool `json:"listTypeAttributes"`
	// deviceTaints: taints on devices in ResourceSlices and tolerations in
	// claims (KEP-5055, feature gate DRADeviceTaints).
	DeviceTaints bool `json:"deviceTaints"`
	// deviceTaintRules: the DeviceTaintRule API is served, found by discovery
	// (KEP-5055). The API server serves it whenever its API version is
	// enabled: v1 by default from Kubernetes 1.37, v1beta2 in 1.36 only with
	// --runtime-config. kube-scheduler honours the rules only with feature
	// gate DRADeviceTaintRules (GA and on by default from 1.37, beta and off
	// in 1.36), which no API request can show.
	DeviceTaintRules bool `json:"deviceTaintRules"`
	// deviceTaintRulesVersion is the resource.k8s.io version DeviceTaintRules
	// are served in, the newest when several are: v1 from Kubernetes 1.37,
	// v1beta2 in 1.36. Empty when deviceTaintRules is false.
	// +optional
	DeviceTaintRulesVersion string `json:"deviceTaintRulesVersion,omitempty"`
	// prioritizedList: firstAvailable in claim requests (KEP-4816, feature
	// gate DRAPrioritizedList).
	PrioritizedList bool `json:"prioritizedList"`
	// consumableCapacity: devices that allow multiple allocations with a
	// capacity requestPolicy, and capacity requests in claims (KEP-5075,
	// feature gate DRAConsumableCapacity).
	ConsumableCapacity bool `json:"consumableCapacity"`
	// bindingConditions: bindsToNode, bindingConditions and
	// bindingFailureConditions on devices, which make the scheduler wait for
	// the device before binding the pod (KEP-5007, feature gates
	// DRADeviceBindingConditions and DRAResourceClaimDeviceStatus).
	BindingConditions bool `json:"bindingConditions"`
	// compatibilityGroups: compatibilityGroups on a device's counter
	// consumption, which limit which partitions of one counter set may be
	// allocated together (KEP-5963, feature gate DRADeviceCompatibilityGroups).
	CompatibilityGroups bool `json:"compatibilityGroups"`
	// partitionType: partitionTypeAttribute on a ResourceSlice, naming the
	// device attribute that labels each partition's type (feature gate
	// DRAPartitionableDevicesType).
	PartitionType bool `json:"partitionType"`
	// optionalNodeOperations: skipNodeOperations on a ResourceSlice, so the
	// kubelet skips a driver's prepare and unprepare calls for its devices
	// (KEP-5945, feature gate DRAOptionalNodeOperations).
	OptionalNodeOperations bool `json:"optionalNodeOperations"`
	// derivedAttributes: derivedAttributes in claim requests, attributes
	// computed by CEL per device for matchAttribute and distinctAttribute
	// constraints (KEP-6080, feature gate DRADerivedAttributes).
	DerivedAttributes bool `json:"derivedAttributes"`
	// adminAccess: adminAccess in claim requests, for monitoring devices
	// that other claims use (KEP-5018, feature gate DRAAdminAccess). Such
	// claims are allowed only in namespaces labelled
	// resource.kubernetes.io/admin-access=true.
	AdminAccess bool `json:"adminAccess"`
	// extendedResources: extendedResourceName on DeviceClasses, so pods that
	// request an extended resource get devices of that class through DRA
	// (KEP-5004, feature gate DRAExtendedResource).
	ExtendedResources bool `json:"extendedResources"`
	// resourcePoolStatusRequests: the ResourcePoolStatusRequest API is
	// served, found by discovery. The API server serves it when its alpha
	// API version is enabled with --runtime-config; kube-controller-manager
	// answers the requests only with feature gate DRAResourcePoolStatus,
	// which no API request can show.
	ResourcePoolStatusRequests bool `json:"resourcePoolStatusRequests"`
	// resourcePoolStatusRequestsVersion is the resource.k8s.io version
	// ResourcePoolStatusRequests are served in (v1alpha3 in Kubernetes 1.36
	// and 1.37). Empty when resourcePoolStatusRequests is false.
	// +optional
	ResourcePoolStatusRequestsVersion string `json:"resourcePoolStatusRequestsVersion,omitempty"`
	// granularStatusAuthorization: changing a claim's status.allocation or
	// status.reservedFor needs update or patch on the subresource
	// resourceclaims/binding, besides resourceclaims/status (feature gate
	// DRAResourceClaimGranularStatusAuthorization). No API call can show
	// what the server requires of a client that holds the permission, so
	// this is derived from the server version: true from Kubernetes 1.36,
	// where the gate is beta and on by default. A cluster that turned the
	// gate off still reports true.
	GranularStatusAuthorization bool `json:"granularStatusAuthorization"`
}

// DriverStatus reports one driver.
type DriverStatus struct {
	// name is the DRA driver name.
	Name string `json:"name"`
	// ready is true when the driver serves: the plugin runs and is ready on
	// every node it targets (at least one) and those nodes publish
	// ResourceSlices. It stays true during an upgrade that keeps every node
	// publishing.
	Ready bool `json:"ready"`
	// version is the image tag the operator deployed.
	// +optional
	Version string `json:"version,omitempty"`
	// image the operator deployed.
	// +optional
	Image string `json:"image,omitempty"`
	// nodesDesired is the number of nodes the plugin targets.
	NodesDesired int32 `json:"nodesDesired"`
	// nodesReady is the number of nodes with a ready plugin.
	NodesReady int32 `json:"nodesReady"`
	// nodesUpdated is the number of nodes whose plugin of the current
	// version is running and ready; a pending or failing new pod does not
	// count.
	NodesUpdated int32 `json:"nodesUpdated"`
	// nodesPublishing is the number of nodes with ResourceSlices of the driver.
	NodesPublishing int32 `json:"nodesPublishing"`
	// deviceClasses present in the cluster for this driver.
	// +listType=atomic
	// +optional
	DeviceClasses []string `json:"deviceClasses,omitempty"`
	// removal reports a removal in progress.
	// +optional
	Removal *DriverRemovalStatus `json:"removal,omitempty"`
	// reason is a CamelCase word for the driver's state: Ready, or
	// Installing, RollingOut (ready when every node still publishes),
	// WaitingForSlices, NoMatchingNodes (the nodeSelector or the profile's
	// node affinity leaves no node), ImagePullBackOff, ErrImagePull,
	// CrashLoopBackOff, NotPublishing, RolloutStalled, ApplyConflict,
	// ApplyFailed, InvalidSpec, FeatureMissing, DevicePluginConflict (the
	// nvidia-gpu GPU plugin is kept off nodes where NVIDIA's device plugin
	// serves nvidia.com/gpu), Removing.
	// +optional
	Reason string `json:"reason,omitempty"`
	// message explains the driver's state.
	// +optional
	Message string `json:"message,omitempty"`
}

// DriverRemovalStatus reports a driver removal that waits for claims.
type DriverRemovalStatus struct {
	// phase of the removal: Tainting (new allocations are being stopped),
	// Draining (allocated claims still use the devices, or custom
	// resources of the profile's definitions exist), Deleting (the
	// workloads are being deleted), Cleaning (leftover ResourceSlices and
	// the taint are being deleted).
	Phase string `json:"phase"`
	// since is when the removal started.
	Since metav1.Time `json:"since"`
	// blockingClaims are allocated claims (namespace/name) that still use
	// the driver's devices; at most 20 are listed.
	// +listType=atomic
	// +optional
	BlockingClaims []string `json:"blockingClaims,omitempty"`
	// blockingClaimCount is how many allocated claims still use the
	// driver's devices, including those not listed.
	// +optional
	BlockingClaimCount int32 `json:"blockingClaimCount,omitempty"`
	// blockingResources are custom resources ("Kind namespace/name") of
	// the CustomResourceDefinitions the driver's profile installs, for
	// example NVIDIA ComputeDomains, that a Drain removal waits for: the
	// driver's controller must still run to finalize them, and the
	// definitions are never deleted while they have custom resources. At
	// most 20 are listed.
	// +listType=atomic
	// +optional
	BlockingResources []string `json:"blockingResources,omitempty"`
	// blockingResourceCount is how many such custom resources exist,
	// including those not listed.
	// +optional
	BlockingResourceCount int32 `json:"blockingResourceCount,omitempty"`
	// policy is the removal policy in force: Drain or Force.
	// +optional
	Policy RemovalPolicy `json:"policy,omitempty"`
}

// MultiHostStatus reports one multi-host entry.
type MultiHostStatus struct {
	// name of the spec entry.
	Name string `json:"name"`
	// pools published (withheld and rejected pools are not counted).
	Pools int32 `json:"pools"`
	// hosts usable in all domains (selected, schedulable, at a valid and
	// unique grid position), withheld pools included.
	Hosts int32 `json:"hosts"`
	// devices published in all pools.
	Devices int32 `json:"devices"`
	// slices published in all pools (counter and device slices).
	Slices int32 `json:"slices"`
	// problems found in the topology (missing hosts, duplicate or
	// out-of-grid coordinates, impossible shapes).
	// +listType=atomic
	// +optional
	Problems []string `json:"problems,omitempty"`
}

// PoolCounts counts DevicePools by health.
type PoolCounts struct {
	// total pools.
	Total int32 `json:"total"`
	// healthy pools.
	Healthy int32 `json:"healthy"`
	// incomplete pools.
	Incomplete int32 `json:"incomplete"`
	// invalid pools.
	Invalid int32 `json:"invalid"`
	// degraded pools.
	Degraded int32 `json:"degraded"`
}

// ClaimCounts counts claims the operator is responsible for.
type ClaimCounts struct {
	// pending claims waiting for allocation.
	Pending int32 `json:"pending"`
	// allocated claims the operator allocated.
	Allocated int32 `json:"allocated"`
	// unsatisfiable claims the engine cannot allocate now.
	Unsatisfiable int32 `json:"unsatisfiable"`
	// invalid claims (bad CEL or annotation).
	Invalid int32 `json:"invalid"`
}

// +kubebuilder:object:root=true

// DRAStackList is a list of DRAStacks.
type DRAStackList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DRAStack `json:"items"`
}

func init() {
	SchemeBuilder.Register(&DRAStack{}, &DRAStackList{})
}
