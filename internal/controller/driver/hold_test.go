package driver

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/controller/specgate"
)

// TestReconcileHoldsAnInvalidSpec: with a spec the whole-spec check
// refuses (the operator's own namespace), a reconcile writes nothing but
// its status, which says so at the spec's generation; the drivers'
// entries and the other conditions stay as they were.
func TestReconcileHoldsAnInvalidSpec(t *testing.T) {
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	ready := metav1.Condition{Type: v1alpha1.ConditionDriversReady, Status: metav1.ConditionTrue, Reason: "AllDriversReady", Message: "1/1", ObservedGeneration: 3}
	st := &v1alpha1.DRAStack{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DRAStackName, Generation: 4, Finalizers: []string{Finalizer}},
		Spec: v1alpha1.DRAStackSpec{Namespace: "drastack-system",
			Drivers: []v1alpha1.DriverSpec{{Name: "gpu.example.com", Profile: v1alpha1.DriverProfileExample}}},
		Status: v1alpha1.DRAStackStatus{Conditions: []metav1.Condition{ready},
			Drivers: []v1alpha1.DriverStatus{{Name: "gpu.example.com", Ready: true, Reason: "Ready"}}},
	}
	var writes []string
	var status map[string]any
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(st).WithStatusSubresource(st).
		WithIndex(&corev1.Namespace{}, "metadata.name", func(o client.Object) []string { return []string{o.GetName()} }).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
			writes = append(writes, "create "+obj.GetName())
			return nil
		},
		Update: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.UpdateOption) error {
			writes = append(writes, "update "+obj.GetName())
			return nil
		},
		Patch: func(_ context.Context, _ client.WithWatch, obj client.Object, _ client.Patch, _ ...client.PatchOption) error {
			writes = append(writes, "patch "+obj.GetName())
			return nil
		},
		Delete: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.DeleteOption) error {
			writes = append(writes, "delete "+obj.GetName())
			return nil
		},
		Apply: func(_ context.Context, _ client.WithWatch, obj runtime.ApplyConfiguration, _ ...client.ApplyOption) error {
			writes = append(writes, "apply")
			return nil
		},
		SubResourceApply: func(_ context.Context, _ client.Client, sub string, obj runtime.ApplyConfiguration, _ ...client.SubResourceApplyOption) error {
			data, _ := json.Marshal(obj)
			var u map[string]any
			_ = json.Unmarshal(data, &u)
			status, _ = u["status"].(map[string]any)
			return nil
		},
	}).Build()
	r := &Reconciler{Client: c, APIReader: c, Gate: &specgate.Gate{Cache: c, API: c, OperatorNamespace: "drastack-system"}}
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Name: v1alpha1.DRAStackName}})
	if err != nil {
		t.Fatal(err)
	}
	if len(writes) > 0 {
		t.Errorf("an invalid spec wrote %v", writes)
	}
	if res.RequeueAfter != holdRecheck {
		t.Errorf("requeue after %s, want %s (the namespace is not watched)", res.RequeueAfter, holdRecheck)
	}
	data, _ := json.Marshal(status)
	var got v1alpha1.DRAStackStatus
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	var progressing, drivers *metav1.Condition
	for i := range got.Conditions {
		switch got.Conditions[i].Type {
		case v1alpha1.ConditionProgressing:
			progressing = &got.Conditions[i]
		case v1alpha1.ConditionDriversReady:
			drivers = &got.Conditions[i]
		}
	}
	if progressing == nil || progressing.Reason != ReasonSpecInvalid || progressing.ObservedGeneration != 4 ||
		!strings.Contains(progressing.Message, `spec.namespace: Invalid value: "drastack-system": is the operator's own namespace`) {
		t.Errorf("Progressing = %+v", progressing)
	}
	if drivers == nil || drivers.ObservedGeneration != 3 || drivers.Status != metav1.ConditionTrue {
		t.Errorf("DriversReady must stay as judged: %+v", drivers)
	}
	if len(got.Drivers) != 1 || !got.Drivers[0].Ready {
		t.Errorf("status.drivers must stay: %+v", got.Drivers)
	}
}
