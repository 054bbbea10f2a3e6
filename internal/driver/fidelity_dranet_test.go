package driver

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// dranetDeployment is dranet at release v1.4.0 as its install.yaml
// deploys it, written from that file of kubernetes-sigs/dranet, checked
// against the release's chart (deployments/helm/dranet with default
// values), which deploys the same objects with two differences: it passes
// --kubelet-root-dir=/var/lib/kubelet (the flag's default) and sets
// imagePullPolicy IfNotPresent, and it lacks the /var/run/dranet mount of
// the driver's database, which the release's README says every deployment
// must provide. The image is the release's: install.yaml names the moving
// tag stable, the chart's tag is the release it is packaged at.
func dranetDeployment() vendorDeployment {
	hostToContainer := func(path string) string { return path + " prop=HostToContainer" }
	return vendorDeployment{
		Source: "kubernetes-sigs/dranet v1.4.0, install.yaml (and chart deployments/helm/dranet, default values)",
		Spec:   v1alpha1.DriverSpec{Name: DRANETDriver, Profile: v1alpha1.DriverProfileDRANET},
		Objects: []string{
			"ClusterRole kubelet-plugin-dranet",        // dranet
			"ClusterRoleBinding kubelet-plugin-dranet", // dranet
			"ServiceAccount kubelet-plugin",            // dranet, in kube-system
			"DaemonSet kubelet-plugin",                 // dranet, in kube-system
		},
		Workloads: []vendorWorkload{{
			Kind: "DaemonSet", Name: "kubelet-plugin",
			UpdateStrategy: "RollingUpdate maxUnavailable=1", // not set: Kubernetes' default
			Pod: podFacts{
				ServiceAccount: "kubelet-plugin",
				HostNetwork:    true,
				Tolerations:    []string{"Exists NoSchedule"},
				Volumes: map[string]string{
					"device-plugin":   "hostPath /var/lib/kubelet/plugins",
					"plugin-registry": "hostPath /var/lib/kubelet/plugins_registry",
					"nri-plugin":      "hostPath /var/run/nri",
					"netns":           "hostPath /var/run/netns",
					"infiniband":      "hostPath /dev/infiniband",
					"bpf-programs":    "hostPath /sys/fs/bpf",
					"dranet-run":      "hostPath /var/run/dranet DirectoryOrCreate",
				},
				Containers: []containerFacts{{
					Name:            "dranet",
					Image:           DRANETImage,
					Args:            []string{"/dranet", "--v=4", "--hostname-override=$(NODE_NAME)"},
					Env:             map[string]string{"NODE_NAME": "field:spec.nodeName"},
					Resources:       `{"requests":{"cpu":"100m","memory":"50Mi"}}`,
					SecurityContext: `{"privileged":true}`,
					Probes: map[string]string{
						"startup":   "http 9177 /healthz period=5 failure=12",
						"readiness": "http 9177 /healthz",
					},
					Mounts: map[string]string{
						"device-plugin":   "/var/lib/kubelet/plugins",
						"plugin-registry": "/var/lib/kubelet/plugins_registry",
						"nri-plugin":      "/var/run/nri",
						"netns":           hostToContainer("/var/run/netns"),
						"infiniband":      hostToContainer("/dev/infiniband"),
						"bpf-programs":    hostToContainer("/sys/fs/bpf"),
						"dranet-run":      "/var/run/dranet",
					},
				}},
			},
		}},
		Identities: []vendorIdentity{{
			ServiceAccount: "kubelet-plugin",
			Cluster: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
				{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
				{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"list", "watch", "create", "update", "delete"}},
				{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims", "deviceclasses"}, Verbs: []string{"get"}},
				{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims/status"}, Verbs: []string{"patch", "update"}},
				{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims/driver"}, Verbs: []string{"associated-node:patch", "associated-node:update"}, ResourceNames: []string{"dra.net"}},
			},
		}},
		Differences: map[string]string{
			"object ClusterRole kubelet-plugin":                                   "the common plugin role of every profile (slices, the claims it prepares, its Node); dranet's own rules are in kubelet-plugin-dranet",
			"object ClusterRoleBinding kubelet-plugin":                            "binds the common plugin role",
			"rbac kubelet-plugin: cluster resource.k8s.io/resourceslices get *":   "granted by the common plugin role; dranet lists and watches its slices, so reading one more is no new power",
			"rbac kubelet-plugin: cluster resource.k8s.io/resourceslices patch *": "granted by the common plugin role; the node-restriction policy keeps every write to the plugin's own node and driver name",
			"object DeviceClass dra.net": "dranet ships no DeviceClass (its documentation has users write one per network); the profile's class selects every interface " +
				"the driver publishes (non-veth by its default filter), so claims work out of the box; spec.deviceClasses replaces it",
			`DeviceClass dra.net: selector[device.driver == "dra.net"]`:       "the profile's class: every device of the driver",
			"DeviceClass dra.net: extendedResourceName":                       "the profile's class has none",
			"object ValidatingAdmissionPolicy resourceslices-own-node":        "dranet has no policy; the profile adds the common one, which keeps each plugin instance to the slices of its own node and driver name",
			"object ValidatingAdmissionPolicyBinding resourceslices-own-node": "the common node-restriction policy's binding",
		},
	}
}

func TestFidelityDRANET(t *testing.T) { checkFidelity(t, dranetDeployment()) }
