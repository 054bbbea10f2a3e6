package pool

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// A pool whose slices all disappear keeps its DevicePool, reported as an
// empty incomplete pool, until the grace period ends; then it goes. Slices
// that come back within the grace period (a driver restart) make it
// Healthy again without a new DevicePool.
func TestGonePoolLifecycle(t *testing.T) {
	cfg := defaultConfig()
	s := gpuSlice("n1", "node-1", "node-1", 3, 1, "gpu-0")
	r := world{slices: nil, nodes: []string{"node-1"}}.reconciler()
	r.model.upsertSlice(nil, s)

	v, ok := r.validate(pid("node-1"), nil, t0, cfg)
	if !ok || v.status.Health != v1alpha1.PoolHealthy {
		t.Fatalf("start: %v %+v", ok, v.status)
	}
	stored := roundTrip(t, v.status)

	r.model.deleteSlice(s)
	gone, ok := r.validate(pid("node-1"), &stored, t0.Add(10*time.Second), cfg)
	switch {
	case !ok || gone.expired:
		t.Fatalf("gone within the grace period: exists %v, expired %v", ok, gone.expired)
	case gone.status.Health != v1alpha1.PoolIncomplete:
		t.Errorf("health = %s, want Incomplete", gone.status.Health)
	case gone.status.Slices != (v1alpha1.SliceCounts{Current: 0, Expected: 1}) || gone.status.Generation != 3 || gone.status.Devices.Total != 0:
		t.Errorf("gone status = %+v", gone.status)
	case condStatus(&gone.status, ConditionComplete) != "False/NoSlices":
		t.Errorf("Complete = %s", condStatus(&gone.status, ConditionComplete))
	case gone.requeue != cfg.grace:
		t.Errorf("requeue = %v, want the grace period %v", gone.requeue, cfg.grace)
	}
	storedGone := roundTrip(t, gone.status)

	if back := r.model.upsertSlice(nil, s); len(back) != 1 {
		t.Fatalf("touched %v", back)
	}
	again, _ := r.validate(pid("node-1"), &storedGone, t0.Add(20*time.Second), cfg)
	if again.status.Health != v1alpha1.PoolHealthy || again.status.IncompleteSince != nil {
		t.Errorf("slices back: %s, incompleteSince %v", again.status.Health, again.status.IncompleteSince)
	}

	r.model.deleteSlice(s)
	first, _ := r.validate(pid("node-1"), &stored, t0.Add(time.Minute), cfg)
	if first.expired {
		t.Fatalf("a new absence starts a new grace period")
	}
	late, ok := r.validate(pid("node-1"), &stored, t0.Add(time.Minute+cfg.grace), cfg)
	if !ok || !late.expired {
		t.Errorf("after the grace period: exists %v, expired %v; want the DevicePool deleted", ok, late.expired)
	}
}

// After a restart of the operator the grace period is counted from the
// time stored in the DevicePool, not from the restart.
func TestGonePoolGraceSurvivesRestart(t *testing.T) {
	cfg := defaultConfig()
	stored := v1alpha1.DevicePoolStatus{Driver: testDriver, Pool: "node-1", Generation: 1,
		Slices: v1alpha1.SliceCounts{Expected: 1}, Health: v1alpha1.PoolIncomplete}
	since := metav1.NewTime(t0.Add(-cfg.grace))
	stored.IncompleteSince = &since
	r := newTestReconciler()
	v, ok := r.validate(pid("node-1"), &stored, t0, cfg)
	if !ok || !v.expired {
		t.Errorf("exists %v, expired %v; want expired", ok, v.expired)
	}
}

func TestNothingToReport(t *testing.T) {
	r := newTestReconciler()
	if _, ok := r.validate(pid("never"), nil, t0, defaultConfig()); ok {
		t.Errorf("a pool without slices or DevicePool exists")
	}
}
