package driver

import (
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/driver"
)

// TestOnlyManagedByUs: a namespace is deleted only when nobody but the
// driver lifecycle manages it; the namespace controller's status writes do
// not count.
func TestOnlyManagedByUs(t *testing.T) {
	ours := metav1.ManagedFieldsEntry{Manager: driver.FieldManager, Operation: metav1.ManagedFieldsOperationApply}
	tests := []struct {
		name    string
		entries []metav1.ManagedFieldsEntry
		want    bool
	}{
		{"created by the driver lifecycle", []metav1.ManagedFieldsEntry{ours}, true},
		{"plus the namespace controller's status", []metav1.ManagedFieldsEntry{ours, {Manager: "kube-controller-manager", Subresource: "status"}}, true},
		{"created by kubectl, labelled by us", []metav1.ManagedFieldsEntry{{Manager: "kubectl-create"}, ours}, false},
		{"labelled by someone else afterwards", []metav1.ManagedFieldsEntry{ours, {Manager: "kubectl-label"}}, false},
		{"no managed fields at all: unknown, keep it", nil, false},
	}
	for _, tc := range tests {
		if got := onlyManagedByUs(tc.entries); got != tc.want {
			t.Errorf("%s: onlyManagedByUs = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRequeueAfter(t *testing.T) {
	ready := driver.Assessment{Declared: true, Status: v1alpha1.DriverStatus{Ready: true}}
	busy := driver.Assessment{Declared: true, Progressing: true}
	soon := driver.Assessment{Declared: true, Progressing: true, RecheckAfter: 4 * time.Second}
	tests := []struct {
		name     string
		in       []driver.Assessment
		removing bool
		want     time.Duration
	}{
		{"all ready: a slow safety net", []driver.Assessment{ready}, false, idlePoll},
		{"something moving", []driver.Assessment{ready, busy}, false, busyPoll},
		{"a judgement due soon, looked at just after", []driver.Assessment{ready, soon}, false, 5 * time.Second},
		{"a removal waits for pods and claims", []driver.Assessment{ready}, true, removalPoll},
	}
	for _, tc := range tests {
		if got := requeueAfter(tc.in, tc.removing); got != tc.want {
			t.Errorf("%s: requeueAfter = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestStackUsesDriver(t *testing.T) {
	st := &v1alpha1.DRAStack{
		Spec: v1alpha1.DRAStackSpec{Drivers: []v1alpha1.DriverSpec{{Name: driver.NVIDIAGPUDriver, Profile: v1alpha1.DriverProfileNVIDIAGPU}}},
		Status: v1alpha1.DRAStackStatus{Drivers: []v1alpha1.DriverStatus{
			{Name: "old.example.com", Removal: &v1alpha1.DriverRemovalStatus{Phase: driver.PhaseCleaning}},
			{Name: "stale.example.com"},
		}},
	}
	for name, want := range map[string]bool{
		driver.NVIDIAGPUDriver:           true,
		driver.NVIDIAComputeDomainDriver: true, // published by the same plugin pod
		"old.example.com":                true, // its leftover slices are being cleaned
		"stale.example.com":              false,
		"gpu.sim.drastack.io":            false,
	} {
		if got := stackUsesDriver(st, name); got != want {
			t.Errorf("stackUsesDriver(%s) = %v, want %v", name, got, want)
		}
	}
}

func TestNewestRevision(t *testing.T) {
	ds := types.UID("ds-1")
	rev := func(name string, n int64, owner types.UID) appsv1.ControllerRevision {
		return appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: []metav1.OwnerReference{{UID: owner}}}, Revision: n}
	}
	revs := []appsv1.ControllerRevision{rev("a", 1, ds), rev("c", 3, ds), rev("b", 2, ds), rev("other", 9, "ds-2")}
	if got := newestRevision(revs, ds); got == nil || got.Name != "c" {
		t.Errorf("newestRevision = %v, want c (highest revision of this DaemonSet)", got)
	}
	if got := newestRevision(revs, "ds-3"); got != nil {
		t.Errorf("newestRevision of a DaemonSet without revisions = %v", got.Name)
	}
}

func TestDriverNamesOf(t *testing.T) {
	annotated := &installed{taintRules: []object{{PartialObjectMetadata: metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Annotations: map[string]string{driver.AnnotationDriverNames: "gpu.nvidia.com,compute-domain.nvidia.com"}}}}}}
	if got := driverNamesOf("gpu.nvidia.com", annotated, nil); !slices.Equal(got, []string{"gpu.nvidia.com", "compute-domain.nvidia.com"}) {
		t.Errorf("names from the objects' annotation: %v", got)
	}
	if got := driverNamesOf("x.example.com", &installed{}, []string{"x.example.com", "y.example.com"}); len(got) != 2 {
		t.Errorf("names from the spec: %v", got)
	}
	if got := driverNamesOf("x.example.com", nil, nil); !slices.Equal(got, []string{"x.example.com"}) {
		t.Errorf("names with nothing known: %v", got)
	}
}

func TestInstalledCounts(t *testing.T) {
	obj := func(group, kind string) object {
		return object{gvk: schema.GroupVersionKind{Group: group, Version: "v1", Kind: kind}}
	}
	in := &installed{objects: []object{obj("apps", "DaemonSet"), obj("apps", "Deployment"), obj("", "ServiceAccount"), obj("resource.k8s.io", "DeviceClass")}}
	if n := in.count(isWorkload); n != 2 {
		t.Errorf("%d workloads, want 2", n)
	}
	if n := in.count(func(gk schema.GroupKind) bool { return !isWorkload(gk) }); n != 2 {
		t.Errorf("%d other objects, want 2", n)
	}
	var none *installed
	if none.count(isWorkload) != 0 || none.annotation("x") != "" {
		t.Error("a driver with nothing installed has no objects and no annotations")
	}
}

// TestStackChanged: the controller's own status writes must not wake it,
// or a status that mentions anything variable would loop.
func TestStackChanged(t *testing.T) {
	base := &v1alpha1.DRAStack{ObjectMeta: metav1.ObjectMeta{Name: "default", Generation: 2}}
	mut := func(f func(*v1alpha1.DRAStack)) *v1alpha1.DRAStack {
		st := base.DeepCopy()
		f(st)
		return st
	}
	now := metav1.Now()
	tests := []struct {
		name string
		new  *v1alpha1.DRAStack
		want bool
	}{
		{"status.drivers written", mut(func(st *v1alpha1.DRAStack) { st.Status.Drivers = []v1alpha1.DriverStatus{{Name: "x"}} }), false},
		{"another controller's condition", mut(func(st *v1alpha1.DRAStack) { st.Status.Conditions = []metav1.Condition{{Type: "PoolsHealthy"}} }), false},
		{"spec changed", mut(func(st *v1alpha1.DRAStack) { st.Generation = 3 }), true},
		{"deleted", mut(func(st *v1alpha1.DRAStack) { st.DeletionTimestamp = &now }), true},
		{"finalizer removed by someone", mut(func(st *v1alpha1.DRAStack) { st.Finalizers = []string{"x"} }), true},
		{"cluster probed", mut(func(st *v1alpha1.DRAStack) {
			st.Status.Cluster = &v1alpha1.ClusterStatus{ResourceAPIVersions: []string{"v1"}}
		}), true},
	}
	p := stackChanged()
	for _, tc := range tests {
		if got := p.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("%s: reconcile = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestTaintRuleSet: a removal is tainted when exactly the rules of its
// targets exist; a rule no target names (the whole driver, from before the
// publisher published under its name) is stale and goes.
func TestTaintRuleSet(t *testing.T) {
	rule := func(tt driver.TaintTarget) object {
		o := object{gvk: schema.GroupVersionKind{Group: "resource.k8s.io", Version: "v1", Kind: "DeviceTaintRule"}}
		o.SetName(driver.TaintRuleName(tt))
		return o
	}
	whole := driver.TaintTarget{Driver: "gpu.example.com"}
	poolA := driver.TaintTarget{Driver: "gpu.example.com", Pool: "node-a"}
	in := &installed{taintRules: []object{rule(whole), rule(poolA)}}
	if in.hasTaintRules([]driver.TaintTarget{poolA}) {
		t.Error("the whole-driver rule left over counts as tainted")
	}
	if stale := in.staleRules([]driver.TaintTarget{poolA}); len(stale) != 1 || stale[0].GetName() != driver.TaintRuleName(whole) {
		t.Errorf("stale rules %v", stale)
	}
	if !in.hasTaintRules([]driver.TaintTarget{whole, poolA}) || in.hasTaintRules([]driver.TaintTarget{whole, poolA, {Driver: "gpu.example.com", Pool: "node-b"}}) {
		t.Error("tainted must mean: every target's rule, and no other")
	}
	var none *installed
	if !none.hasTaintRules(nil) || none.hasTaintRules([]driver.TaintTarget{whole}) {
		t.Error("nothing installed: tainted only when nothing is to be tainted")
	}
}
