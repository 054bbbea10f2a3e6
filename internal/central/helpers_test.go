package central

import (
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// slice is a device slice of one pool with the named devices; node makes it
// node-local.
func slice(name, driver, pool, node string, devices ...string) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceSliceSpec{
			Driver: driver,
			Pool:   resourcev1.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: 1},
		},
	}
	if node != "" {
		s.Spec.NodeName = &node
	} else {
		s.Spec.AllNodes = ptr(true)
	}
	for _, d := range devices {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: d})
	}
	return s
}

// withTaint adds the operator's taint to every device of s.
func withTaint(s *resourcev1.ResourceSlice) *resourcev1.ResourceSlice {
	for i := range s.Spec.Devices {
		s.Spec.Devices[i].Taints = append(s.Spec.Devices[i].Taints, Taint())
	}
	return s
}

// counted sets the pool's generation and slice count.
func counted(s *resourcev1.ResourceSlice, gen, count int64) *resourcev1.ResourceSlice {
	s.Spec.Pool.Generation, s.Spec.Pool.ResourceSliceCount = gen, count
	return s
}

func node(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// rule is a DeviceTaintRule; owned gives it the operator's labels.
func rule(name string, owned bool, sel *resourcev1.DeviceTaintSelector, taint resourcev1.DeviceTaint) resourcev1.DeviceTaintRule {
	r := resourcev1.DeviceTaintRule{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourcev1.DeviceTaintRuleSpec{DeviceSelector: sel, Taint: taint},
	}
	if owned {
		r.Labels = RuleLabels()
	}
	return r
}

func sel(driver, pool, device string) *resourcev1.DeviceTaintSelector {
	s := &resourcev1.DeviceTaintSelector{}
	if driver != "" {
		s.Driver = ptr(driver)
	}
	if pool != "" {
		s.Pool = ptr(pool)
	}
	if device != "" {
		s.Device = ptr(device)
	}
	return s
}

// diffYAML returns "" when want and got are equal, else both as YAML.
func diffYAML(want, got any) string {
	w, err := yaml.Marshal(want)
	if err != nil {
		return err.Error()
	}
	g, err := yaml.Marshal(got)
	if err != nil {
		return err.Error()
	}
	if string(w) == string(g) {
		return ""
	}
	return "want:\n" + string(w) + "got:\n" + string(g)
}
