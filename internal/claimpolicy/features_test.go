package claimpolicy

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/allocator"
)

func TestEngineFeatures(t *testing.T) {
	if EngineFeatures(nil) != nil || EngineFeatures(&v1alpha1.ClusterStatus{}) != nil {
		t.Error("an unprobed cluster must leave the engine's defaults")
	}
	now := metav1.Now()
	k137 := &v1alpha1.ClusterStatus{LastProbeTime: &now, Features: v1alpha1.ClusterFeatures{
		AdminAccess: true, ConsumableCapacity: true, BindingConditions: true, DeviceTaints: true, DeviceTaintRules: true,
		PartitionableDevices: true, PrioritizedList: true,
	}}
	if got, want := *EngineFeatures(k137), allocator.Kubernetes137Features(); got != want {
		t.Errorf("a cluster with 1.37's defaults gives %+v, want %+v", got, want)
	}
	all := k137.DeepCopy()
	all.Features.ListTypeAttributes, all.Features.CompatibilityGroups, all.Features.DerivedAttributes, all.Features.OptionalNodeOperations = true, true, true, true
	got := *EngineFeatures(all)
	want := allocator.AllFeatures()
	want.FractionalCapacityRange = false
	if got != want {
		t.Errorf("every probed feature on gives %+v, want %+v", got, want)
	}
	off := k137.DeepCopy()
	off.Features.DeviceTaintRules = false
	if EngineFeatures(off).DeviceTaintRules {
		t.Error("a cluster without DeviceTaintRule must not apply rules")
	}
}
