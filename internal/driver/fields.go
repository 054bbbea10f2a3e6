package driver

import (
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// defaultMaxUnavailable is the rollout width when the spec sets none: one
// node at a time loses its plugin, as the CRD defaults it.
var defaultMaxUnavailable = intstr.FromInt32(1)

// applyPluginFields sets the DRAStack fields on the kubelet-plugin
// DaemonSet of a profile: scheduling (nodeSelector, tolerations, priority
// class), the rollout width, and, on each plugin container, the extra args,
// env, resources and host mounts. Values the profile set are kept unless
// the spec sets the same key: env entries and nodeSelector keys of the spec
// win, tolerations and args are appended.
func applyPluginFields(ds *appsv1.DaemonSet, spec *v1alpha1.DriverSpec, plugins []string, path *field.Path) error {
	pod := &ds.Spec.Template.Spec
	if len(spec.NodeSelector) > 0 {
		if pod.NodeSelector == nil {
			pod.NodeSelector = map[string]string{}
		}
		for k, v := range spec.NodeSelector {
			pod.NodeSelector[k] = v
		}
	}
	for _, t := range spec.Tolerations {
		if !slices.ContainsFunc(pod.Tolerations, func(have corev1.Toleration) bool { return have.MatchToleration(&t) }) {
			pod.Tolerations = append(pod.Tolerations, t)
		}
	}
	if spec.PriorityClassName != "" {
		pod.PriorityClassName = spec.PriorityClassName
	}
	maxUnavailable := defaultMaxUnavailable
	if spec.UpdateStrategy.MaxUnavailable != nil {
		maxUnavailable = *spec.UpdateStrategy.MaxUnavailable
	}
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{
		Type:          appsv1.RollingUpdateDaemonSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &maxUnavailable},
	}
	if err := addMountVolumes(pod, spec.Mounts, path.Child("mounts")); err != nil {
		return err
	}
	for _, name := range plugins {
		i := slices.IndexFunc(pod.Containers, func(c corev1.Container) bool { return c.Name == name })
		if i < 0 {
			return fmt.Errorf("profile DaemonSet %s has no plugin container %q", ds.Name, name)
		}
		c := &pod.Containers[i]
		c.Args = append(c.Args, spec.Args...)
		c.Env = mergeEnv(c.Env, spec.Env)
		if spec.Resources != nil {
			c.Resources = *spec.Resources.DeepCopy()
		}
		for _, m := range spec.Mounts {
			path := m.MountPath
			if path == "" {
				path = m.HostPath
			}
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: m.Name, MountPath: path, ReadOnly: m.ReadOnly})
		}
	}
	setPullPolicy(pod, spec.ImagePullPolicy)
	return nil
}

// applyControllerFields sets what the DRAStack says about every driver
// container on a driver's controller Deployment: the pull policy.
// Scheduling fields describe the kubelet plugin and stay off controllers.
func applyControllerFields(d *appsv1.Deployment, spec *v1alpha1.DriverSpec) {
	setPullPolicy(&d.Spec.Template.Spec, spec.ImagePullPolicy)
}

// addMountVolumes adds a hostPath volume per spec mount. A name that the
// profile already uses is an error: silently shadowing the plugin registry
// or the CDI directory would break the plugin in ways hard to trace.
func addMountVolumes(pod *corev1.PodSpec, mounts []v1alpha1.HostPathMount, path *field.Path) error {
	for i, m := range mounts {
		if slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) {
			return field.Invalid(path.Index(i).Child("name"), m.Name, "the profile already has a volume of that name")
		}
		pod.Volumes = append(pod.Volumes, corev1.Volume{
			Name:         m.Name,
			VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: m.HostPath}},
		})
	}
	return nil
}

// mergeEnv replaces same-named entries of base with those of extra, in
// place, and appends the others in their order.
func mergeEnv(base, extra []corev1.EnvVar) []corev1.EnvVar {
	for _, e := range extra {
		if i := slices.IndexFunc(base, func(b corev1.EnvVar) bool { return b.Name == e.Name }); i >= 0 {
			base[i] = *e.DeepCopy()
			continue
		}
		base = append(base, *e.DeepCopy())
	}
	return base
}

// setPullPolicy sets the pull policy of every container and init container.
func setPullPolicy(pod *corev1.PodSpec, policy corev1.PullPolicy) {
	if policy == "" {
		return
	}
	for i := range pod.InitContainers {
		pod.InitContainers[i].ImagePullPolicy = policy
	}
	for i := range pod.Containers {
		pod.Containers[i].ImagePullPolicy = policy
	}
}
