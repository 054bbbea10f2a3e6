package claims

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/central"
	"github.com/drastack/drastack/internal/ledger"
)

// errCachesBehind: the informer caches still show the DRAStack or a
// central DeviceTaintRule as of before the term began. A new process's
// informers may list from the API server's watch cache, a little behind:
// its configuration can still name a pool that an earlier term took out
// of the partition (and whose rule it deleted, so kube-scheduler may
// allocate its devices already). Decisions wait until the caches have
// caught up (docs/allocation-protocol.md, section 2).
var errCachesBehind = errors.New("the informer caches have not yet caught up with the start of this allocation term; retrying")

// termFloor is the resourceVersion at which the current term acquired the
// fence (0: no floor, before the first term or without the fence). The
// sweep writes the DRAStack and every central DeviceTaintRule older than
// it, so a cache that has caught up shows all of them newer than it.
type termFloor struct{ v atomic.Uint64 }

func (f *termFloor) set(v ledger.Version) { f.v.Store(uint64(v)) }

func (f *termFloor) get() ledger.Version { return ledger.Version(f.v.Load()) }

// stackToFence is the DRAStack, read from the API server, when it is
// older than the term (acquired): the sweep writes FenceAnnotation on it.
func (r *Reconciler) stackToFence(ctx context.Context, acquired ledger.Version) (client.Object, error) {
	var st v1alpha1.DRAStack
	err := r.APIReader.Get(ctx, client.ObjectKey{Name: v1alpha1.DRAStackName}, &st)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read the DRAStack for the sweep: %w", err)
	case ledger.ParseVersion(st.ResourceVersion) >= acquired:
		return nil, nil
	}
	return &st, nil
}

// caughtUp reports errCachesBehind while the cached DRAStack or one of the
// operator's cached DeviceTaintRules is not newer than the term's floor.
func (s *cacheSource) caughtUp(ctx context.Context) error {
	floor := s.floor.get()
	if floor == 0 {
		return nil
	}
	var st v1alpha1.DRAStack
	err := s.reader.Get(ctx, client.ObjectKey{Name: v1alpha1.DRAStackName}, &st)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("read the DRAStack: %w", err)
	case ledger.ParseVersion(st.ResourceVersion) <= floor:
		return errCachesBehind
	}
	if !s.taintRules {
		return nil
	}
	var rules resourceapi.DeviceTaintRuleList
	if err := s.reader.List(ctx, &rules, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("list DeviceTaintRules: %w", err)
	}
	for i := range rules.Items {
		if rule := &rules.Items[i]; central.Owned(rule) && ledger.ParseVersion(rule.ResourceVersion) <= floor {
			return errCachesBehind
		}
	}
	return nil
}
