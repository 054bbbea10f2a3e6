package driver

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// StackConditions derives DriversReady, Progressing and Degraded from the
// assessments of all drivers, declared and being removed. Their reasons
// are the leading driver's reason, their messages name the drivers.
func StackConditions(as []Assessment, generation int64) []metav1.Condition {
	ready := metav1.Condition{Type: v1alpha1.ConditionDriversReady, Status: metav1.ConditionTrue, ObservedGeneration: generation}
	progressing := metav1.Condition{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionFalse, Reason: ReasonStable, ObservedGeneration: generation}
	degraded := metav1.Condition{Type: v1alpha1.ConditionDegraded, Status: metav1.ConditionFalse, Reason: ReasonAsExpected, ObservedGeneration: generation}

	var declared, readyCount int
	var notReady, moving, broken []string
	for _, a := range as {
		line := a.Status.Name + ": " + a.Status.Message
		if a.Declared {
			declared++
			if a.Status.Ready {
				readyCount++
			} else {
				if len(notReady) == 0 {
					ready.Reason = a.Status.Reason
				}
				notReady = append(notReady, line)
			}
		}
		if a.Progressing {
			if len(moving) == 0 {
				progressing.Reason = a.Status.Reason
			}
			moving = append(moving, line)
		}
		if a.Degraded {
			if len(broken) == 0 {
				degraded.Reason = a.Status.Reason
			}
			broken = append(broken, line)
		}
	}
	switch {
	case declared == 0:
		ready.Reason, ready.Message = ReasonNoDrivers, "no drivers are declared"
	case len(notReady) == 0:
		ready.Reason, ready.Message = ReasonAllDriversReady, fmt.Sprintf("%d/%d drivers ready", readyCount, declared)
	default:
		ready.Status = metav1.ConditionFalse
		ready.Message = fmt.Sprintf("%d/%d drivers ready; %s", readyCount, declared, strings.Join(notReady, "; "))
	}
	if len(moving) > 0 {
		progressing.Status, progressing.Message = metav1.ConditionTrue, strings.Join(moving, "; ")
	} else {
		progressing.Message = "no driver is installing, rolling out or being removed"
	}
	if len(broken) > 0 {
		degraded.Status, degraded.Message = metav1.ConditionTrue, strings.Join(broken, "; ")
	} else {
		degraded.Message = "every driver works as deployed"
	}
	for _, c := range []*metav1.Condition{&ready, &progressing, &degraded} {
		c.Message = truncate(c.Message, 4096)
	}
	return []metav1.Condition{ready, progressing, degraded}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
