//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	driverctrl "github.com/drastack/drastack/internal/controller/driver"
	"github.com/drastack/drastack/internal/driver"
	"github.com/drastack/drastack/internal/operator"
	"github.com/drastack/drastack/test/cluster"
)

// The drift suite checks that what the operator installs for a driver
// cannot drift: the node-restriction policy binding, deleted or weakened,
// is back within seconds with an Event naming it; and that a spec that
// cannot be deployed says where: SpecValid False with the field path.
const (
	dftDriver    = "drift.example.com"
	dftNodeLabel = "e2e.drastack.io/drift-node"
	dftProbeNS   = "drift-e2e"
	// dftRestoreWithin is how soon a deleted or changed object must be back.
	dftRestoreWithin = 5 * time.Second
)

var (
	dftNodes   = []string{"dft-node-a"}
	dftBinding = driver.ObjectName(dftDriver, "resourceslices-own-node")
)

func dftSpec(mutate ...func(*v1alpha1.DriverSpec)) []v1alpha1.DriverSpec {
	d := v1alpha1.DriverSpec{
		Name:          dftDriver,
		Profile:       v1alpha1.DriverProfileExample,
		NodeSelector:  map[string]string{dftNodeLabel: "true"},
		RemovalPolicy: v1alpha1.RemovalPolicyForce,
	}
	for _, m := range mutate {
		m(&d)
	}
	return []v1alpha1.DriverSpec{d}
}

// dftWaitBinding polls the policy binding until ok accepts it, for at most
// within, and returns how long that took.
func dftWaitBinding(ctx context.Context, t *testing.T, c *cluster.Cluster, within time.Duration, what string, ok func(*admissionregistrationv1.ValidatingAdmissionPolicyBinding) bool) time.Duration {
	t.Helper()
	begin := time.Now()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		b, err := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, dftBinding, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // retried
		}
		return ok(b), nil
	})
	if err != nil {
		t.Fatalf("ValidatingAdmissionPolicyBinding %s never showed %s within %s: %v", dftBinding, what, within, err)
	}
	return time.Since(begin)
}

// dftWaitRestoredEvent waits for the ObjectRestored Event on the DRAStack
// that names the binding and how it had drifted.
func dftWaitRestoredEvent(ctx context.Context, t *testing.T, c *cluster.Cluster, drift string) {
	t.Helper()
	want := "Restored ValidatingAdmissionPolicyBinding " + dftBinding + ": " + drift
	var notes []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := c.Client.EventsV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // retried
		}
		notes = notes[:0]
		for _, e := range list.Items {
			if e.Regarding.Kind != "DRAStack" || e.Reason != driverctrl.ReasonObjectRestored {
				continue
			}
			notes = append(notes, e.Type+" "+e.Note)
			if e.Type == "Warning" && strings.HasPrefix(e.Note, want) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no Warning Event %q on the DRAStack: %v; ObjectRestored Events: %q", want, err, notes)
	}
}

// dftWaitSpecInvalid waits for SpecValid False whose message names path.
func dftWaitSpecInvalid(ctx context.Context, t *testing.T, crc client.Client, path, mention string) *v1alpha1.DRAStack {
	t.Helper()
	st := drvWaitStack(ctx, t, crc, "SpecValid False naming "+path, func(st *v1alpha1.DRAStack) bool {
		status, _, msg := drvCondition(st, v1alpha1.ConditionSpecValid)
		return status == metav1.ConditionFalse && strings.Contains(msg, path+":") && strings.Contains(msg, mention)
	})
	_, reason, msg := drvCondition(st, v1alpha1.ConditionSpecValid)
	t.Logf("SpecValid False (%s): %s", reason, msg)
	if strings.Contains(msg, "\n") {
		t.Errorf("SpecValid message has several lines: %q", msg)
	}
	if ready, _, _ := drvCondition(st, v1alpha1.ConditionReady); ready == metav1.ConditionTrue {
		t.Errorf("Ready is True with an invalid spec:\n%s", drvDescribeStack(st))
	}
	return st
}

// TestDriverDrift runs the operator under its own RBAC on the real control
// plane.
func TestDriverDrift(t *testing.T) {
	var (
		crc  client.Client
		stop func()
	)
	feature := features.New("driver drift: owned objects are restored, bad specs name the field").
		Setup(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			var specs []cluster.NodeSpec
			for _, n := range dftNodes {
				specs = append(specs, cluster.NodeSpec{Name: n, Labels: map[string]string{dftNodeLabel: "true"}})
			}
			crc = prepareFeature(ctx, t, c, dftProbeNS, specs...)
			stop = startOperator(ctx, t, c, operator.Options{MetricsAddr: "0", ProbeAddr: "0", ProbeNamespace: dftProbeNS})
			return ctx
		}).
		Assess("a deleted policy binding is restored within 5 s with an Event; a weakened one too", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			drvSetDrivers(ctx, t, crc, dftSpec())
			drvWaitStack(ctx, t, crc, "the driver installed (plugin DaemonSet up)", func(st *v1alpha1.DRAStack) bool {
				d := drvStatus(st, dftDriver)
				return d != nil && d.NodesDesired == 1
			})
			dftWaitBinding(ctx, t, c, drvTimeout, "up", func(*admissionregistrationv1.ValidatingAdmissionPolicyBinding) bool { return true })

			if err := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, dftBinding, metav1.DeleteOptions{}); err != nil {
				t.Fatalf("delete the binding: %v", err)
			}
			took := dftWaitBinding(ctx, t, c, dftRestoreWithin, "restored after its deletion", func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) bool {
				return b.DeletionTimestamp == nil && slices.Contains(b.Spec.ValidationActions, admissionregistrationv1.Deny)
			})
			t.Logf("timing: binding deleted -> restored in %s", took.Round(time.Millisecond))
			dftWaitRestoredEvent(ctx, t, c, string(driver.DriftDeleted))

			// An administrator's edit that turns the policy into a warning
			// (an Update: kubectl edit) is taken back too.
			err := wait.PollUntilContextTimeout(ctx, pollInterval, drvTimeout, true, func(ctx context.Context) (bool, error) {
				b, err := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, dftBinding, metav1.GetOptions{})
				if err != nil {
					return false, nil //nolint:nilerr // retried
				}
				b.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn}
				_, err = c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Update(ctx, b, metav1.UpdateOptions{})
				return err == nil, nil
			})
			if err != nil {
				t.Fatalf("weaken the binding: %v", err)
			}
			took = dftWaitBinding(ctx, t, c, dftRestoreWithin, "Deny again after it was set to Warn", func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) bool {
				return slices.Equal(b.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny})
			})
			t.Logf("timing: binding weakened -> restored in %s", took.Round(time.Millisecond))
			dftWaitRestoredEvent(ctx, t, c, string(driver.DriftChanged))
			return ctx
		}).
		Assess("a patch that matches nothing gives SpecValid False with spec.drivers[0].patches[1]", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			drvSetDrivers(ctx, t, crc, dftSpec(func(d *v1alpha1.DriverSpec) {
				d.Patches = []v1alpha1.Patch{
					{Patch: `[{"op": "add", "path": "/metadata/annotations/e2e", "value": "ok"}]`, Target: &v1alpha1.PatchTarget{Kind: "ServiceAccount"}},
					{Patch: "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: no-such-daemonset\nspec:\n  minReadySeconds: 5\n"},
				}
			}))
			st := dftWaitSpecInvalid(ctx, t, crc, "spec.drivers[0].patches[1]", "no-such-daemonset")
			if d := drvStatus(st, dftDriver); d == nil || d.Reason != driver.ReasonInvalidSpec {
				t.Errorf("driver status %+v, want reason %s", d, driver.ReasonInvalidSpec)
			}
			return ctx
		}).
		Assess("an image that only looks valid gives SpecValid False with spec.drivers[0].image", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			drvSetDrivers(ctx, t, crc, dftSpec(func(d *v1alpha1.DriverSpec) { d.Image = "Registry.K8s.io/UPPER/Case::v1@sha" }))
			dftWaitSpecInvalid(ctx, t, crc, "spec.drivers[0].image", "not a container image reference")

			// Fixed, the spec is valid again.
			drvSetDrivers(ctx, t, crc, dftSpec())
			drvWaitStack(ctx, t, crc, "SpecValid True again", func(st *v1alpha1.DRAStack) bool {
				status, _, _ := drvCondition(st, v1alpha1.ConditionSpecValid)
				return status == metav1.ConditionTrue
			})
			return ctx
		}).
		Assess("a Force removal under an allocated claim warns with the claim", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			// A claim allocated on a device of the driver: the removal only
			// reads allocations.
			cl := createAllocatedClaim(ctx, t, c, dftProbeNS, "on-the-driver", dftDriver, dftNodes[0], "gpu-0")
			drvSetDrivers(ctx, t, crc, nil)
			want := dftProbeNS + "/on-the-driver"
			var notes []string
			err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, drvTimeout, true, func(ctx context.Context) (bool, error) {
				list, err := c.Client.EventsV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
				if err != nil {
					return false, nil //nolint:nilerr // retried
				}
				notes = notes[:0]
				for _, e := range list.Items {
					if e.Regarding.Kind == "DRAStack" && e.Reason == driverctrl.ReasonForceRemovalWithClaims {
						notes = append(notes, e.Type+" "+e.Note)
						if e.Type == "Warning" && strings.Contains(e.Note, want) && strings.Contains(e.Note, dftDriver) {
							return true, nil
						}
					}
				}
				return false, nil
			})
			if err != nil {
				t.Fatalf("no Warning %s naming %s: %v; seen: %q", driverctrl.ReasonForceRemovalWithClaims, want, err, notes)
			}
			t.Logf("Force removal warning: %s", notes[len(notes)-1])
			drvWaitStack(ctx, t, crc, "the driver removed", func(st *v1alpha1.DRAStack) bool { return drvStatus(st, dftDriver) == nil })
			_ = c.Client.ResourceV1().ResourceClaims(dftProbeNS).Delete(ctx, cl.Name, metav1.DeleteOptions{})
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			if crc != nil {
				var st v1alpha1.DRAStack
				if err := crc.Get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, &st); err == nil {
					_ = crc.Delete(ctx, &st)
					_ = wait.PollUntilContextTimeout(ctx, pollInterval, drvTimeout, true, func(ctx context.Context) (bool, error) {
						err := crc.Get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, &v1alpha1.DRAStack{})
						return apierrors.IsNotFound(err), nil
					})
				}
			}
			if stop != nil {
				stop()
			}
			_ = c.Client.CoreV1().Namespaces().Delete(ctx, dftProbeNS, metav1.DeleteOptions{})
			for _, n := range dftNodes {
				if err := c.DeleteNode(ctx, n); err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("%v", err)
				}
			}
			return ctx
		}).
		Feature()
	testenv.Test(t, feature)
}
