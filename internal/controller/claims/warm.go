package claims

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/drastack/drastack/internal/allocator"
)

// sessionWarmer builds the first engine session as soon as this process
// leads, before any claim asks for one. Without it the first claim of a
// burst after a start pays for the consistent read of every claim (seed)
// and the session build, and every claim queued behind it waits too.
type sessionWarmer struct{ r *Reconciler }

// NeedLeaderElection: the seed must see what the previous leader wrote, so
// it runs only once this process leads (as the allocating loops do).
func (w *sessionWarmer) NeedLeaderElection() bool { return true }

// Start builds the session of the configured engine and returns; the
// manager starts leader-elected runnables after the caches synced. The
// loops' watches replay the cached objects as Create events when they
// start, possibly after this build: those do not invalidate it
// (watchDevices, configHandler). A failure is only logged: the first
// reconcile builds the session then.
func (w *sessionWarmer) Start(ctx context.Context) error {
	if err := w.r.warm(ctx); err != nil {
		log.FromContext(ctx).WithName(ControllerName).V(1).Info("Building the first engine session ahead of the claims failed; the first claim builds it", "error", err.Error())
	}
	return nil
}

// warm builds the session a claim of the current configuration would use.
// It does nothing when no DRAStack serves claims.
func (r *Reconciler) warm(ctx context.Context) error {
	cfg, err := r.loadConfig(ctx)
	if err != nil || !cfg.Active {
		return err
	}
	engine, ok := r.engine(cfg.Engine)
	if !ok {
		return nil
	}
	return r.snap.withSession(ctx, engine, func(allocator.Session) error { return nil })
}
