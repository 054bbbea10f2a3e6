package claims

import (
	"context"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/drastack/drastack/internal/central"
	"github.com/drastack/drastack/internal/ledger"
)

// A new term fences what an earlier term could still write: the
// unallocated operator claims and the operator's rules read before the
// term began get the fence annotation; allocated claims and claims of
// kube-scheduler are left alone, and the ledger learns every allocation
// from the consistent read, whatever the cache shows. Only then does the
// ledger take decisions.
func TestBeginTermSweeps(t *testing.T) {
	ctx := context.Background()
	kubes := gpuClaim("theirs")
	kubes.Spec.Devices.Requests[0].Exactly.DeviceClassName = "other"
	e := newEnv(t, interceptor.Funcs{}, stack("n1"), gpuClass(), node("n1", "4"), nodeSlice("n1", "a"),
		celClaim("open", "a"), immediateClaim("imm"), allocatedBy(celClaim("done", "a"), "n1", FieldManager), kubes,
		rule(central.RuleName(tdrv, "n1"), "n1", true))
	e.r.ledger.SetReady(false)
	e.r.fence.(*openFence).acquired = ledger.ParseVersion("1000000")
	if err := e.r.beginTerm(ctx); err != nil {
		t.Fatal(err)
	}
	if !e.r.ledger.Ready() {
		t.Fatal("the ledger is not ready after the term began")
	}
	for name, want := range map[string]bool{"open": true, "imm": true, "done": false, "theirs": false} {
		if got := e.claim(name).Annotations[FenceAnnotation] == "test-term"; got != want {
			t.Errorf("claim %s fenced %v, want %v", name, got, want)
		}
	}
	var r resourceapi.DeviceTaintRule
	if err := e.c.Get(ctx, client.ObjectKey{Name: central.RuleName(tdrv, "n1")}, &r); err != nil {
		t.Fatal(err)
	}
	if r.Annotations[FenceAnnotation] != "test-term" {
		t.Errorf("the operator's rule is not fenced: %v", r.Annotations)
	}
	if e.r.ledger.StateOf(e.claim("done").UID).Allocation == nil {
		t.Error("the sweep's read did not tell the ledger of an allocation")
	}
	if got := e.r.fence.(*openFence).scopes; len(got) != 1 || len(got[0]) != 1 || got[0][0] != class {
		t.Errorf("term scope %v, want [[%s]]", got, class)
	}
}
