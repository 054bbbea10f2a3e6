package driver

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// nvidiaGates are the feature gates NVIDIARelease knows, with their
// defaults (pkg/featuregates of the release, plus the Kubernetes logging
// gates it registers). A gate not listed here makes the driver exit at
// start, so the spec is refused instead.
var nvidiaGates = map[string]bool{
	"TimeSlicingSettings":       false,
	"MPSSupport":                false,
	"IMEXDaemonsWithDNSNames":   true,
	"PassthroughSupport":        false,
	"NVMLDeviceHealthCheck":     false,
	"DynamicMIG":                false,
	"ComputeDomainCliques":      true,
	"CrashOnNVLinkFabricErrors": true,
	"DeviceMetadata":            false,
	"ContextualLogging":         true,
	"LoggingAlphaOptions":       false,
	"LoggingBetaOptions":        true,
}

// nvidiaGateRules are the combinations NVIDIARelease refuses at start
// (its ValidateFeatureGates), checked on the effective gate values.
var nvidiaGateRules = []struct {
	gate, other string
	// requires: gate needs other on; otherwise they exclude each other.
	requires bool
}{
	{gate: "ComputeDomainCliques", other: "IMEXDaemonsWithDNSNames", requires: true},
	{gate: "DeviceMetadata", other: "PassthroughSupport", requires: true},
	{gate: "DynamicMIG", other: "PassthroughSupport"},
	{gate: "DynamicMIG", other: "NVMLDeviceHealthCheck"},
	{gate: "DynamicMIG", other: "MPSSupport"},
	{gate: "PassthroughSupport", other: "NVMLDeviceHealthCheck"},
}

// nvidiaGateEnabled is a gate's effective value: the spec's, else the
// release's default.
func nvidiaGateEnabled(o *v1alpha1.NVIDIAOptions, gate string) bool {
	if o != nil {
		if v, ok := o.FeatureGates[gate]; ok {
			return v
		}
	}
	return nvidiaGates[gate]
}

// validateNVIDIAOptions checks what the CRD's schema cannot: a clean
// driver root, gates the release knows, and gate combinations it accepts.
func validateNVIDIAOptions(o *v1alpha1.NVIDIAOptions, p *field.Path) *field.Error {
	if o == nil {
		return nil
	}
	if r := o.DriverRoot; r != "" && (!strings.HasPrefix(r, "/") || path.Clean(r) != r) {
		return field.Invalid(p.Child("driverRoot"), r, "must be an absolute, clean path (no trailing slash, no . or ..), for example /run/nvidia/driver")
	}
	seen := map[v1alpha1.NVIDIAPlugin]bool{}
	for i, pl := range o.Plugins {
		if pl != v1alpha1.NVIDIAPluginGPUs && pl != v1alpha1.NVIDIAPluginComputeDomains {
			return field.NotSupported(p.Child("plugins").Index(i), pl, []string{string(v1alpha1.NVIDIAPluginGPUs), string(v1alpha1.NVIDIAPluginComputeDomains)})
		}
		if seen[pl] {
			return field.Duplicate(p.Child("plugins").Index(i), pl)
		}
		seen[pl] = true
	}
	switch o.DevicePluginNodes {
	case "", v1alpha1.DevicePluginNodesRefuse, v1alpha1.DevicePluginNodesAllow:
	default:
		return field.NotSupported(p.Child("devicePluginNodes"), o.DevicePluginNodes, []string{string(v1alpha1.DevicePluginNodesRefuse), string(v1alpha1.DevicePluginNodesAllow)})
	}
	for _, name := range slices.Sorted(maps.Keys(o.FeatureGates)) {
		if _, ok := nvidiaGates[name]; !ok {
			return field.NotSupported(p.Child("featureGates").Key(name), name, slices.Sorted(maps.Keys(nvidiaGates)))
		}
	}
	for _, r := range nvidiaGateRules {
		on, other := nvidiaGateEnabled(o, r.gate), nvidiaGateEnabled(o, r.other)
		switch {
		case r.requires && on && !other:
			return field.Invalid(p.Child("featureGates").Key(r.gate), true, fmt.Sprintf("%s needs %s enabled too (%s refuses it otherwise)", r.gate, r.other, NVIDIARelease))
		case !r.requires && on && other:
			return field.Invalid(p.Child("featureGates").Key(r.gate), true, fmt.Sprintf("%s and %s cannot both be enabled (%s refuses it)", r.gate, r.other, NVIDIARelease))
		}
	}
	return nil
}

// nvidiaFeatureGatesEnv is FEATURE_GATES as the chart writes it: every
// gate the spec sets, by name, each followed by a comma (the driver's
// parser skips the empty last item). Empty when the spec sets none: the
// chart then sets no FEATURE_GATES at all.
func nvidiaFeatureGatesEnv(o *v1alpha1.NVIDIAOptions) string {
	if o == nil || len(o.FeatureGates) == 0 {
		return ""
	}
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(o.FeatureGates)) {
		fmt.Fprintf(&b, "%s=%t,", name, o.FeatureGates[name])
	}
	return b.String()
}

// tune applies spec.drivers[].nvidia to the base objects the way the
// chart's values do: the plugin containers and the controller of the
// plugins that run, the driver root, FEATURE_GATES, and what the MPSSupport
// and PassthroughSupport gates add.
func (nvidiaProfile) tune(spec *v1alpha1.DriverSpec, obj *baseObject) (bool, error) {
	o := spec.NVIDIA
	plugins := nvidiaPlugins(spec)
	gpus := slices.Contains(plugins, v1alpha1.NVIDIAPluginGPUs)
	cds := slices.Contains(plugins, v1alpha1.NVIDIAPluginComputeDomains)
	gates := nvidiaFeatureGatesEnv(o)
	switch {
	case obj.daemonSet != nil && obj.daemonSet.Name == pluginDaemonSet:
		pod := &obj.daemonSet.Spec.Template.Spec
		pod.Containers = slices.DeleteFunc(pod.Containers, func(c corev1.Container) bool {
			return (c.Name == nvidiaGPUContainer && !gpus) || (c.Name == nvidiaCDContainer && !cds)
		})
		setNVIDIADriverRoot(pod, nvidiaDriverRoot(o))
		for i := range pod.Containers {
			if gates != "" {
				pod.Containers[i].Env = insertEnvBefore(pod.Containers[i].Env, "KUBELET_REGISTRAR_DIRECTORY_PATH", corev1.EnvVar{Name: "FEATURE_GATES", Value: gates})
			}
		}
		if gpus && nvidiaGateEnabled(o, "PassthroughSupport") {
			addPassthroughMounts(pod)
		}
	case obj.deployment != nil && obj.deployment.Name == nvidiaController:
		if !cds {
			return false, nil
		}
		if gates != "" {
			c := &obj.deployment.Spec.Template.Spec.Containers[0]
			c.Env = insertEnvBefore(c.Env, "LEADER_ELECTION_ENABLED", corev1.EnvVar{Name: "FEATURE_GATES", Value: gates})
		}
	case obj.u.GetKind() == "Role" && obj.u.GetName() == pluginServiceAccount && gpus && nvidiaGateEnabled(o, "MPSSupport"):
		// The GPU plugin runs the MPS control daemon as a Deployment in
		// the driver namespace.
		return true, addRule(obj, rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"deployments"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}})
	}
	return true, nil
}

// Base names of the nvidia-gpu workloads.
const (
	pluginDaemonSet  = "kubelet-plugin"
	nvidiaController = "controller"
)

// setNVIDIADriverRoot points the plugins and the init container at the
// driver root: NVIDIA_DRIVER_ROOT, the driver-root volume and its parent.
// With the driver on the host (/) the init container reads the parent
// read-only; elsewhere another pod (the GPU Operator's driver container)
// mounts the driver there later, which the init container sees only with
// HostToContainer propagation.
func setNVIDIADriverRoot(pod *corev1.PodSpec, root string) {
	parent := path.Dir(root)
	for i := range pod.Volumes {
		hp := pod.Volumes[i].HostPath
		switch {
		case hp == nil:
		case pod.Volumes[i].Name == "driver-root":
			hp.Path = root
		case pod.Volumes[i].Name == "driver-root-parent":
			hp.Path = parent
		}
	}
	for _, list := range [][]corev1.Container{pod.InitContainers, pod.Containers} {
		for i := range list {
			c := &list[i]
			for j := range c.Env {
				if c.Env[j].Name == "NVIDIA_DRIVER_ROOT" {
					c.Env[j].Value = root
				}
			}
			if c.Name != nvidiaInitContainer || root == NVIDIADriverRoot {
				continue
			}
			for j := range c.VolumeMounts {
				if c.VolumeMounts[j].Name == "driver-root-parent" {
					c.VolumeMounts[j].ReadOnly = false
					c.VolumeMounts[j].MountPropagation = ptr.To(corev1.MountPropagationHostToContainer)
				}
			}
		}
	}
}

// addPassthroughMounts gives the GPU plugin what PassthroughSupport needs
// to rebind GPUs to vfio-pci: the host's root (read-only, to run host
// commands), /sys and /proc (Bidirectional).
func addPassthroughMounts(pod *corev1.PodSpec) {
	dir := corev1.HostPathDirectory
	for _, v := range []struct {
		name, host, mount string
		readOnly          bool
		prop              corev1.MountPropagationMode
	}{
		{"host-root", "/", "/host-root", true, corev1.MountPropagationHostToContainer},
		{"sysfs", "/sys/", "/sys/", false, corev1.MountPropagationBidirectional},
		{"procfs", "/proc/", "/proc/", false, corev1.MountPropagationBidirectional},
	} {
		pod.Volumes = append(pod.Volumes, corev1.Volume{Name: v.name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: v.host, Type: &dir}}})
		for i := range pod.Containers {
			if pod.Containers[i].Name == nvidiaGPUContainer {
				pod.Containers[i].VolumeMounts = append(pod.Containers[i].VolumeMounts,
					corev1.VolumeMount{Name: v.name, MountPath: v.mount, ReadOnly: v.readOnly, MountPropagation: ptr.To(v.prop)})
			}
		}
	}
}

// insertEnvBefore inserts e before the variable named before, or appends
// it when there is none.
func insertEnvBefore(env []corev1.EnvVar, before string, e corev1.EnvVar) []corev1.EnvVar {
	i := slices.IndexFunc(env, func(v corev1.EnvVar) bool { return v.Name == before })
	if i < 0 {
		return append(env, e)
	}
	return slices.Insert(env, i, e)
}

// addRule appends a rule to a Role or ClusterRole of a profile base.
func addRule(obj *baseObject, rule rbacv1.PolicyRule) error {
	var role rbacv1.Role
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.u.Object, &role); err != nil {
		return fmt.Errorf("decode Role %s: %w", obj.u.GetName(), err)
	}
	role.Rules = append(role.Rules, rule)
	u, err := toUnstructured(&role)
	if err != nil {
		return err
	}
	obj.u.Object = u.Object
	return nil
}
