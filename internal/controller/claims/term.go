package claims

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/drastack/drastack/internal/central"
	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/ledger"
)

// The allocation fence (package fence, docs/allocation-protocol.md section
// 2): termRunner's fence.Acquire reads the Lease drastack-allocation-fence
// in the operator's namespace from the API server and takes it over with
// an update; every confirmation of the term is a JSON patch whose test of
// the holder commits only while the term holds it (by name).
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;update;patch,resourceNames=drastack-allocation-fence,namespace=system
// fence.Acquire creates the Lease the first time (a create cannot be
// limited by name).
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=create,namespace=system

// FenceAnnotation is what the sweep of a new term writes on the claims
// and DeviceTaintRules an earlier term could still write: the new term.
// Writing it moves their resourceVersion past anything an earlier term
// read (docs/allocation-protocol.md, section 2).
const FenceAnnotation = "resource.drastack.io/fence"

// sweepWorkers bounds the sweep's parallel writes.
const sweepWorkers = 16

// Retries of a sweep write without a definite answer back off between
// these bounds (liveness only).
const (
	sweepMinRetry = 50 * time.Millisecond
	sweepMaxRetry = 5 * time.Second
)

// termRunner starts an allocation term when this process leads: it
// acquires the fence, sweeps what an earlier term could still write, makes
// the ledger ready and queues every claim and pod; when the fence is lost
// while this process still leads (another process took it), it starts a
// new term.
type termRunner struct {
	r *Reconciler
	// ready receives an event for each loop when a term is ready.
	ready []chan event.GenericEvent
}

// NeedLeaderElection: terms belong to the leader.
func (t *termRunner) NeedLeaderElection() bool { return true }

// Start runs until ctx ends.
func (t *termRunner) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("allocation-term")
	ctx = log.IntoContext(ctx, logger)
	delay := sweepMinRetry
	for ctx.Err() == nil {
		start := time.Now()
		if err := t.r.beginTerm(ctx); err != nil {
			logger.Error(err, "Starting an allocation term failed; retrying")
			sleepCtx(ctx, delay)
			delay = min(2*delay, sweepMaxRetry)
			continue
		}
		delay = sweepMinRetry
		termSeconds.Observe(time.Since(start).Seconds())
		logger.Info("Allocation term started", "term", t.r.fence.Term(), "took", time.Since(start).String())
		for _, ch := range t.ready {
			select {
			case ch <- event.GenericEvent{}:
			case <-ctx.Done():
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.r.fence.Lost():
			logger.Info("The allocation fence was taken by another term; starting a new one")
		}
	}
	return nil
}

// beginTerm acquires the fence for a new term, sweeps, and makes the
// ledger ready. Until it returns, the ledger takes no decisions.
func (r *Reconciler) beginTerm(ctx context.Context) error {
	r.ledger.SetReady(false)
	cfg, err := r.loadConfig(ctx)
	if err != nil {
		return err
	}
	scope := claimpolicy.Scope(cfg)
	previous, acquired, err := r.fence.Acquire(ctx, scope)
	if err != nil {
		return err
	}
	if !r.off.noFence {
		if err := r.sweep(ctx, acquired, append(previous, scope...)); err != nil {
			return err
		}
		// Decisions wait until the caches show what the sweep wrote.
		r.source.floor.set(acquired)
	}
	r.ledger.SetReady(true)
	r.warm(ctx)
	return nil
}

// warm builds the engine session a claim of the current configuration
// would use, so that the first claim of a burst after a start does not pay
// for it and every claim queued behind it with it. A failure is only
// logged: the first decision builds the session then.
func (r *Reconciler) warm(ctx context.Context) {
	cfg := r.cfg.get()
	engine, ok := r.engine(cfg.Engine)
	if !cfg.Active || !ok {
		return
	}
	if err := r.ledger.Decide(ctx, "", engine, func(*ledger.Decision) error { return nil }); err != nil {
		log.FromContext(ctx).V(1).Info("Building the first engine session ahead of the claims failed; the first claim builds it", "error", err.Error())
	}
}

// sweep reads every claim with a consistent read into the ledger, and
// fences every unallocated claim an earlier term could still write (read
// before the term began, in either term's scope), and the operator's
// DeviceTaintRules, by writing FenceAnnotation with its resourceVersion as
// precondition. Afterwards the ledger holds every allocation an earlier
// term will ever commit.
func (r *Reconciler) sweep(ctx context.Context, acquired ledger.Version, scope []string) error {
	slices.Sort(scope)
	scope = slices.Compact(scope)
	var claims resourceapi.ResourceClaimList
	if err := r.APIReader.List(ctx, &claims); err != nil {
		return fmt.Errorf("read the claims for the sweep: %w", err)
	}
	var todo []client.Object
	for i := range claims.Items {
		c := &claims.Items[i]
		r.ledger.Observe(c)
		if c.Status.Allocation == nil && ledger.ParseVersion(c.ResourceVersion) < acquired && claimpolicy.InScope(scope, c) {
			todo = append(todo, c)
		}
	}
	if r.taintRules {
		var rules resourceapi.DeviceTaintRuleList
		if err := r.APIReader.List(ctx, &rules); err != nil {
			return fmt.Errorf("read the DeviceTaintRules for the sweep: %w", err)
		}
		for i := range rules.Items {
			if rule := &rules.Items[i]; central.Owned(rule) && ledger.ParseVersion(rule.ResourceVersion) < acquired {
				todo = append(todo, rule)
			}
		}
	}
	st, err := r.stackToFence(ctx, acquired)
	if err != nil {
		return err
	}
	if st != nil {
		todo = append(todo, st)
	}
	term := r.fence.Term()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		work  = make(chan client.Object)
	)
	workers := sweepWorkers
	if r.serialWrites {
		workers = 1
	}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for obj := range work {
				if err := r.fenceObject(ctx, obj, term); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, obj := range todo {
		work <- obj
	}
	close(work)
	wg.Wait()
	sweptTotal.Add(float64(len(todo)))
	return first
}

// fenceObject writes FenceAnnotation on obj with its resourceVersion as
// precondition, until the answer is definite: written, changed since (its
// version moved past the read anyway), or gone. Claims' answers go to the
// ledger.
func (r *Reconciler) fenceObject(ctx context.Context, obj client.Object, term string) error {
	delay := sweepMinRetry
	for {
		upd := obj.DeepCopyObject().(client.Object)
		ann := upd.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[FenceAnnotation] = term
		upd.SetAnnotations(ann)
		wctx, cancel := context.WithTimeout(ctx, writeTimeout)
		err := r.Client.Patch(wctx, upd, optimistic(obj), client.FieldOwner(FieldManager))
		cancel()
		c, isClaim := obj.(*resourceapi.ResourceClaim)
		switch {
		case err == nil:
			if isClaim {
				r.ledger.Observe(upd.(*resourceapi.ResourceClaim))
			}
			return nil
		case apierrors.IsNotFound(err):
			if isClaim {
				r.ledger.ObserveDeleted(c)
			}
			return nil
		case apierrors.IsConflict(err):
			if isClaim {
				return r.readFresh(ctx, c)
			}
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case apierrors.IsInvalid(err):
			return fmt.Errorf("fence %s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, client.ObjectKeyFromObject(obj), err)
		}
		log.FromContext(ctx).V(1).Info("A sweep write got no definite answer; sending it again", "object", client.ObjectKeyFromObject(obj), "err", err.Error())
		r.sleep(ctx, delay)
		delay = min(2*delay, sweepMaxRetry)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
