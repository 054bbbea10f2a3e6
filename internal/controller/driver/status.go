package driver

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/controller/statusapply"
	"github.com/drastack/drastack/internal/driver"
	stackpkg "github.com/drastack/drastack/internal/stack"
)

// FieldManager owns status.drivers, status.summary.drivers and the
// DriversReady, Progressing and Degraded conditions.
const FieldManager = "drastack-driver"

// writeStatus applies this controller's part of the DRAStack status.
// Drivers that are gone (removed and cleaned up) are simply not applied
// any more, which drops their entries.
func (r *Reconciler) writeStatus(ctx context.Context, st *v1alpha1.DRAStack, as []driver.Assessment, declared int, now time.Time) error {
	drivers := make([]v1alpha1.DriverStatus, 0, len(as))
	var declaredStatus []v1alpha1.DriverStatus
	for _, a := range as {
		drivers = append(drivers, a.Status)
		if a.Declared {
			declaredStatus = append(declaredStatus, a.Status)
		}
	}
	conds := statusapply.KeepTransitionTimes(st.Status.Conditions, driver.StackConditions(as, st.Generation), metav1.NewTime(now))
	status := v1alpha1.DRAStackStatus{
		Conditions: conds,
		Drivers:    drivers,
		Summary:    &v1alpha1.StackSummary{Drivers: stackpkg.DriverSummary(declaredStatus, declared)},
	}
	err := statusapply.Apply(ctx, r.Client, v1alpha1.GroupVersion.String(), "DRAStack", "", st.Name, FieldManager, status)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
