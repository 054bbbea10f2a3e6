package driver

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// nvidiaDeployment is NVIDIA's chart at release v0.4.1, written from
// deployments/helm/dra-driver-nvidia-gpu of kubernetes-sigs/dra-driver-nvidia-gpu
// (values.yaml, templates/kubeletplugin.yaml, controller.yaml,
// rbac-kubeletplugin.yaml, rbac-controller.yaml,
// rbac-compute-domain-daemon.yaml, deviceclass-*.yaml,
// validatingadmissionpolicy*.yaml, crds/), with its default values and
// gpuResourcesEnabledOverride=true, as the release notes install it (the
// chart refuses to render the GPU plugin otherwise; the profile refuses
// per node instead, see nvidiaProfile.refuse), on a cluster serving
// resource.k8s.io/v1. Off by default and so not rendered: the webhook, the
// NetworkPolicies, the OpenShift bindings.
func nvidiaDeployment() vendorDeployment {
	const (
		registry = "/var/lib/kubelet/plugins_registry"
		plugins  = "/var/lib/kubelet/plugins"
	)
	commonEnv := func(extra map[string]string) map[string]string {
		env := map[string]string{
			"LOG_VERBOSITY":                    "4",
			"MASK_NVIDIA_DRIVER_PARAMS":        "", // values.yaml defines no maskNvidiaDriverParams
			"NVIDIA_DRIVER_ROOT":               "/",
			"NVIDIA_VISIBLE_DEVICES":           "void",
			"CDI_ROOT":                         "/var/run/cdi",
			"NVIDIA_MIG_CONFIG_DEVICES":        "all",
			"NODE_NAME":                        "field:spec.nodeName",
			"NAMESPACE":                        "field:metadata.namespace",
			"KUBELET_REGISTRAR_DIRECTORY_PATH": registry,
			"KUBELET_PLUGINS_DIRECTORY_PATH":   plugins,
			"METRICS_PATH":                     "/metrics",
		}
		for k, v := range extra {
			env[k] = v
		}
		return env
	}
	// The chart runs each plugin through bash -c with a script that, when
	// MASK_NVIDIA_DRIVER_PARAMS is "true", first bind-mounts a copy of
	// /proc/driver/nvidia/params, then starts the plugin with -v $(LOG_VERBOSITY).
	maskScript := func(plugin string) string {
		return "# Conditionally mask the params file ... (MASK_NVIDIA_DRIVER_PARAMS=true only)\n" + plugin + " -v $(LOG_VERBOSITY)"
	}
	return vendorDeployment{
		Source: "kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1, chart deployments/helm/dra-driver-nvidia-gpu, default values and gpuResourcesEnabledOverride=true",
		Spec:   v1alpha1.DriverSpec{Name: NVIDIAGPUDriver, Profile: v1alpha1.DriverProfileNVIDIAGPU},
		Objects: []string{
			"ServiceAccount kubelet-plugin",                        // dra-driver-nvidia-gpu-service-account-kubeletplugin
			"ClusterRole kubelet-plugin-nvidia",                    // dra-driver-nvidia-gpu-clusterrole-kubeletplugin
			"ClusterRoleBinding kubelet-plugin-nvidia",             // dra-driver-nvidia-gpu-clusterrole-binding-kubeletplugin
			"Role kubelet-plugin",                                  // dra-driver-nvidia-gpu-role-kubeletplugin
			"RoleBinding kubelet-plugin",                           // dra-driver-nvidia-gpu-role-binding-kubeletplugin
			"ServiceAccount controller",                            // dra-driver-nvidia-gpu-service-account-controller
			"ClusterRole controller",                               // dra-driver-nvidia-gpu-clusterrole-controller
			"ClusterRoleBinding controller",                        // dra-driver-nvidia-gpu-clusterrole-binding-controller-<namespace>
			"Role controller",                                      // dra-driver-nvidia-gpu-role-controller
			"RoleBinding controller",                               // dra-driver-nvidia-gpu-role-binding-controller
			"ServiceAccount compute-domain-daemon-service-account", // same name: the controller's daemon template names it
			"ClusterRole compute-domain-daemon",                    // compute-domain-daemon-role
			"ClusterRoleBinding compute-domain-daemon",             // compute-domain-daemon-role-binding
			"DaemonSet kubelet-plugin",                             // dra-driver-nvidia-gpu-kubelet-plugin
			"Deployment controller",                                // dra-driver-nvidia-gpu-controller
			"ValidatingAdmissionPolicy resourceslices-policy-dra-driver-nvidia-gpu",
			"ValidatingAdmissionPolicyBinding resourceslices-policy-dra-driver-nvidia-gpu",
		},
		Workloads: []vendorWorkload{
			{
				Kind: "DaemonSet", Name: "kubelet-plugin",
				UpdateStrategy: "RollingUpdate maxUnavailable=100%",
				Pod: podFacts{
					ServiceAccount:  "kubelet-plugin",
					PriorityClass:   "system-node-critical",
					SecurityContext: "{}",
					Tolerations:     []string{"nvidia.com/gpu Exists NoSchedule"},
					NodeAffinity: []string{
						"feature.node.kubernetes.io/pci-10de.present In (true)",
						"feature.node.kubernetes.io/pci-0302_10de.present In (true)",
						"feature.node.kubernetes.io/pci-0300_10de.present In (true)",
						"feature.node.kubernetes.io/cpu-model.vendor_id In (NVIDIA)",
						"nvidia.com/gpu.present In (true)",
					},
					Volumes: map[string]string{
						"plugins-registry":   "hostPath " + registry,
						"plugins":            "hostPath " + plugins,
						"cdi":                "hostPath /var/run/cdi",
						"driver-root-parent": "hostPath / DirectoryOrCreate",
						"driver-root":        "hostPath / DirectoryOrCreate",
					},
					Init: []containerFacts{{
						Name:            "init-container",
						Image:           NVIDIAImage,
						Command:         []string{"bash", "/usr/bin/kubelet-plugin-prestart.sh"},
						SecurityContext: `{"privileged":true}`,
						Env: map[string]string{
							"NVIDIA_DRIVER_ROOT":               "/",
							"NVIDIA_VISIBLE_DEVICES":           "void",
							"KUBELET_REGISTRAR_DIRECTORY_PATH": registry,
							"KUBELET_PLUGINS_DIRECTORY_PATH":   plugins,
						},
						Mounts: map[string]string{"driver-root-parent": "/driver-root-parent ro"},
					}},
					Containers: []containerFacts{
						{
							Name:            "compute-domains",
							Image:           NVIDIAImage,
							PullPolicy:      "IfNotPresent",
							Command:         []string{"bash", "-c"},
							Args:            []string{maskScript("compute-domain-kubelet-plugin")},
							SecurityContext: `{"privileged":true}`,
							Probes: map[string]string{
								"startup":  "grpc 51515 liveness period=1 timeout=10 failure=600",
								"liveness": "grpc 51515 liveness period=10 timeout=10 failure=3",
							},
							Env: commonEnv(map[string]string{"HTTP_ENDPOINT": ":8081", "HEALTHCHECK_PORT": "51515"}),
							Mounts: map[string]string{
								"plugins-registry": registry,
								"plugins":          plugins + " prop=Bidirectional",
								"cdi":              "/var/run/cdi",
								"driver-root":      "/driver-root ro prop=HostToContainer",
							},
						},
						{
							Name:            "gpus",
							Image:           NVIDIAImage,
							PullPolicy:      "IfNotPresent",
							Command:         []string{"bash", "-c"},
							Args:            []string{maskScript("gpu-kubelet-plugin")},
							SecurityContext: `{"privileged":true}`,
							Probes: map[string]string{
								"startup":  "grpc 51516 liveness period=1 timeout=10 failure=600",
								"liveness": "grpc 51516 liveness period=30 timeout=10 failure=3",
							},
							Env: commonEnv(map[string]string{
								"HTTP_ENDPOINT":        ":8080",
								"HEALTHCHECK_PORT":     "51516",
								"SERVICE_ACCOUNT_NAME": "field:spec.serviceAccountName",
								"IMAGE_NAME":           NVIDIAImage,
							}),
							Mounts: map[string]string{
								"plugins-registry": registry,
								"plugins":          plugins + " prop=Bidirectional",
								"cdi":              "/var/run/cdi",
								"driver-root":      "/driver-root prop=HostToContainer",
							},
						},
					},
				},
			},
			{
				Kind: "Deployment", Name: "controller", Replicas: 1,
				Pod: podFacts{
					ServiceAccount:  "controller",
					PriorityClass:   "system-node-critical",
					SecurityContext: "{}",
					Tolerations: []string{
						"node-role.kubernetes.io/control-plane Exists NoSchedule",
						"node-role.kubernetes.io/master Exists NoSchedule",
						"CriticalAddonsOnly Exists",
					},
					PreferredAffinity: []string{"100: node-role.kubernetes.io/control-plane Exists"},
					PodAntiAffinity:   []string{`100: {"matchLabels":{"dra-driver-nvidia-gpu-component":"controller"}} kubernetes.io/hostname`},
					Volumes:           map[string]string{},
					Containers: []containerFacts{{
						Name:            "compute-domain",
						Image:           NVIDIAImage,
						PullPolicy:      "IfNotPresent",
						Command:         []string{"compute-domain-controller", "-v", "$(LOG_VERBOSITY)"},
						SecurityContext: "{}",
						Env: map[string]string{
							"HTTP_ENDPOINT":                        ":8080",
							"METRICS_PATH":                         "/metrics",
							"PPROF_PATH":                           "",
							"LOG_VERBOSITY":                        "4",
							"LOG_VERBOSITY_CD_DAEMON":              "4",
							"POD_NAME":                             "field:metadata.name",
							"NAMESPACE":                            "field:metadata.namespace",
							"IMAGE_NAME":                           NVIDIAImage,
							"NVIDIA_VISIBLE_DEVICES":               "void",
							"LEADER_ELECTION_ENABLED":              "false",
							"LEADER_ELECTION_LEASE_LOCK_NAME":      "dra-driver-nvidia-gpu-controller",
							"LEADER_ELECTION_LEASE_LOCK_NAMESPACE": "drastack-drivers", // the release's namespace
							"LEADER_ELECTION_LEASE_DURATION":       "15s",
							"LEADER_ELECTION_RENEW_DEADLINE":       "10s",
							"LEADER_ELECTION_RETRY_PERIOD":         "2s",
						},
					}},
				},
			},
		},
		Identities: []vendorIdentity{
			{
				ServiceAccount: "kubelet-plugin",
				Cluster: []rbacv1.PolicyRule{
					{APIGroups: []string{"resource.nvidia.com"}, Resources: []string{"computedomains"}, Verbs: []string{"get", "list", "watch"}},
					{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get", "list", "watch"}},
					{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
					{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "update"}},
					{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
				},
				Namespace: []rbacv1.PolicyRule{
					{APIGroups: []string{"resource.nvidia.com"}, Resources: []string{"computedomaincliques"}, Verbs: []string{"get"}},
				},
			},
			{
				ServiceAccount: "controller",
				Cluster: []rbacv1.PolicyRule{
					{APIGroups: []string{"resource.nvidia.com"}, Resources: []string{"computedomains"}, Verbs: []string{"get", "list", "watch", "update"}},
					{APIGroups: []string{"resource.nvidia.com"}, Resources: []string{"computedomains/status"}, Verbs: []string{"update"}},
					{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaimtemplates"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
					{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
					{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "update"}},
					{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
				},
				Namespace: []rbacv1.PolicyRule{
					{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
					{APIGroups: []string{"resource.nvidia.com"}, Resources: []string{"computedomaincliques"}, Verbs: []string{"get", "list", "watch", "update"}},
				},
			},
			{
				ServiceAccount: "compute-domain-daemon-service-account",
				Cluster: []rbacv1.PolicyRule{
					{APIGroups: []string{"resource.nvidia.com"}, Resources: []string{"computedomains", "computedomains/status"}, Verbs: []string{"get", "list", "watch", "update", "patch"}},
					{APIGroups: []string{"resource.nvidia.com"}, Resources: []string{"computedomaincliques"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch"}},
					{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "patch"}},
				},
			},
		},
		Classes: []vendorClass{
			{Name: "gpu.nvidia.com", Selectors: []string{`device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "gpu"`}, ExtendedResourceName: "nvidia.com/gpu"},
			{Name: "mig.nvidia.com", Selectors: []string{`device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "mig"`}},
			{Name: "vfio.gpu.nvidia.com", Selectors: []string{`device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "vfio"`}},
			{Name: "compute-domain-daemon.nvidia.com", Selectors: []string{`device.driver == "compute-domain.nvidia.com" && device.attributes["compute-domain.nvidia.com"].type == "daemon"`}},
			{Name: "compute-domain-default-channel.nvidia.com", Selectors: []string{
				`device.driver == "compute-domain.nvidia.com" && device.attributes["compute-domain.nvidia.com"].type == "channel" && device.attributes["compute-domain.nvidia.com"].id == 0`}},
		},
		CRDs: []vendorCRD{
			{
				Name: "computedomains.resource.nvidia.com", Group: "resource.nvidia.com", Kind: "ComputeDomain", ListKind: "ComputeDomainList",
				Plural: "computedomains", Singular: "computedomain", Scope: "Namespaced",
				Versions: []vendorCRDVersion{{Name: "v1beta1", Served: true, Storage: true, StatusSubresource: true, Schema: map[string]string{
					".":                                   "type=object",
					".apiVersion":                         "type=string",
					".kind":                               "type=string",
					".metadata":                           "type=object",
					".spec":                               "type=object required=channel rule=self == oldSelf: A computeDomain.spec is immutable",
					".spec.channel":                       "type=object required=resourceClaimTemplate",
					".spec.channel.allocationMode":        `type=string default="Single" enum="All","Single"`,
					".spec.channel.resourceClaimTemplate": "type=object required=name",
					".spec.channel.resourceClaimTemplate.name": "type=string",
					".spec.numNodes":            "type=integer default=0 minimum=0",
					".status":                   "type=object required=status",
					".status.nodes":             "type=array list=map keys=name",
					".status.nodes[]":           "type=object required=cliqueID,ipAddress,name",
					".status.nodes[].cliqueID":  "type=string",
					".status.nodes[].index":     "type=integer",
					".status.nodes[].ipAddress": "type=string",
					".status.nodes[].name":      "type=string",
					".status.nodes[].status":    `type=string default="NotReady" enum="Ready","NotReady"`,
					".status.status":            `type=string default="NotReady" enum="Ready","NotReady"`,
				}}},
			},
			{
				Name: "computedomaincliques.resource.nvidia.com", Group: "resource.nvidia.com", Kind: "ComputeDomainClique", ListKind: "ComputeDomainCliqueList",
				Plural: "computedomaincliques", Singular: "computedomainclique", Scope: "Namespaced",
				Versions: []vendorCRDVersion{{Name: "v1beta1", Served: true, Storage: true, Schema: map[string]string{
					".":                    "type=object",
					".apiVersion":          "type=string",
					".kind":                "type=string",
					".metadata":            "type=object",
					".daemons":             "type=array list=map keys=nodeName",
					".daemons[]":           "type=object required=cliqueID,ipAddress,nodeName",
					".daemons[].cliqueID":  "type=string",
					".daemons[].index":     "type=integer",
					".daemons[].ipAddress": "type=string",
					".daemons[].nodeName":  "type=string",
					".daemons[].status":    `type=string default="NotReady" enum="Ready","NotReady"`,
				}}},
			},
		},
		Differences: nvidiaDifferences(),
	}
}

// nvidiaDifferences are the intended differences of the nvidia-gpu profile
// from NVIDIA's chart, each with its reason.
func nvidiaDifferences() map[string]string {
	d := map[string]string{
		"DaemonSet kubelet-plugin: updateStrategy": "the rollout follows spec.drivers[].updateStrategy (one node at a time by default, so the other nodes keep serving claims); " +
			"set maxUnavailable: 100% for the chart's all-at-once update",
		"DaemonSet kubelet-plugin: containers[compute-domains].command": "the plugin is started directly, with the same -v $(LOG_VERBOSITY); the chart's bash wrapper " +
			"only adds the params masking that MASK_NVIDIA_DRIVER_PARAMS=true turns on, a value v0.4.1's values.yaml does not define (a development aid for nvkind)",
		"DaemonSet kubelet-plugin: containers[compute-domains].args":                           "see command",
		"DaemonSet kubelet-plugin: containers[gpus].command":                                   "see compute-domains: the plugin is started directly",
		"DaemonSet kubelet-plugin: containers[gpus].args":                                      "see compute-domains",
		"DaemonSet kubelet-plugin: containers[compute-domains].env[MASK_NVIDIA_DRIVER_PARAMS]": "read only by the chart's wrapper script, which the profile does not run; always empty in the chart",
		"DaemonSet kubelet-plugin: containers[gpus].env[MASK_NVIDIA_DRIVER_PARAMS]":            "see compute-domains",
		"Deployment controller: containers[compute-domain].env[LEADER_ELECTION_LEASE_LOCK_NAME]": "named after the profile's Deployment like the chart's is after its own; " +
			"unused while leader election is off, as in the chart",
		"Deployment controller: podAntiAffinity":                              `the same spreading, selecting the controller's pods by the profile's labels: 100: {"matchLabels":{"drastack.io/component":"controller","drastack.io/driver":"gpu.nvidia.com"}} kubernetes.io/hostname`,
		"rbac controller: cluster coordination.k8s.io/leases get *":           "for leader election only, which is off (LEADER_ELECTION_ENABLED=false as in the chart, one replica); left out so neither the controller nor the operator, which must hold every rule it grants, holds leases cluster-wide",
		"rbac controller: cluster coordination.k8s.io/leases create *":        "see leases get",
		"rbac controller: cluster coordination.k8s.io/leases update *":        "see leases get",
		"rbac kubelet-plugin: cluster resource.k8s.io/resourceslices patch *": "granted by the common plugin role of every profile; the node-restriction policy keeps every write to the plugin's own node and driver names",
		"object ClusterRole kubelet-plugin":                                   "the common plugin role of every profile; NVIDIA's own rules are in kubelet-plugin-nvidia",
		"object ClusterRoleBinding kubelet-plugin":                            "binds the common plugin role",
		"object ValidatingAdmissionPolicy resourceslices-policy-dra-driver-nvidia-gpu": "replaced by the common resourceslices-own-node policy, which matches the plugin's real ServiceAccount " +
			"(the chart's matches <fullname>-service-account, not the -kubeletplugin account its plugins run as) and also keeps it to its own driver names",
		"object ValidatingAdmissionPolicyBinding resourceslices-policy-dra-driver-nvidia-gpu": "replaced by the common resourceslices-own-node binding",
		"object ValidatingAdmissionPolicy resourceslices-own-node":                            "the common node-restriction policy of every profile (profiles/common)",
		"object ValidatingAdmissionPolicyBinding resourceslices-own-node":                     "the common node-restriction policy's binding",
	}
	// Every DeviceClass the operator manages starts with a selector for the
	// driver's own devices, so a class can never hand out another driver's
	// devices whatever else a spec adds (deviceclasses.go).
	for _, name := range []string{"gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com", "compute-domain-daemon.nvidia.com", "compute-domain-default-channel.nvidia.com"} {
		d["DeviceClass "+name+`: selector[device.driver in ["gpu.nvidia.com", "compute-domain.nvidia.com"]]`] = "the operator's own-driver selector, first in every class it manages"
	}
	return d
}

func TestFidelityNVIDIA(t *testing.T) { checkFidelity(t, nvidiaDeployment()) }
