package driver

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestCreated is the ownership rule: the stack's labels and the driver
// lifecycle's field manager, both; anything else is someone else's.
func TestCreated(t *testing.T) {
	ours := metav1.ManagedFieldsEntry{Manager: FieldManager, Operation: metav1.ManagedFieldsOperationApply}
	theirs := metav1.ManagedFieldsEntry{Manager: "kubectl-create", Operation: metav1.ManagedFieldsOperationUpdate}
	labels := map[string]string{LabelStack: "default", LabelDriver: "gpu.example.com"}
	tests := []struct {
		name    string
		labels  map[string]string
		fields  []metav1.ManagedFieldsEntry
		created bool
		owned   bool // by driver gpu.example.com
	}{
		{"applied by the driver lifecycle", labels, []metav1.ManagedFieldsEntry{ours}, true, true},
		{"applied, then edited by someone", labels, []metav1.ManagedFieldsEntry{ours, theirs}, true, true},
		{"someone's object that copies the labels", labels, []metav1.ManagedFieldsEntry{theirs}, false, false},
		{"someone's object the operator wrote a status for", labels, []metav1.ManagedFieldsEntry{theirs, {Manager: FieldManager, Subresource: "status"}}, false, false},
		{"someone's object without labels", nil, []metav1.ManagedFieldsEntry{theirs}, false, false},
		{"another stack's", map[string]string{LabelStack: "other", LabelDriver: "gpu.example.com"}, []metav1.ManagedFieldsEntry{ours}, false, false},
		{"another driver's of this stack", map[string]string{LabelStack: "default", LabelDriver: "nic.example.com"}, []metav1.ManagedFieldsEntry{ours}, true, false},
	}
	for _, tc := range tests {
		obj := &metav1.ObjectMeta{Name: "x", Labels: tc.labels, ManagedFields: tc.fields}
		if got := Created(obj, "default"); got != tc.created {
			t.Errorf("%s: Created = %v, want %v", tc.name, got, tc.created)
		}
		if got := OwnedBy(obj, "default", "gpu.example.com"); got != tc.owned {
			t.Errorf("%s: OwnedBy = %v, want %v", tc.name, got, tc.owned)
		}
	}
	msg := NotCreated(&metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{theirs, {Manager: "kubectl-label"}}}, "default", "gpu.example.com")
	if !strings.HasPrefix(msg, "exists but is owned by someone else (field managers kubectl-create, kubectl-label), not created by drastack for driver gpu.example.com") {
		t.Errorf("NotCreated = %q", msg)
	}
	msg = NotCreated(&metav1.ObjectMeta{Labels: map[string]string{LabelStack: "default", LabelDriver: "nic.example.com"}, ManagedFields: []metav1.ManagedFieldsEntry{ours}}, "default", "gpu.example.com")
	if !strings.Contains(msg, "owned by drastack for driver nic.example.com") {
		t.Errorf("NotCreated of another driver's = %q", msg)
	}
}
