package claimpolicy

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/allocator"
)

func TestConfigFrom(t *testing.T) {
	stack := func(name string, spec v1alpha1.ClaimsSpec) *v1alpha1.DRAStack {
		return &v1alpha1.DRAStack{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.DRAStackSpec{Claims: spec}}
	}
	for _, tc := range []struct {
		name  string
		stack *v1alpha1.DRAStack
		want  Config
	}{
		{"no DRAStack: inactive, nothing gated", nil, Config{}},
		{"a DRAStack with another name does not count", stack("other", v1alpha1.ClaimsSpec{}), Config{}},
		{"empty spec: native engine, pods gated", stack("default", v1alpha1.ClaimsSpec{}),
			Config{Active: true, Engine: "native", GatePods: true, PlacementTimeout: DefaultPlacementTimeout, AllocationTimeout: DefaultAllocationTimeout, PlacementPolicy: allocator.PlacementPack, GangTimeout: DefaultGangTimeout}},
		{"gatePods false is kept", stack("default", v1alpha1.ClaimsSpec{GatePods: ptr.To(false), Engine: v1alpha1.EngineUpstream}),
			Config{Active: true, Engine: "upstream", PlacementTimeout: DefaultPlacementTimeout, AllocationTimeout: DefaultAllocationTimeout, PlacementPolicy: allocator.PlacementPack, GangTimeout: DefaultGangTimeout}},
		{"immediate classes are sorted and unique", stack("default", v1alpha1.ClaimsSpec{ImmediateClasses: []string{"tpu", "gpu", "tpu"}}),
			Config{Active: true, Engine: "native", GatePods: true, ImmediateClasses: []string{"gpu", "tpu"}, PlacementTimeout: DefaultPlacementTimeout, AllocationTimeout: DefaultAllocationTimeout, PlacementPolicy: allocator.PlacementPack, GangTimeout: DefaultGangTimeout}},
		{"central classes of every entry, sorted and unique; timeouts as written", stack("default", v1alpha1.ClaimsSpec{
			Central:          []v1alpha1.CentralDevices{{Driver: "gpu.example.com", Classes: []string{"gpu", "big-gpu"}}, {Driver: "tpu.example.com", Classes: []string{"gpu", "tpu"}}},
			PlacementTimeout: &metav1.Duration{Duration: 30e9}, AllocationTimeout: &metav1.Duration{Duration: 2e9},
		}), Config{Active: true, Engine: "native", GatePods: true, CentralClasses: []string{"big-gpu", "gpu", "tpu"},
			Central:          []v1alpha1.CentralDevices{{Driver: "gpu.example.com", Classes: []string{"gpu", "big-gpu"}}, {Driver: "tpu.example.com", Classes: []string{"gpu", "tpu"}}},
			PlacementTimeout: 30e9, AllocationTimeout: 2e9, PlacementPolicy: allocator.PlacementPack, GangTimeout: DefaultGangTimeout}},
		{"placement policy and gang timeout as written", stack("default", v1alpha1.ClaimsSpec{
			PlacementPolicy: v1alpha1.PlacementFirstFit, GangTimeout: &metav1.Duration{Duration: 7e9},
		}), Config{Active: true, Engine: "native", GatePods: true, PlacementTimeout: DefaultPlacementTimeout, AllocationTimeout: DefaultAllocationTimeout,
			PlacementPolicy: allocator.PlacementFirstFit, GangTimeout: 7e9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ConfigFrom(tc.stack); !got.Equal(tc.want) {
				t.Errorf("ConfigFrom = %+v, want %+v", got, tc.want)
			}
		})
	}
	gone := stack("default", v1alpha1.ClaimsSpec{})
	gone.DeletionTimestamp = ptr.To(metav1.Now())
	if ConfigFrom(gone).Active {
		t.Error("a DRAStack being deleted must not keep allocating")
	}
}

func TestSelectClaim(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		claim *resourceapi.ResourceClaim
		want  Why
	}{
		{"plain claim: kube-scheduler's", active, claim("c"), WhyNone},
		{"CEL constraints annotation", active, claim("c", withCEL), WhyCELConstraints},
		{"an empty CEL list still opts in", active, claim("c", func(c *resourceapi.ResourceClaim) {
			c.Annotations = map[string]string{allocator.CELConstraintsAnnotation: "[]"}
		}), WhyCELConstraints},
		{"immediate label", active, claim("c", withImmediateLabel), WhyImmediateLabel},
		{"label with another value does not opt in", active, claim("c", func(c *resourceapi.ResourceClaim) {
			c.Labels = map[string]string{AllocationLabel: "immediate"}
		}), WhyNone},
		{"immediate class in exactly", active, claim("c", withClass("tpu")), WhyImmediateClass},
		{"immediate class in one subrequest of firstAvailable", active, claim("c", withFirstAvailable("gpu", "tpu")), WhyImmediateClass},
		{"firstAvailable without an immediate class", active, claim("c", withFirstAvailable("gpu", "cpu")), WhyNone},
		{"CEL wins over the label in the reason", active, claim("c", withImmediateLabel, withCEL), WhyCELConstraints},
		{"inactive configuration selects nothing", Config{}, claim("c", withCEL, withImmediateLabel, withClass("tpu")), WhyNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SelectClaim(tc.cfg, tc.claim); got != tc.want {
				t.Errorf("SelectClaim = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSelectTemplate(t *testing.T) {
	cel := map[string]string{allocator.CELConstraintsAnnotation: `[{"expression": "true"}]`}
	immediate := map[string]string{AllocationLabel: AllocationImmediate}
	for _, tc := range []struct {
		name string
		tmpl *resourceapi.ResourceClaimTemplate
		want Why
	}{
		{"plain template", template("t", nil, nil, "gpu"), WhyNone},
		{"annotation in spec.metadata is copied to the claims", template("t", nil, cel, "gpu"), WhyCELConstraints},
		{"label in spec.metadata", template("t", immediate, nil, "gpu"), WhyImmediateLabel},
		{"immediate class", template("t", nil, nil, "tpu"), WhyImmediateClass},
		{"annotation on the template object itself is not copied", func() *resourceapi.ResourceClaimTemplate {
			tm := template("t", nil, nil, "gpu")
			tm.Annotations = cel
			return tm
		}(), WhyNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SelectTemplate(active, tc.tmpl); got != tc.want {
				t.Errorf("SelectTemplate = %q, want %q", got, tc.want)
			}
		})
	}
}

// A claim that tolerates the central taint is the operator's: otherwise
// kube-scheduler could give it central devices.
func TestToleratesCentral(t *testing.T) {
	cfg := Config{Active: true}
	tol := func(ts ...resourceapi.DeviceToleration) *resourceapi.ResourceClaim {
		c := &resourceapi.ResourceClaim{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "r", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu", Tolerations: ts}}}}}}
		return c
	}
	for _, tc := range []struct {
		name string
		c    *resourceapi.ResourceClaim
		want Why
	}{
		{"no toleration", tol(), WhyNone},
		{"operator Exists, no key: tolerates everything", tol(resourceapi.DeviceToleration{Operator: resourceapi.DeviceTolerationOpExists}), WhyToleratesCentral},
		{"the central key", tol(resourceapi.DeviceToleration{Key: centralTaintKey, Operator: resourceapi.DeviceTolerationOpExists}), WhyToleratesCentral},
		{"the central key, Equal empty value", tol(resourceapi.DeviceToleration{Key: centralTaintKey, Operator: resourceapi.DeviceTolerationOpEqual}), WhyToleratesCentral},
		{"the central key, NoExecute only", tol(resourceapi.DeviceToleration{Key: centralTaintKey, Operator: resourceapi.DeviceTolerationOpExists, Effect: resourceapi.DeviceTaintEffectNoExecute}), WhyNone},
		{"another key", tol(resourceapi.DeviceToleration{Key: "example.com/maintenance", Operator: resourceapi.DeviceTolerationOpExists}), WhyNone},
		{"in a subrequest", &resourceapi.ResourceClaim{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "r", FirstAvailable: []resourceapi.DeviceSubRequest{{Name: "a", DeviceClassName: "gpu"}, {Name: "b", DeviceClassName: "gpu",
				Tolerations: []resourceapi.DeviceToleration{{Operator: resourceapi.DeviceTolerationOpExists}}}}}}}}}, WhyToleratesCentral},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SelectClaim(cfg, tc.c); got != tc.want {
				t.Errorf("Select = %q, want %q", got, tc.want)
			}
		})
	}
}
