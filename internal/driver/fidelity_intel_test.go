package driver

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// intelDeployment is Intel's GPU resource driver chart at tag gpu-v0.11.0
// with its default values, written from charts/intel-gpu-resource-driver
// of intel/intel-resource-drivers-for-kubernetes: values.yaml,
// templates/resource-driver.yaml (health monitoring on, manage-binding
// on), clusterrole.yaml, clusterrolebinding.yaml, serviceaccount.yaml,
// device-class.yaml and the validating admission policy with its binding.
// Off by default and so not rendered: the NodeFeatureRules, the Node
// Feature Discovery and xpumd subcharts, the OpenShift objects.
func intelDeployment() vendorDeployment {
	return vendorDeployment{
		Source: "intel/intel-resource-drivers-for-kubernetes gpu-v0.11.0, chart charts/intel-gpu-resource-driver, default values",
		Spec:   v1alpha1.DriverSpec{Name: IntelDriver, Profile: v1alpha1.DriverProfileIntelGPU},
		Objects: []string{
			"ServiceAccount kubelet-plugin",     // intel-gpu-sa
			"ClusterRole kubelet-plugin",        // intel-gpu-resource-driver-role
			"ClusterRoleBinding kubelet-plugin", // intel-gpu-resource-driver-rolebinding
			"DaemonSet kubelet-plugin",          // intel-gpu-resource-driver-kubelet-plugin
			"ValidatingAdmissionPolicy resourceslices-policy-dra-kubelet-plugin-gpu",
			"ValidatingAdmissionPolicyBinding resourceslices-policy-dra-kubelet-plugin-gpu",
		},
		Workloads: []vendorWorkload{{
			Kind: "DaemonSet", Name: "kubelet-plugin",
			UpdateStrategy: "RollingUpdate maxUnavailable=1", // not set: Kubernetes' default
			Pod: podFacts{
				ServiceAccount: "kubelet-plugin",
				Tolerations: []string{
					"node-role.kubernetes.io/master Exists NoSchedule",
					"node-role.kubernetes.io/control-plane Exists NoSchedule",
					"node.kubernetes.io/gpu Exists NoSchedule",
				},
				Volumes: map[string]string{
					"plugins-registry": "hostPath /var/lib/kubelet/plugins_registry",
					"plugins":          "hostPath /var/lib/kubelet/plugins",
					"cdi":              "hostPath /etc/cdi",
					"varruncdi":        "hostPath /var/run/cdi",
					"sysfs":            "hostPath /sys",
					"xpumd-socket":     "hostPath /run/xpumd",
				},
				Containers: []containerFacts{{
					Name:       "kubelet-plugin",
					Image:      IntelImage,
					PullPolicy: "IfNotPresent",
					Command:    []string{"/kubelet-gpu-plugin"},
					Args:       []string{"--healthcheck-port=51516", "-m"},
					Ports:      []string{"healthcheck 51516/TCP"},
					SecurityContext: compactJSON(&corev1.SecurityContext{
						Privileged:             ptr.To(false),
						Capabilities:           &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						ReadOnlyRootFilesystem: ptr.To(true),
						RunAsUser:              ptr.To(int64(0)),
						SeccompProfile:         &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					}),
					Probes: map[string]string{
						"startup":  "grpc 51516 liveness period=10 timeout=10 failure=60",
						"liveness": "grpc 51516 liveness period=30 timeout=10 failure=3",
					},
					Env: map[string]string{
						"NODE_NAME":     "field:spec.nodeName",
						"POD_NAMESPACE": "field:metadata.namespace",
						"SYSFS_ROOT":    "/sysfs",
					},
					Mounts: map[string]string{
						"plugins-registry": "/var/lib/kubelet/plugins_registry",
						"plugins":          "/var/lib/kubelet/plugins",
						"cdi":              "/etc/cdi",
						"varruncdi":        "/var/run/cdi",
						"sysfs":            "/sysfs",
						"xpumd-socket":     "/run/xpumd",
					},
				}},
			},
		}},
		Identities: []vendorIdentity{{
			ServiceAccount: "kubelet-plugin",
			Cluster: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
				{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
				{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get"}},
			},
		}},
		Classes: []vendorClass{
			{Name: "gpu.intel.com", Selectors: []string{`device.driver == "gpu.intel.com"`}},
			// With manage-binding on, the VFIO class selects every GPU: the
			// plugin binds the allocated GPU to vfio-pci.
			{Name: "gpu-vfio.intel.com", Selectors: []string{`device.driver == "gpu.intel.com"`}},
		},
		Differences: map[string]string{
			"DaemonSet kubelet-plugin: nodeAffinity": "the chart places the plugin on every node unless its NodeFeatureRules are on (then on intel.feature.node.kubernetes.io/gpu=true); " +
				"the profile keeps it to nodes with that label or Node Feature Discovery's default labels for Intel (8086) display and 3D controllers, " +
				"so that DriversReady can say when no Intel GPU node is selected",
			"object ValidatingAdmissionPolicy resourceslices-policy-dra-kubelet-plugin-gpu":        "replaced by the common resourceslices-own-node policy of every profile, which also keeps the plugin to its own driver names",
			"object ValidatingAdmissionPolicyBinding resourceslices-policy-dra-kubelet-plugin-gpu": "replaced by the common resourceslices-own-node binding",
			"object ValidatingAdmissionPolicy resourceslices-own-node":                             "the common node-restriction policy of every profile (profiles/common)",
			"object ValidatingAdmissionPolicyBinding resourceslices-own-node":                      "the common node-restriction policy's binding",
		},
	}
}

func TestFidelityIntel(t *testing.T) { checkFidelity(t, intelDeployment()) }
