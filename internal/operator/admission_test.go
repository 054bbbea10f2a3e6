package operator

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"

	"github.com/drastack/drastack/internal/admissionpolicy"
)

// syncedCache is a cache whose own sync succeeds at once.
type syncedCache struct{ informertest.FakeInformers }

func (syncedCache) WaitForCacheSync(context.Context) bool { return true }

func newTestGate(user string, err error) *policyGate {
	return &policyGate{
		Cache:     &syncedCache{},
		installer: &admissionpolicy.Installer{},
		whoAmI:    func(context.Context) (string, error) { return user, err },
		done:      make(chan struct{}),
	}
}

// TestPolicyGateHoldsTheCachesGroup: until the policies are in force the
// gate reports its cache unsynced, which is what keeps the manager from
// starting its controllers; it gives up only with its context.
func TestPolicyGateHoldsTheCachesGroup(t *testing.T) {
	g := newTestGate("", nil)
	if g.GetCache() != g {
		t.Fatal("the gate must be its own cache, so the manager puts it in the caches group")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if g.WaitForCacheSync(ctx) {
		t.Fatal("synced before the policies are in force")
	}
	if err := g.ready(nil); err == nil {
		t.Error("ready before the policies are in force")
	}
	close(g.done)
	if !g.WaitForCacheSync(context.Background()) {
		t.Error("not synced once the policies are in force")
	}
}

// TestPolicyGateRefusesAPerson: the fence is rendered for the identity the
// API server names; a user that is not a ServiceAccount would be fenced
// instead of the operator, so the gate fails and says how to run without
// it.
func TestPolicyGateRefusesAPerson(t *testing.T) {
	err := newTestGate("kubernetes-admin", nil).Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "not a ServiceAccount") || !strings.Contains(err.Error(), "--admission-policies=off") {
		t.Errorf("Start as a person: %v, want a refusal naming --admission-policies=off", err)
	}
	want := errors.New("connection refused")
	if err := newTestGate("", want).Start(context.Background()); !errors.Is(err, want) {
		t.Errorf("Start when the API server cannot say who the operator is: %v, want %v", err, want)
	}
}
