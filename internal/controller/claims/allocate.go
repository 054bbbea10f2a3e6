package claims

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/central"
	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/ledger"
	"github.com/drastack/drastack/internal/note"
)

// Event reasons on claims and pods.
const (
	EventAllocated    = "Allocated"
	EventTooManyTries = "AllocationConflicts"
	EventRefused      = "AllocationRefused"
	EventReplaced     = "AllocationReplaced"
	EventNoCentral    = "NoCentralDevices"
)

// The claim loop reads (cache) and writes claims (finalizer: patch;
// allocation: patch of the status).
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaims,verbs=list;watch;patch
// Reads from the API server where the cache may be behind: a write that met
// a conflict (write.go afterWriteError), and the pod webhook's claims and
// templates that its cache has not seen yet (claimwebhook readThrough).
// Held for those paths, which a run takes or not depending on timing.
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaims;resourceclaimtemplates,verbs=get
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaims/status,verbs=patch
// Held for status.allocation: API servers since 1.36 check
// resourceclaims/binding on top of resourceclaims/status inside the status
// write, which is the only request the audit log shows.
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaims/binding,verbs=patch
// The engine's inputs, from the manager's cache (informers: list, watch).
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaimtemplates,verbs=list;watch
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceslices,verbs=list;watch
// +kubebuilder:rbac:groups=resource.k8s.io,resources=deviceclasses,verbs=list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=list;watch
// The placement loop reads pods (cache) and removes its scheduling gate
// (patch).
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch;patch
// The configuration, and the claim status of the DRAStack (server-side apply: patch).
// +kubebuilder:rbac:groups=drastack.io,resources=drastacks,verbs=get;list;watch
// +kubebuilder:rbac:groups=drastack.io,resources=drastacks/status,verbs=patch
// Events on claims and pods.
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile converges one claim: it allocates the operator's immediate
// claims, which need no pod, from central devices. Every other claim of
// the operator is allocated by the placement loop together with the other
// claims of its pod; kube-scheduler's claims, and claims that are
// allocated, reserved or being deleted, are never written here.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cfg, err := r.loadConfig(ctx)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("read the DRAStack: %w", err)
	}
	var cached resourceapi.ResourceClaim
	if err := r.Client.Get(ctx, req.NamespacedName, &cached); err != nil {
		if apierrors.IsNotFound(err) {
			r.forgetClaim(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("read claim %s: %w", req, err)
	}
	// A response of this process may be newer than the cache.
	claim := r.ledger.Newest(&cached)
	if res, ok := r.ledger.Reserved(claim.UID); ok {
		if res.Unit != "" {
			// A pod's placement: its loop writes the whole unit.
			return ctrl.Result{}, nil
		}
		// Decided before; its write has no definite answer yet.
		return r.finishWrite(ctx, claim, "")
	}
	if d := claimpolicy.Decide(cfg, claim); d.Action != claimpolicy.ActionAllocate || !claimpolicy.IsImmediate(cfg, claim) {
		r.forgetClaim(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	claim, err = r.ensureFinalizer(ctx, claim)
	if err != nil || claim == nil {
		return ctrl.Result{RequeueAfter: retryNowDelay}, err
	}
	return r.allocateImmediate(ctx, cfg, claim)
}

func (r *Reconciler) forgetClaim(key types.NamespacedName) {
	r.claims.forget(key)
	r.backoff.Forget(key)
}

// allocateImmediate runs the engine for one immediate claim, on any node,
// reserves the result in the ledger (in the claim's namespace's decision
// turn) and writes it.
func (r *Reconciler) allocateImmediate(ctx context.Context, cfg claimpolicy.Config, claim *resourceapi.ResourceClaim) (ctrl.Result, error) {
	key := types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}
	engine, ok := r.engine(cfg.Engine)
	if !ok {
		return ctrl.Result{}, fmt.Errorf("no allocation engine %q", cfg.Engine)
	}
	r.claims.markWaiting(key, claim.CreationTimestamp.Time, r.now())
	r.expireOld()
	scoped, denied := r.scoped(cfg, claim)
	if len(denied) > 0 {
		return r.claimFailed(ctx, claim, engine.Name(), claimpolicy.OutcomeUnsatisfiable, deniedError(claim, denied))
	}
	var (
		outcome claimpolicy.Outcome
		failure error
		took    time.Duration
	)
	err := r.ledger.Decide(ctx, claim.Namespace, engine, func(d *ledger.Decision) error {
		actx, cancel := context.WithTimeout(ctx, cfg.AllocationTimeout)
		defer cancel()
		start := time.Now()
		results, err := d.Session().Allocate(actx, []*resourceapi.ResourceClaim{scoped}, allocator.Options{MaxSteps: r.MaxSteps, Policy: cfg.PlacementPolicy})
		took = time.Since(start)
		outcome, failure = classify(actx, err, cfg)
		if outcome != claimpolicy.OutcomeAllocated {
			return nil
		}
		if len(results) != 1 || results[0].Allocation == nil {
			return fmt.Errorf("engine %s returned %d results without error for claim %s", engine.Name(), len(results), key)
		}
		return d.Reserve(claim, stamped(results[0].Allocation, r.now()), "")
	})
	if res, done, err := afterTurn(err); done {
		return res, err
	}
	allocationsTotal.WithLabelValues(engine.Name(), string(outcome)).Inc()
	observeEngine(engine.Name(), outcome, took)
	if outcome != claimpolicy.OutcomeAllocated {
		// An allocation's latency ends when its write commits
		// (finishWrite).
		observeLatency(engine.Name(), outcome, r.claims.seenSince(key, r.now()), r.now(), 1)
		return r.claimFailed(ctx, claim, engine.Name(), outcome, failure)
	}
	return r.finishWrite(ctx, claim, engine.Name())
}

// finishWrite writes the reservation of an immediate claim and acts on how
// it ended: an Event when confirmed, a new decision when released, the
// same write again later when ambiguous.
func (r *Reconciler) finishWrite(ctx context.Context, claim *resourceapi.ResourceClaim, engine string) (ctrl.Result, error) {
	key := types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}
	outcome, written, err := r.writeReserved(ctx, claim.UID)
	switch outcome {
	case writeConfirmed:
		if written != nil {
			observeLatency(engineOr(engine, r.cfg.get().Engine), claimpolicy.OutcomeAllocated, r.claims.seenSince(key, r.now()), r.now(), 1)
			log.FromContext(ctx).V(1).Info("Allocated claim", "claim", key, "devices", len(written.Status.Allocation.Devices.Results))
			r.event(written, corev1.EventTypeNormal, EventAllocated, "Allocate", "allocated by the %s engine: %s",
				engineOr(engine, r.cfg.get().Engine), deviceList(written.Status.Allocation))
		}
		r.forgetClaim(key)
		return ctrl.Result{}, nil
	case writeReleased:
		if errors.Is(err, errRefused) {
			allocationsTotal.WithLabelValues(engineOr(engine, r.cfg.get().Engine), string(claimpolicy.OutcomeInvalid)).Inc()
			observeLatency(engineOr(engine, r.cfg.get().Engine), claimpolicy.OutcomeInvalid, r.claims.seenSince(key, r.now()), r.now(), 1)
			if r.claims.record(key, failure{outcome: claimpolicy.OutcomeInvalid, message: err.Error()}) {
				r.event(claim, corev1.EventTypeWarning, EventRefused, "Allocate", "%v (not retried until the claim changes)", err)
			}
			return ctrl.Result{}, nil
		}
		// The claim changed under the write: decide again from its
		// newest state.
		return ctrl.Result{RequeueAfter: retryNowDelay}, nil
	case writeLost:
		return ctrl.Result{}, nil
	}
	log.FromContext(ctx).V(1).Info("Allocation write without a definite answer; sending it again", "claim", key, "err", err)
	return ctrl.Result{RequeueAfter: r.backoff.When(key)}, nil
}

// scoped is the claim as the operator's engine allocates it: its requests
// narrowed to the central devices whose entries admit them
// (central.Scoped), and the requests no entry admits.
func (r *Reconciler) scoped(cfg claimpolicy.Config, c *resourceapi.ResourceClaim) (*resourceapi.ResourceClaim, []string) {
	return central.Scoped(c, cfg.Central, c.Labels[claimpolicy.AllocationLabel] == claimpolicy.AllocationImmediate)
}

// deniedError says which requests of a claim no central entry admits.
func deniedError(c *resourceapi.ResourceClaim, denied []string) error {
	return fmt.Errorf("%w: no entry of spec.claims.central lets namespace %s use central devices for request %s (the entry's classes, namespaces and, for the Immediate label, allowImmediate decide)",
		allocator.ErrUnsatisfiable, c.Namespace, strings.Join(denied, ", "))
}

func engineOr(e, fallback string) string {
	if e != "" {
		return e
	}
	return fallback
}

// classify turns an engine error into an outcome; a deadline of the
// engine call is a search that gave up, with the setting named.
func classify(ctx context.Context, err error, cfg claimpolicy.Config) (claimpolicy.Outcome, error) {
	if err != nil && ctx.Err() == context.DeadlineExceeded && errors.Is(err, context.DeadlineExceeded) {
		return claimpolicy.OutcomeSearchBound, fmt.Errorf("%w: the engine did not finish within spec.claims.allocationTimeout (%s)", allocator.ErrSearchBound, cfg.AllocationTimeout)
	}
	return claimpolicy.Classify(err), err
}

// stamped returns a copy of the allocation with its timestamp, at second
// precision as the API server stores it.
func stamped(a *resourceapi.AllocationResult, now time.Time) *resourceapi.AllocationResult {
	out := a.DeepCopy()
	t := metav1.Unix(now.Unix(), 0)
	out.AllocationTimestamp = &t
	return out
}

// withAllocation returns a copy of the claim carrying alloc, as the
// engine's Record wants it.
func withAllocation(c *resourceapi.ResourceClaim, alloc *resourceapi.AllocationResult) *resourceapi.ResourceClaim {
	out := c.DeepCopy()
	out.Status.Allocation = alloc
	return out
}

// claimFailed reports a failed attempt: an Event when the outcome is news,
// and the retry its outcome calls for.
func (r *Reconciler) claimFailed(ctx context.Context, claim *resourceapi.ResourceClaim, engine string, outcome claimpolicy.Outcome, err error) (ctrl.Result, error) {
	key := types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}
	msg := err.Error()
	if outcome == claimpolicy.OutcomeUnsatisfiable {
		msg += noCentralHint(r.cfg.get())
	}
	if r.claims.record(key, failure{outcome: outcome, message: msg}) && r.Recorder != nil {
		scoped, _ := r.scoped(r.cfg.get(), claim)
		why := r.verdict(ctx, outcome, []*resourceapi.ResourceClaim{scoped}, nil, 0)
		r.event(claim, corev1.EventTypeWarning, string(outcome), "Allocate", "%s engine: %s%s", engine, withVerdict(msg, why), retryHint(outcome))
	}
	return r.retryOf(ctx, key, outcome, err)
}

// retryOf is the requeue an outcome calls for.
func (r *Reconciler) retryOf(ctx context.Context, key types.NamespacedName, outcome claimpolicy.Outcome, err error) (ctrl.Result, error) {
	switch claimpolicy.RetryOf(outcome) {
	case claimpolicy.RetryNone:
		return ctrl.Result{}, nil
	case claimpolicy.RetryNow:
		return ctrl.Result{RequeueAfter: retryNowDelay}, nil
	}
	if outcome == claimpolicy.OutcomeError {
		return ctrl.Result{}, fmt.Errorf("allocate for %s: %w", key, err)
	}
	log.FromContext(ctx).V(1).Info("Cannot allocate now", "key", key, "outcome", outcome, "reason", err)
	return ctrl.Result{RequeueAfter: r.backoff.When(key)}, nil
}

// noCentralHint tells what to configure when the operator has no central
// devices at all: its claims can only be served from those.
func noCentralHint(cfg claimpolicy.Config) string {
	if len(cfg.Central) > 0 {
		return ""
	}
	return "; the operator allocates only central devices and spec.claims.central of the DRAStack names none: add the driver (and pools) whose devices these claims need"
}

func retryHint(o claimpolicy.Outcome) string {
	switch o {
	case claimpolicy.OutcomeInvalid:
		return " (not retried until the claim changes)"
	case claimpolicy.OutcomeNotSupported:
		return " (not retried until the claim or spec.claims.engine of the DRAStack changes)"
	case claimpolicy.OutcomeUnsatisfiable, claimpolicy.OutcomeSearchBound:
		return " (retried with backoff and when devices are added or released)"
	}
	return ""
}

func onNode(node string) string {
	if node == "" {
		return ""
	}
	return " on node " + node
}

// deviceList names the allocated devices, shortened for an Event.
func deviceList(a *resourceapi.AllocationResult) string {
	const show = 8
	var parts []string
	for i, res := range a.Devices.Results {
		if i == show {
			parts = append(parts, fmt.Sprintf("and %d more", len(a.Devices.Results)-show))
			break
		}
		parts = append(parts, res.Driver+"/"+res.Pool+"/"+res.Device)
	}
	return strings.Join(parts, ", ")
}

func (r *Reconciler) event(obj client.Object, eventType, reason, action, note string, args ...any) {
	if r.Recorder == nil {
		return
	}
	r.Recorder.Eventf(obj, nil, eventType, reason, action, "%s", shorten(fmt.Sprintf(note, args...)))
}

// maxNote keeps Event notes under the API server's limit of 1024
// characters (engine reasons can quote long CEL expressions).
const maxNote = 1000

// shorten gives up quoted expressions, then the middle of the note,
// before the cause at its end (internal/note).
func shorten(s string) string {
	return note.Shorten(s, maxNote)
}
