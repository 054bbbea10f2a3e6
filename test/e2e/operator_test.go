//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/operator"
	"github.com/drastack/drastack/test/cluster"
	"github.com/drastack/drastack/test/operatorrun"
)

// operatorDeployDir is the kustomize folder `make deploy` installs; the
// operator under test gets the identity and RBAC it renders.
const operatorDeployDir = "../../config/default"

// runOperator runs the operator as startOperator does, with default
// options. probeNS is an existing namespace for the cluster probe's dry-run
// claims.
func runOperator(ctx context.Context, t *testing.T, c *cluster.Cluster, probeNS string) func() {
	t.Helper()
	return startOperator(ctx, t, c, operator.Options{MetricsAddr: "0", ProbeAddr: "0", ProbeNamespace: probeNS})
}

// startOperator runs the operator in-process, exactly as cmd/manager wires
// it, and as deployed: with the ServiceAccount and RBAC that config/default
// installs, through a token from the TokenRequest API, never as an
// administrator (DeployOperatorIdentity checks that with a
// SelfSubjectReview). Every request the API server refuses it is counted,
// and the returned stop func fails the test if there was one: the RBAC the
// operator ships with must be enough for everything it does. stop is safe
// to call twice.
func startOperator(ctx context.Context, t *testing.T, c *cluster.Cluster, o operator.Options) func() {
	t.Helper()
	id, err := c.DeployOperatorIdentity(ctx, operatorDeployDir)
	if err != nil {
		t.Fatal(err)
	}
	// Suites run one after another in this process, each with a manager.
	o.SkipNameValidation = true
	stop, err := operatorrun.Start(ctx, id, o)
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}
}

// writeStackSpec changes the DRAStack spec with change, creating the
// DRAStack when there is none, and retries until the write succeeds or
// timeout passes. It reports whether it created the DRAStack, and the spec
// it replaced (zero when it created it), so a suite can restore it.
func writeStackSpec(ctx context.Context, t *testing.T, crc client.Client, timeout time.Duration, change func(*v1alpha1.DRAStackSpec)) (bool, v1alpha1.DRAStackSpec) {
	t.Helper()
	var created bool
	var prev v1alpha1.DRAStackSpec
	err := wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		var st v1alpha1.DRAStack
		err := crc.Get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, &st)
		if apierrors.IsNotFound(err) {
			st = v1alpha1.DRAStack{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DRAStackName}}
			change(&st.Spec)
			if err := crc.Create(ctx, &st); err != nil {
				t.Logf("create DRAStack: %v", err)
				return false, nil
			}
			created = true
			return true, nil
		}
		if err != nil {
			return false, nil //nolint:nilerr // retried
		}
		prev = *st.Spec.DeepCopy()
		change(&st.Spec)
		if err := crc.Update(ctx, &st); err != nil {
			t.Logf("update DRAStack: %v", err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("write DRAStack spec: %v", err)
	}
	return created, prev
}
