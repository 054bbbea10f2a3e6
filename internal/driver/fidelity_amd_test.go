package driver

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// amdDeployment is AMD's chart at release v1.0.0 with its default values,
// written from helm-charts-k8s of ROCm/k8s-gpu-dra-driver: values.yaml
// and templates/kubeletplugin.yaml as of the release (the kubelet-plugin
// DaemonSet with the driver-init container), templates/clusterrole.yaml,
// clusterrolebinding.yaml, serviceaccount.yaml, deviceclass.yaml (before
// the later extendedResourceName value), validatingadmissionpolicy.yaml
// and its binding. The webhook is off by default and renders nothing.
func amdDeployment() vendorDeployment {
	return vendorDeployment{
		Source: "ROCm/k8s-gpu-dra-driver v1.0.0, chart helm-charts-k8s, default values",
		Spec:   v1alpha1.DriverSpec{Name: AMDDriver, Profile: v1alpha1.DriverProfileAMDGPU},
		Objects: []string{
			"ServiceAccount kubelet-plugin",     // <release>-k8s-gpu-dra-driver-service-account
			"ClusterRole kubelet-plugin",        // <release>-k8s-gpu-dra-driver-role
			"ClusterRoleBinding kubelet-plugin", // <release>-k8s-gpu-dra-driver-role-binding
			"DaemonSet kubelet-plugin",          // <release>-k8s-gpu-dra-driver-kubeletplugin
			"ValidatingAdmissionPolicy resourceslices-policy-k8s-gpu-dra-driver",
			"ValidatingAdmissionPolicyBinding resourceslices-policy-k8s-gpu-dra-driver",
		},
		Workloads: []vendorWorkload{{
			Kind: "DaemonSet", Name: "kubelet-plugin",
			UpdateStrategy: "RollingUpdate maxUnavailable=1", // type RollingUpdate; Kubernetes defaults maxUnavailable to 1
			Pod: podFacts{
				ServiceAccount:  "kubelet-plugin",
				PriorityClass:   "system-node-critical",
				SecurityContext: "{}",
				Volumes: map[string]string{
					"plugins-registry": "hostPath /var/lib/kubelet/plugins_registry",
					"plugins":          "hostPath /var/lib/kubelet/plugins",
					"cdi":              "hostPath /var/run/cdi",
					"dev":              "hostPath /dev",
					"sys":              "hostPath /sys",
				},
				Init: []containerFacts{{
					Name:            "driver-init",
					Image:           "docker.io/busybox:1.36",
					Command:         []string{"sh", "-c", "while [ ! -d /sys/class/kfd ] || [ ! -d /sys/module/amdgpu/drivers/ ]; do echo 'amdgpu driver is not loaded'; sleep 2; done"},
					SecurityContext: `{"privileged":true}`,
					Mounts:          map[string]string{"sys": "/sys"},
				}},
				Containers: []containerFacts{{
					Name:            "plugin",
					Image:           AMDImage,
					PullPolicy:      "IfNotPresent",
					Command:         []string{"gpu-kubeletplugin"},
					SecurityContext: `{"privileged":true}`,
					Probes:          map[string]string{"liveness": "grpc 51515 liveness period=10 failure=3"},
					Env: map[string]string{
						"CDI_ROOT":                         "/var/run/cdi",
						"KUBELET_REGISTRAR_DIRECTORY_PATH": "/var/lib/kubelet/plugins_registry",
						"KUBELET_PLUGINS_DIRECTORY_PATH":   "/var/lib/kubelet/plugins",
						"NODE_NAME":                        "field:spec.nodeName",
						"NAMESPACE":                        "field:metadata.namespace",
						"HEALTHCHECK_PORT":                 "51515",
					},
					Mounts: map[string]string{
						"plugins-registry": "/var/lib/kubelet/plugins_registry",
						"plugins":          "/var/lib/kubelet/plugins",
						"cdi":              "/var/run/cdi",
						"dev":              "/dev",
						"sys":              "/sys",
					},
				}},
			},
		}},
		Identities: []vendorIdentity{{
			ServiceAccount: "kubelet-plugin",
			Cluster: []rbacv1.PolicyRule{
				{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get"}},
				{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
				{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			},
		}},
		Classes: []vendorClass{{Name: "gpu.amd.com", Selectors: []string{`device.driver == "gpu.amd.com"`}}},
		Differences: map[string]string{
			"DaemonSet kubelet-plugin: initContainers[driver-init].command": "the profile's own wait loop: the same test (both /sys/class/kfd and /sys/module/amdgpu/drivers exist) every 2 seconds, in its own words",
			"DaemonSet kubelet-plugin: nodeAffinity": "the chart places the plugin on every node; the profile keeps it to nodes Node Feature Discovery labels with AMD's PCI vendor 1002 " +
				"(vendor-only, or display, 3D and processing-accelerator classes) or the AMD GPU Operator labels feature.node.kubernetes.io/amd-gpu=true, " +
				"so that DriversReady can say when no AMD node is selected",
			"object ValidatingAdmissionPolicy resourceslices-policy-k8s-gpu-dra-driver":        "replaced by the common resourceslices-own-node policy of every profile, which also keeps the plugin to its own driver names",
			"object ValidatingAdmissionPolicyBinding resourceslices-policy-k8s-gpu-dra-driver": "replaced by the common resourceslices-own-node binding",
			"object ValidatingAdmissionPolicy resourceslices-own-node":                         "the common node-restriction policy of every profile (profiles/common)",
			"object ValidatingAdmissionPolicyBinding resourceslices-own-node":                  "the common node-restriction policy's binding",
		},
	}
}

func TestFidelityAMD(t *testing.T) { checkFidelity(t, amdDeployment()) }
