package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// DRAStackName is the only name a DRAStack may have: one stack per cluster.
const DRAStackName = "default"

// DRAStack declares a cluster's whole Dynamic Resource Allocation stack: which
// DRA drivers run, which multi-host devices are published centrally, which
// claims the operator allocates itself, and how device pools are validated.
// There is one per cluster, named "default".
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=drastack,categories=dra
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'default'",message="there is one DRAStack per cluster and it must be named 'default'"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Drivers",type=string,JSONPath=`.status.summary.drivers`
// +kubebuilder:printcolumn:name="Pools",type=string,JSONPath=`.status.summary.pools`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type DRAStack struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec declares the desired DRA stack.
	// +kubebuilder:default={}
	Spec DRAStackSpec `json:"spec,omitempty"`
	// status reports what the operator observed.
	// +optional
	Status DRAStackStatus `json:"status,omitempty"`
}

// DRAStackSpec declares the desired DRA stack. A spec the operator
// cannot act on as a whole (SpecValid False: conflicting entries, a
// namespace it must not use) changes nothing that runs: the drivers,
// published devices and central taints of the last valid spec stay as
// they are until it is fixed.
// +kubebuilder:validation:XValidation:rule="!has(self.drivers) || !has(self.multiHost) || self.drivers.all(d, self.multiHost.all(m, m.driver != d.name))",message="a spec.drivers entry must not be named like the driver of a spec.multiHost entry: the central publisher owns every node-less ResourceSlice of a multi-host driver, and the driver's DeviceClasses and removal would take over its devices"
type DRAStackSpec struct {
	// namespace is where the operator runs driver workloads (kubelet plugins
	// and driver controllers). Kubelet plugins need the privileged Pod
	// Security level, so the operator creates this namespace with that
	// level and deletes it when no driver is left. It must be a namespace
	// the operator creates: not one that exists already (it would have to
	// take it over), not the operator's own (which stays restricted), not
	// one of Kubernetes' own; and while it exists, it must allow the
	// privileged level. Otherwise SpecValid is False and nothing changes.
	// +kubebuilder:default=drastack-drivers
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="!(self in ['kube-system', 'kube-public', 'kube-node-lease', 'default'])",message="drivers run in a namespace the operator creates for them, not in one of Kubernetes' own"
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// drivers are the DRA drivers the operator installs, configures,
	// upgrades and removes. Each name is a DRA driver name and appears once.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Drivers []DriverSpec `json:"drivers,omitempty"`

	// multiHost describes multi-host devices (TPU slices, NVLink domains)
	// whose ResourceSlices the operator publishes centrally, because no
	// kubelet plugin sees a whole multi-host device (KEP-4815). Entries of
	// one driver must select disjoint hosts and pool names: two entries
	// with the same driver, nodeSelector and domainLabel are refused here,
	// and entries whose hosts or pool names meet on the cluster's nodes
	// make SpecValid False.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(a, self.filter(b, b.driver == a.driver && b.domainLabel == a.domainLabel && has(b.nodeSelector) == has(a.nodeSelector) && (!has(a.nodeSelector) || b.nodeSelector == a.nodeSelector)).size() == 1)",message="two entries of one driver with the same nodeSelector and domainLabel would publish every chip of their hosts twice; give them disjoint hosts or different drivers"
	// +optional
	MultiHost []MultiHostSpec `json:"multiHost,omitempty"`

	// claims configures the operator's own claim allocation.
	// +kubebuilder:default={}
	// +optional
	Claims ClaimsSpec `json:"claims,omitempty"`

	// pools configures pool validation and DevicePool reporting.
	// +kubebuilder:default={}
	// +optional
	Pools PoolsSpec `json:"pools,omitempty"`
}

// DriverProfile names a built-in way of deploying a DRA driver.
// +kubebuilder:validation:Enum=example;nvidia-gpu;amd-gpu;intel-gpu;dranet;custom
type DriverProfile string

// Built-in driver profiles.
const (
	// DriverProfileExample is a kubelet plugin of simulated GPUs:
	// drastack's own by default, or the kubernetes-sigs dra-example-driver.
	DriverProfileExample DriverProfile = "example"
	// DriverProfileNVIDIAGPU is the NVIDIA DRA driver for GPUs.
	DriverProfileNVIDIAGPU DriverProfile = "nvidia-gpu"
	// DriverProfileAMDGPU is AMD's DRA driver for GPUs (ROCm).
	DriverProfileAMDGPU DriverProfile = "amd-gpu"
	// DriverProfileIntelGPU is Intel's GPU resource driver.
	DriverProfileIntelGPU DriverProfile = "intel-gpu"
	// DriverProfileDRANET is dranet, the kubernetes-sigs DRA driver for
	// network interfaces.
	DriverProfileDRANET DriverProfile = "dranet"
	// DriverProfileCustom is any kubelet plugin described by image, args and mounts.
	DriverProfileCustom DriverProfile = "custom"
)

// RemovalPolicy says how a driver is removed while claims may still use it.
// +kubebuilder:validation:Enum=Drain;Force
type RemovalPolicy string

// Removal policies.
const (
	// RemovalPolicyDrain waits until no allocated claim uses the driver's devices.
	RemovalPolicyDrain RemovalPolicy = "Drain"
	// RemovalPolicyForce removes the driver without waiting for claims.
	RemovalPolicyForce RemovalPolicy = "Force"
)

// DriverSpec declares one DRA driver.
// +kubebuilder:validation:XValidation:rule="self.profile != 'custom' || (has(self.image) && size(self.image) > 0)",message="image is required when profile is custom"
// +kubebuilder:validation:XValidation:rule="!has(self.nvidia) || self.profile == 'nvidia-gpu'",message="nvidia configures the nvidia-gpu profile only"
type DriverSpec struct {
	// name is the DRA driver name, as used in ResourceSlices and device
	// classes, for example gpu.example.com.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`

	// profile selects the built-in manifests used to deploy the driver.
	// Each vendor profile deploys the vendor's release as its own chart does
	// (the README lists the release, what is installed and how it was
	// checked) and needs the driver name the vendor's plugin publishes
	// under. What each profile needs of the nodes it runs on:
	// example: drastack's example plugin (or the dra-example-driver, v0.3.0
	// or newer under any name); runs on every node the nodeSelector picks,
	// needs nothing on the node (it publishes simulated GPUs).
	// nvidia-gpu: NVIDIA's DRA driver (GPUs and ComputeDomains, see nvidia);
	// name gpu.nvidia.com; a node must carry one of the labels Node Feature
	// Discovery or the GPU Operator set on NVIDIA GPU nodes
	// (feature.node.kubernetes.io/pci-10de.present=true, ...) and have the
	// NVIDIA driver installed under nvidia.driverRoot.
	// amd-gpu: AMD's DRA driver; name gpu.amd.com; a node must carry an AMD
	// PCI label of Node Feature Discovery (feature.node.kubernetes.io/pci-1002.present=true, ...)
	// or the AMD GPU Operator's feature.node.kubernetes.io/amd-gpu=true and
	// have the amdgpu kernel driver loaded.
	// intel-gpu: Intel's GPU resource driver; name gpu.intel.com; a node must
	// carry intel.feature.node.kubernetes.io/gpu=true or an Intel display
	// PCI label of Node Feature Discovery, and run Intel's XPU Manager
	// daemon (xpumd) for the health monitoring the chart turns on.
	// dranet: the kubernetes-sigs network driver; name dra.net; runs on
	// every node the nodeSelector picks (host network); the container
	// runtime must have NRI enabled.
	// custom: any kubelet plugin; image is required, it runs on every node
	// the nodeSelector picks.
	// A driver whose nodeSelector and profile together match no node is
	// reported as DriversReady False with reason NoMatchingNodes.
	// +kubebuilder:default=example
	// +optional
	Profile DriverProfile `json:"profile,omitempty"`

	// image is the kubelet-plugin container image. Profiles other than
	// custom have a default.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// imagePullPolicy of the driver containers.
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// nodeSelector limits the kubelet plugin to matching nodes.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// tolerations of the kubelet-plugin pods.
	// +listType=atomic
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// args are extra arguments for the kubelet-plugin container.
	// +listType=atomic
	// +optional
	Args []string `json:"args,omitempty"`

	// env are extra environment variables for the kubelet-plugin container.
	// +listType=atomic
	// +optional
	Env []corev1.EnvVar `json:"env,omitempty"`

	// resources of the kubelet-plugin container.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// priorityClassName of the kubelet-plugin pods. Node-critical plugins
	// usually run as system-node-critical.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// mounts are host paths mounted into the kubelet-plugin container, for
	// the custom profile (device nodes, vendor libraries).
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Mounts []HostPathMount `json:"mounts,omitempty"`

	// deviceClasses are created, updated and pruned with the driver.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	// +optional
	DeviceClasses []DeviceClassSpec `json:"deviceClasses,omitempty"`

	// updateStrategy controls how a changed image or configuration rolls out
	// to the kubelet-plugin DaemonSet.
	// +kubebuilder:default={maxUnavailable: 1}
	// +optional
	UpdateStrategy DriverUpdateStrategy `json:"updateStrategy,omitempty"`

	// patches are kustomize patches (strategic merge or JSON 6902) applied
	// to the rendered manifests, for what the fields above do not cover.
	// They are applied after the fields above and see the profile's objects
	// under their base names (kubelet-plugin, controller, ...) before the
	// driver's name prefix and the namespace are set. DeviceClasses are
	// not patched: deviceClasses describes them completely.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Patches []Patch `json:"patches,omitempty"`

	// requiredFeatures are cluster features the driver needs beyond what
	// its profile declares, for example partitionableDevices for a custom
	// driver that publishes shared counters. A feature the cluster lacks is
	// reported in the DriversReady condition; the driver is installed anyway.
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:Enum=partitionableDevices;listTypeAttributes;deviceTaints;deviceTaintRules;prioritizedList
	// +optional
	RequiredFeatures []string `json:"requiredFeatures,omitempty"`

	// removalPolicy says what happens when the driver is removed while
	// allocated claims still use its devices, or custom resources of the
	// CustomResourceDefinitions its profile installs still exist: Drain
	// waits for them to be released and deleted (the driver's controller
	// keeps running meanwhile, to finalize them), Force removes the driver
	// at once and keeps a CustomResourceDefinition that still has custom
	// resources (only its drastack labels are removed). A
	// CustomResourceDefinition is never deleted while it has custom
	// resources.
	// +kubebuilder:default=Drain
	// +optional
	RemovalPolicy RemovalPolicy `json:"removalPolicy,omitempty"`

	// nvidia configures the nvidia-gpu profile: where the NVIDIA driver is
	// on the node, which of its kubelet plugins run, its feature gates, and
	// what happens on nodes where NVIDIA's device plugin hands out GPUs.
	// +optional
	NVIDIA *NVIDIAOptions `json:"nvidia,omitempty"`
}

// NVIDIAPlugin names one of the kubelet plugins of NVIDIA's DRA driver.
// +kubebuilder:validation:Enum=GPUs;ComputeDomains
type NVIDIAPlugin string

// NVIDIA kubelet plugins.
const (
	// NVIDIAPluginGPUs is the gpu.nvidia.com plugin: GPUs and MIG devices.
	NVIDIAPluginGPUs NVIDIAPlugin = "GPUs"
	// NVIDIAPluginComputeDomains is the compute-domain.nvidia.com plugin
	// with the ComputeDomain controller (Multi-Node NVLink).
	NVIDIAPluginComputeDomains NVIDIAPlugin = "ComputeDomains"
)

// DevicePluginNodePolicy says whether NVIDIA's GPU plugin runs on a node
// where NVIDIA's device plugin serves nvidia.com/gpu.
// +kubebuilder:validation:Enum=Refuse;Allow
type DevicePluginNodePolicy string

// Device plugin node policies.
const (
	// DevicePluginNodesRefuse keeps the kubelet plugin off such nodes and
	// reports them.
	DevicePluginNodesRefuse DevicePluginNodePolicy = "Refuse"
	// DevicePluginNodesAllow runs the GPU plugin there anyway.
	DevicePluginNodesAllow DevicePluginNodePolicy = "Allow"
)

// NVIDIAOptions configures the nvidia-gpu profile: what NVIDIA's chart
// makes configurable and users change.
type NVIDIAOptions struct {
	// driverRoot is where the NVIDIA GPU driver is installed on the node:
	// / (the default) when it is installed on the host, /run/nvidia/driver
	// when the NVIDIA GPU Operator's driver container installs it. The
	// kubelet plugin waits in its init container until the driver is found
	// there.
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^/`
	// +optional
	DriverRoot string `json:"driverRoot,omitempty"`
	// plugins are the kubelet plugins to run: GPUs (gpu.nvidia.com: GPUs
	// and MIG devices) and ComputeDomains (compute-domain.nvidia.com with
	// its controller). Default: both. The DeviceClasses follow: without GPUs
	// there are no gpu, mig and vfio classes, without ComputeDomains no
	// compute-domain classes and no controller. With the NVIDIA device
	// plugin handing out the GPUs (the GPU Operator's default), run
	// ComputeDomains only.
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=2
	// +optional
	Plugins []NVIDIAPlugin `json:"plugins,omitempty"`
	// featureGates of the driver (name: enabled), passed to the kubelet
	// plugins and the controller as FEATURE_GATES. Names the pinned
	// release does not know, and combinations it refuses, are reported as
	// SpecValid False. MPSSupport also lets the GPU plugin manage the
	// MPS control daemon Deployments in the driver namespace;
	// PassthroughSupport mounts the host's root, /sys and /proc into it;
	// DynamicMIG makes it publish shared counters (partitionable devices).
	// +kubebuilder:validation:MaxProperties=32
	// +optional
	FeatureGates map[string]bool `json:"featureGates,omitempty"`
	// devicePluginNodes says what to do on a node where NVIDIA's device
	// plugin serves nvidia.com/gpu (its capacity is above zero) while the
	// GPU plugin is enabled: both would hand out the same GPUs. Refuse (the
	// default) keeps the kubelet plugin off such nodes and reports them in
	// the DriversReady condition (reason DevicePluginConflict); Allow runs
	// it there anyway, for nodes where the device plugin is known to hand
	// out no GPU the DRA driver publishes.
	// +kubebuilder:default=Refuse
	// +optional
	DevicePluginNodes DevicePluginNodePolicy `json:"devicePluginNodes,omitempty"`
}

// HostPathMount mounts a host path into the kubelet-plugin container.
type HostPathMount struct {
	// name of the volume.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// hostPath is the path on the node.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:Pattern=`^/`
	HostPath string `json:"hostPath"`
	// mountPath is the path in the container; defaults to hostPath.
	// +kubebuilder:validation:Pattern=`^/`
	// +optional
	MountPath string `json:"mountPath,omitempty"`
	// readOnly mounts the path read-only.
	// +optional
	ReadOnly bool `json:"readOnly,omitempty"`
}

// DeviceClassSpec is a DeviceClass managed with a driver.
type DeviceClassSpec struct {
	// name of the DeviceClass.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
	// selectors must all match a device for it to belong to the class.
	// Empty means every device of the driver.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Selectors []resourcev1.DeviceSelector `json:"selectors,omitempty"`
	// config is passed to the driver for every device allocated through
	// the class.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Config []resourcev1.DeviceClassConfiguration `json:"config,omitempty"`
	// extendedResourceName lets pods that request this extended resource
	// (for example nvidia.com/gpu) get devices of the class through DRA
	// on nodes where no device plugin serves it (KEP-5004; the API server
	// drops the field where the DRAExtendedResource feature is off).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ExtendedResourceName *string `json:"extendedResourceName,omitempty"`
}

// DriverUpdateStrategy controls the kubelet-plugin rollout.
type DriverUpdateStrategy struct {
	// maxUnavailable is how many (or what percentage of) nodes may run no
	// ready plugin during an update.
	// +kubebuilder:validation:XIntOrString
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
	// progressDeadlineSeconds is how long a rollout of the kubelet plugin
	// may go without a node getting an updated, running and ready plugin
	// before it is reported as stalled: the driver's reason becomes
	// RolloutStalled, Degraded turns True with that reason, Progressing
	// stays True and says the rollout is stalled, and one Warning Event is
	// emitted. Unset means the operator's default: its
	// --driver-rollout-timeout flag, 5 minutes unless set.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	// +optional
	ProgressDeadlineSeconds *int32 `json:"progressDeadlineSeconds,omitempty"`
}

// Patch is a kustomize patch applied to a driver's rendered manifests.
type Patch struct {
	// patch is a strategic merge patch or a JSON 6902 patch, in YAML or JSON.
	// +kubebuilder:validation:MinLength=1
	Patch string `json:"patch"`
	// target selects the objects to patch; required for JSON 6902 patches.
	// +optional
	Target *PatchTarget `json:"target,omitempty"`
}

// PatchTarget selects the objects a patch applies to.
type PatchTarget struct {
	// group of the objects.
	// +optional
	Group string `json:"group,omitempty"`
	// version of the objects.
	// +optional
	Version string `json:"version,omitempty"`
	// kind of the objects.
	// +optional
	Kind string `json:"kind,omitempty"`
	// name of the objects (a regular expression).
	// +optional
	Name string `json:"name,omitempty"`
	// namespace of the objects.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// labelSelector of the objects.
	// +optional
	LabelSelector string `json:"labelSelector,omitempty"`
	// annotationSelector of the objects.
	// +optional
	AnnotationSelector string `json:"annotationSelector,omitempty"`
}
