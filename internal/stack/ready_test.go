package stack

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

func cond(t string, s metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: t, Status: s, Reason: reason, Message: reason + " message"}
}

func TestReadyCondition(t *testing.T) {
	valid := cond(v1alpha1.ConditionSpecValid, metav1.ConditionTrue, ReasonSpecValid)
	compat := cond(v1alpha1.ConditionClusterCompatible, metav1.ConditionTrue, ReasonCompatible)
	driversReady := cond(v1alpha1.ConditionDriversReady, metav1.ConditionTrue, "AllDriversReady")
	driversReady.ObservedGeneration = 6
	tests := []struct {
		name       string
		conds      []metav1.Condition
		drivers    int
		unreported []string
		wantStatus metav1.ConditionStatus
		wantReason string
	}{
		{name: "drivers declared, DriversReady not reported: not Ready", conds: []metav1.Condition{valid, compat}, drivers: 1, unreported: []string{"a"},
			wantStatus: metav1.ConditionUnknown, wantReason: ReasonWaiting},
		{name: "a driver just added, DriversReady still True for the others: not Ready", conds: []metav1.Condition{valid, compat, driversReady}, drivers: 2, unreported: []string{"b"},
			wantStatus: metav1.ConditionUnknown, wantReason: ReasonWaiting},
		{name: "an upgrade of a reported driver keeps Ready until judged again", conds: []metav1.Condition{valid, compat, driversReady}, drivers: 1,
			wantStatus: metav1.ConditionTrue, wantReason: ReasonStackReady},
		{name: "drivers declared and ready", conds: []metav1.Condition{valid, compat, driversReady}, drivers: 2,
			wantStatus: metav1.ConditionTrue, wantReason: ReasonStackReady},
		{name: "drivers ready but a rollout stalled", conds: []metav1.Condition{valid, compat, driversReady, cond(v1alpha1.ConditionDegraded, metav1.ConditionTrue, "RolloutStalled")}, drivers: 1,
			wantStatus: metav1.ConditionFalse, wantReason: "RolloutStalled"},
		{name: "no drivers, DriversReady absent", conds: []metav1.Condition{valid, compat},
			wantStatus: metav1.ConditionTrue, wantReason: ReasonStackReady},
		{name: "nothing reported", wantStatus: metav1.ConditionUnknown, wantReason: ReasonWaiting},
		{name: "spec and cluster fine, others absent", conds: []metav1.Condition{valid, compat}, wantStatus: metav1.ConditionTrue, wantReason: ReasonStackReady},
		{name: "invalid spec wins", conds: []metav1.Condition{cond(v1alpha1.ConditionSpecValid, metav1.ConditionFalse, ReasonInvalidSpec), cond(v1alpha1.ConditionClusterCompatible, metav1.ConditionFalse, ReasonFeatureMissing)}, wantStatus: metav1.ConditionFalse, wantReason: ReasonInvalidSpec},
		{name: "incompatible cluster", conds: []metav1.Condition{valid, cond(v1alpha1.ConditionClusterCompatible, metav1.ConditionFalse, ReasonFeatureMissing)}, wantStatus: metav1.ConditionFalse, wantReason: ReasonFeatureMissing},
		{name: "probe unknown", conds: []metav1.Condition{valid, cond(v1alpha1.ConditionClusterCompatible, metav1.ConditionUnknown, ReasonProbeFailed)}, wantStatus: metav1.ConditionUnknown, wantReason: ReasonProbeFailed},
		{name: "driver not ready", conds: []metav1.Condition{valid, compat, cond(v1alpha1.ConditionDriversReady, metav1.ConditionFalse, "DriverNotReady")}, wantStatus: metav1.ConditionFalse, wantReason: "DriverNotReady"},
		{name: "unhealthy pools do not block Ready", conds: []metav1.Condition{valid, compat, cond(v1alpha1.ConditionPoolsHealthy, metav1.ConditionFalse, "PoolInvalid")}, wantStatus: metav1.ConditionTrue, wantReason: ReasonStackReady},
		{name: "degraded", conds: []metav1.Condition{valid, compat, cond(v1alpha1.ConditionDegraded, metav1.ConditionTrue, "CrashLoop")}, wantStatus: metav1.ConditionFalse, wantReason: "CrashLoop"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ReadyCondition(tc.conds, tc.drivers, tc.unreported, 7)
			if got.Status != tc.wantStatus || got.Reason != tc.wantReason {
				t.Fatalf("Ready = %s/%s, want %s/%s", got.Status, got.Reason, tc.wantStatus, tc.wantReason)
			}
			if got.ObservedGeneration != 7 || got.Type != v1alpha1.ConditionReady || got.Message == "" {
				t.Fatalf("Ready condition incomplete: %+v", got)
			}
		})
	}
}

func TestCompatibleCondition(t *testing.T) {
	multiHost := &v1alpha1.DRAStackSpec{MultiHost: []v1alpha1.MultiHostSpec{validMultiHost()}}
	full := &v1alpha1.ClusterStatus{KubernetesVersion: "v1.36.3", ResourceAPIVersions: []string{"v1", "v1beta2"},
		Features: v1alpha1.ClusterFeatures{PartitionableDevices: true, ListTypeAttributes: true}}
	noPartitions := full.DeepCopy()
	noPartitions.Features.PartitionableDevices = false
	withTaintRules := full.DeepCopy()
	withTaintRules.Features.DeviceTaintRules, withTaintRules.Features.DeviceTaintRulesVersion = true, "v1"
	withTaints := full.DeepCopy()
	withTaints.Features.DeviceTaints = true
	centralNodeLocal := &v1alpha1.DRAStackSpec{Claims: v1alpha1.ClaimsSpec{Central: []v1alpha1.CentralDevices{
		{Driver: "gpu.example.com", NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"topology": "true"}}},
	}}}
	centralPublished := &v1alpha1.DRAStackSpec{MultiHost: multiHost.MultiHost, Claims: v1alpha1.ClaimsSpec{Central: []v1alpha1.CentralDevices{
		{Driver: "tpu.example.com"},
	}}}
	tests := []struct {
		name       string
		spec       *v1alpha1.DRAStackSpec
		cluster    *v1alpha1.ClusterStatus
		probeErr   error
		wantStatus metav1.ConditionStatus
		wantReason string
		wantInMsg  string
	}{
		{name: "compatible", spec: multiHost, cluster: full, wantStatus: metav1.ConditionTrue, wantReason: ReasonCompatible, wantInMsg: "v1.36.3"},
		{name: "probe failed", spec: multiHost, cluster: full, probeErr: errors.New("boom"), wantStatus: metav1.ConditionUnknown, wantReason: ReasonProbeFailed, wantInMsg: "boom"},
		{name: "no v1", spec: &v1alpha1.DRAStackSpec{}, cluster: &v1alpha1.ClusterStatus{ResourceAPIVersions: []string{"v1beta1"}}, wantStatus: metav1.ConditionFalse, wantReason: ReasonResourceAPIAbsent, wantInMsg: "resource.k8s.io/v1"},
		{name: "multiHost needs partitionable devices", spec: multiHost, cluster: noPartitions, wantStatus: metav1.ConditionFalse, wantReason: ReasonFeatureMissing,
			wantInMsg: "spec.multiHost needs partitionableDevices (feature gate DRAPartitionableDevices)"},
		{name: "central node-local pools need taint rules", spec: centralNodeLocal, cluster: full, wantStatus: metav1.ConditionFalse, wantReason: ReasonFeatureMissing,
			wantInMsg: "spec.claims.central[0] needs deviceTaintRules (feature gate DRADeviceTaintRules)"},
		{name: "central node-local pools with taint rules", spec: centralNodeLocal, cluster: withTaintRules, wantStatus: metav1.ConditionTrue, wantReason: ReasonCompatible},
		{name: "central published devices need device taints only", spec: centralPublished, cluster: withTaints, wantStatus: metav1.ConditionTrue, wantReason: ReasonCompatible},
		{name: "central published devices without device taints", spec: centralPublished, cluster: full, wantStatus: metav1.ConditionFalse, wantReason: ReasonFeatureMissing,
			wantInMsg: "spec.claims.central[0] needs deviceTaints (feature gate DRADeviceTaints)"},
		{name: "every missing feature is named", spec: &v1alpha1.DRAStackSpec{MultiHost: multiHost.MultiHost, Claims: centralNodeLocal.Claims}, cluster: noPartitions,
			wantStatus: metav1.ConditionFalse, wantReason: ReasonFeatureMissing,
			wantInMsg: "Kubernetes v1.36.3 lacks what the spec needs: spec.multiHost needs partitionableDevices (feature gate DRAPartitionableDevices); spec.claims.central[0] needs deviceTaintRules"},
		{name: "empty spec needs nothing", spec: &v1alpha1.DRAStackSpec{}, cluster: noPartitions, wantStatus: metav1.ConditionTrue, wantReason: ReasonCompatible},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := CompatibleCondition(tc.spec, tc.cluster, tc.probeErr, 1)
			if got.Status != tc.wantStatus || got.Reason != tc.wantReason || !strings.Contains(got.Message, tc.wantInMsg) {
				t.Fatalf("got %s/%s %q, want %s/%s containing %q", got.Status, got.Reason, got.Message, tc.wantStatus, tc.wantReason, tc.wantInMsg)
			}
		})
	}
}

func TestSummaries(t *testing.T) {
	if got := PoolSummary(&v1alpha1.PoolCounts{Total: 12, Healthy: 11}); got != "11/12 healthy" {
		t.Errorf("PoolSummary = %q", got)
	}
	if got := PoolSummary(nil); got != "" {
		t.Errorf("PoolSummary(nil) = %q", got)
	}
	if got := DriverSummary([]v1alpha1.DriverStatus{{Ready: true}, {Ready: false}}, 3); got != "1/3 ready" {
		t.Errorf("DriverSummary = %q", got)
	}
	if got := SpecCondition(SpecReport{DriverProblems: []string{"a: bad", "b: worse"}}, 2); got.Status != metav1.ConditionFalse || got.Message != "a: bad; b: worse" {
		t.Errorf("SpecCondition = %+v", got)
	}
}

func TestUnreportedDrivers(t *testing.T) {
	spec := &v1alpha1.DRAStackSpec{Drivers: []v1alpha1.DriverSpec{{Name: "a"}, {Name: "b"}, {Name: "c"}}}
	status := []v1alpha1.DriverStatus{{Name: "a"}, {Name: "c", Removal: &v1alpha1.DriverRemovalStatus{Phase: "Draining"}}, {Name: "old"}}
	got := UnreportedDrivers(spec, status)
	// c is declared again while its removal is still reported: its new
	// install has not been judged.
	if strings.Join(got, ",") != "b,c" {
		t.Errorf("unreported %v, want [b c]", got)
	}
}
