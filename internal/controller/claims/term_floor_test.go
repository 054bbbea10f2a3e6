package claims

import (
	"context"
	"errors"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/drastack/drastack/internal/ledger"
)

// A term decides nothing while its cache shows the DRAStack, or a central
// DeviceTaintRule, as of before the term began (the fake client's
// versions count per object, so the floor is set by hand).
func TestDecisionsWaitForCachesPastTheTerm(t *testing.T) {
	e := newEnv(t, interceptor.Funcs{}, placementCluster(celClaim("c", "b"), gatedPod("p", "2", "c"))...)
	e.tainted()
	version := func() ledger.Version { return ledger.ParseVersion(e.stack().ResourceVersion) }
	e.r.source.floor.set(version())
	if _, err := e.r.source.Read(context.Background()); !errors.Is(err, errCachesBehind) {
		t.Fatalf("Read with the DRAStack at the term's floor: %v, want errCachesBehind", err)
	}
	res, err := (&placementReconciler{r: e.r}).Reconcile(context.Background(), reqOf(tns, "p"))
	if !errors.Is(err, errCachesBehind) || e.claim("c").Status.Allocation != nil {
		t.Fatalf("placement behind the floor: %+v %v, allocation %v", res, err, e.claim("c").Status.Allocation)
	}
	e.r.source.floor.set(version() - 1)
	// The operator's rules were written once by the taint loop (version
	// 1 in the fake client): still behind.
	if _, err := e.r.source.Read(context.Background()); !errors.Is(err, errCachesBehind) {
		t.Fatalf("Read with a central rule at the floor: %v, want errCachesBehind", err)
	}
	e.r.source.floor.set(0)
	if _, err := (&placementReconciler{r: e.r}).Reconcile(context.Background(), reqOf(tns, "p")); err != nil || e.claim("c").Status.Allocation == nil {
		t.Fatalf("without a floor the pod is placed: %v, allocation %v", err, e.claim("c").Status.Allocation)
	}
}
