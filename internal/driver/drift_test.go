package driver

import (
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

func TestDriftOf(t *testing.T) {
	tests := []struct {
		name string
		a    Applied
		want Drift
	}{
		{"first apply since the operator started", Applied{Existed: false, Hash: "h"}, DriftNone},
		{"applied before, gone now", Applied{Before: true, PrevHash: "h", Hash: "h"}, DriftDeleted},
		{"gone after a spec change too", Applied{Before: true, PrevHash: "g", Hash: "h"}, DriftDeleted},
		{"unchanged binding", Applied{Before: true, PrevHash: "h", Hash: "h", Existed: true, Generation: 3, AfterGeneration: 3, ResourceVersion: "1", AfterResourceVersion: "2"}, DriftNone},
		{"binding edited by someone", Applied{Before: true, PrevHash: "h", Hash: "h", Existed: true, Generation: 4, AfterGeneration: 5}, DriftChanged},
		{"render changed (an upgrade)", Applied{Before: true, PrevHash: "g", Hash: "h", Existed: true, Generation: 4, AfterGeneration: 5}, DriftNone},
		{"ClusterRole edited (no generation)", Applied{Before: true, PrevHash: "h", Hash: "h", Existed: true, ResourceVersion: "7", AfterResourceVersion: "9"}, DriftChanged},
		{"deleted between the listing and the apply", Applied{Before: true, PrevHash: "h", Hash: "h", Existed: true, UID: "a", AfterUID: "b", Generation: 1, AfterGeneration: 1}, DriftDeleted},
		{"ClusterRole as applied", Applied{Before: true, PrevHash: "h", Hash: "h", Existed: true, ResourceVersion: "7", AfterResourceVersion: "7"}, DriftNone},
	}
	for _, tc := range tests {
		if got := DriftOf(tc.a); got != tc.want {
			t.Errorf("%s: DriftOf = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestDescribeConflict(t *testing.T) {
	causes := []metav1.StatusCause{
		{Type: metav1.CauseTypeFieldManagerConflict, Message: `conflict with "kubectl-client-side-apply" using resource.k8s.io/v1`, Field: ".spec.selectors"},
		{Type: metav1.CauseTypeFieldManagerConflict, Message: `conflict with "kubectl-client-side-apply" using resource.k8s.io/v1`, Field: ".metadata.labels.x"},
		{Type: metav1.CauseTypeFieldValueInvalid, Message: "other", Field: ".spec"},
	}
	got := DescribeConflict(causes)
	for _, want := range []string{"exists but is owned by someone else (field manager kubectl-client-side-apply)", "conflicting fields .spec.selectors, .metadata.labels.x", "delete it"} {
		if !strings.Contains(got, want) {
			t.Errorf("DescribeConflict = %q, want it to contain %q", got, want)
		}
	}
	if strings.Contains(got, "not present") {
		t.Errorf("DescribeConflict = %q says the object is missing", got)
	}
	if got := DescribeConflict(nil); !strings.HasPrefix(got, "exists but is owned by someone else;") {
		t.Errorf("without causes: %q", got)
	}
}

func TestForceWarning(t *testing.T) {
	claims := []string{"ns/a", "ns/b"}
	deleting := RemovalStep{Phase: PhaseDeleting, Actions: []RemovalAction{ActionDeleteWorkloads}}
	tests := []struct {
		name  string
		s     RemovalState
		step  RemovalStep
		wants string
	}{
		{"Force with claims, deleting the plugins", RemovalState{Policy: v1alpha1.RemovalPolicyForce, BlockingClaims: claims}, deleting, "2 claims are still allocated on its devices: ns/a, ns/b"},
		{"Force without claims", RemovalState{Policy: v1alpha1.RemovalPolicyForce}, deleting, ""},
		{"Drain never deletes under claims", RemovalState{Policy: v1alpha1.RemovalPolicyDrain, BlockingClaims: claims}, deleting, ""},
		{"Force, still tainting", RemovalState{Policy: v1alpha1.RemovalPolicyForce, BlockingClaims: claims}, RemovalStep{Phase: PhaseTainting, Actions: []RemovalAction{ActionTaint}}, ""},
	}
	for _, tc := range tests {
		got := ForceWarning("gpu.example.com", tc.s, tc.step)
		if (tc.wants == "") != (got == "") || !strings.Contains(got, tc.wants) {
			t.Errorf("%s: ForceWarning = %q, want %q", tc.name, got, tc.wants)
		}
	}
}

func TestForeignManagers(t *testing.T) {
	apply, update := metav1.ManagedFieldsOperationApply, metav1.ManagedFieldsOperationUpdate
	tests := []struct {
		name    string
		entries []metav1.ManagedFieldsEntry
		want    []string
	}{
		{"only the operator's apply", []metav1.ManagedFieldsEntry{{Manager: FieldManager, Operation: apply}}, nil},
		{"a kubectl edit", []metav1.ManagedFieldsEntry{{Manager: FieldManager, Operation: apply}, {Manager: "kubectl-edit", Operation: update}}, []string{"kubectl-edit"}},
		{"the operator's own update (a replacement) does not count", []metav1.ManagedFieldsEntry{{Manager: FieldManager, Operation: update}}, nil},
		{"status writers do not", []metav1.ManagedFieldsEntry{{Manager: "kube-apiserver", Operation: update, Subresource: "status"}}, nil},
		{"each manager once", []metav1.ManagedFieldsEntry{{Manager: "a", Operation: apply}, {Manager: "a", Operation: update}}, []string{"a"}},
	}
	for _, tc := range tests {
		if got := ForeignManagers(tc.entries, FieldManager); !slices.Equal(got, tc.want) {
			t.Errorf("%s: ForeignManagers = %q, want %q", tc.name, got, tc.want)
		}
	}
	if !ReplacedOnDrift(schema.GroupKind{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicyBinding"}) ||
		ReplacedOnDrift(schema.GroupKind{Group: "apps", Kind: "DaemonSet"}) {
		t.Error("ReplacedOnDrift: the binding is replaced on drift, a DaemonSet (which controllers annotate) is not")
	}
}

// TestAssessApplyProblems: a DeviceClass someone else owns is an
// ApplyConflict that says so, not "not present yet"; an object the API
// server refuses is InvalidSpec with the entry's path, first.
func TestAssessApplyProblems(t *testing.T) {
	r, err := Render(input(nil))
	if err != nil {
		t.Fatal(err)
	}
	class := r.DeviceClasses[0]
	conflict := ApplyProblem{Object: "DeviceClass " + class, Conflict: true, Message: DescribeConflict([]metav1.StatusCause{
		{Type: metav1.CauseTypeFieldManagerConflict, Message: `conflict with "kubectl-client-side-apply" using resource.k8s.io/v1`, Field: ".spec.selectors"}})}
	a := Assess("gpu.example.com", Observed{Rendered: r, ApplyProblems: []ApplyProblem{conflict}}, Settings{})
	if a.Status.Reason != ReasonApplyConflict || !strings.Contains(a.Status.Message, "owned by someone else (field manager kubectl-client-side-apply)") ||
		strings.Contains(a.Status.Message, "not present yet") {
		t.Errorf("conflict: %s: %s", a.Status.Reason, a.Status.Message)
	}

	invalid := ApplyProblem{Object: "DaemonSet x/y", Invalid: true, Message: "spec.drivers[0]: Invalid value: DaemonSet x/y: spec.minReadySeconds: must be non-negative"}
	a = Assess("gpu.example.com", Observed{Rendered: r, ApplyProblems: []ApplyProblem{conflict, invalid}}, Settings{})
	if a.Status.Reason != ReasonInvalidSpec || !strings.HasPrefix(a.Status.Message, "spec.drivers[0]: ") || !a.Degraded {
		t.Errorf("invalid: %s: %s", a.Status.Reason, a.Status.Message)
	}
}

func TestForcedOnDrift(t *testing.T) {
	for _, tc := range []struct {
		gk   schema.GroupKind
		want bool
	}{
		{schema.GroupKind{Group: "apps", Kind: "DaemonSet"}, false},
		{schema.GroupKind{Group: "apps", Kind: "Deployment"}, false},
		{schema.GroupKind{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicyBinding"}, true},
		{schema.GroupKind{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}, true},
		{schema.GroupKind{Group: "resource.k8s.io", Kind: "DeviceClass"}, true},
		{schema.GroupKind{Kind: "ServiceAccount"}, true},
	} {
		if got := ForcedOnDrift(tc.gk); got != tc.want {
			t.Errorf("ForcedOnDrift(%v) = %v, want %v", tc.gk, got, tc.want)
		}
	}
}
