package claims

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/drastack/drastack/internal/allocator"
	claimspkg "github.com/drastack/drastack/internal/claims"
)

// outcomeDeferred: every allocation the engine found needs a node where
// kube-scheduler has a binding in flight; tried again shortly (avoid.go).
const outcomeDeferred claimspkg.Outcome = "Deferred"

// Event reasons on claims.
const (
	EventAllocated    = "Allocated"
	EventLostRace     = "AllocationLostRace"
	EventTooManyTries = "AllocationConflicts"
)

// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaims,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaims/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaimtemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=resource.k8s.io,resources=deviceclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=drastack.io,resources=drastacks,verbs=get;list;watch
// +kubebuilder:rbac:groups=drastack.io,resources=drastacks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile converges one claim: it allocates the operator's unallocated
// claims and takes back the operator's allocation of a claim that lost a
// race while no consumer uses it. Claims of kube-scheduler, and claims
// that are allocated, reserved or being deleted, are never written.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cfg, err := r.loadConfig(ctx)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("read the DRAStack: %w", err)
	}
	var claim resourceapi.ResourceClaim
	if err := r.Client.Get(ctx, req.NamespacedName, &claim); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("read claim %s: %w", req, err)
	}
	switch d := claimspkg.Decide(cfg, &claim); d.Action {
	case claimspkg.ActionAllocate:
		return r.allocate(ctx, cfg, &claim)
	case claimspkg.ActionAllocated:
		r.forget(req.NamespacedName)
		if d.Why == claimspkg.WhyCELConstraints {
			r.reportBypass(ctx, &claim)
		}
		if !r.suspect(claim.UID) {
			return ctrl.Result{}, nil
		}
		err := r.settleRace(ctx, &claim)
		if err == nil {
			r.clearSuspect(claim.UID)
		}
		return ctrl.Result{}, err
	case claimspkg.ActionIgnore:
		r.forget(req.NamespacedName)
	}
	return ctrl.Result{}, nil
}

// allocate runs the engine for one claim and writes the result. The
// decision is made under the engine lock and reserved in the snapshot, so
// that concurrent workers never choose the same devices; the writes run
// outside the lock.
func (r *Reconciler) allocate(ctx context.Context, cfg claimspkg.Config, claim *resourceapi.ResourceClaim) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	key := types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}
	engine, ok := r.engine(cfg.Engine)
	if !ok {
		return ctrl.Result{}, fmt.Errorf("no allocation engine %q", cfg.Engine)
	}
	var (
		result  allocator.Result
		outcome claimspkg.Outcome
		failure error
	)
	now := r.now()
	err := r.snap.withSession(ctx, engine, func(sess allocator.Session) error {
		results, err := sess.Allocate(ctx, []*resourceapi.ResourceClaim{claim}, allocator.Options{})
		outcome, failure = claimspkg.Classify(err), err
		if outcome != claimspkg.OutcomeAllocated {
			return nil
		}
		if len(results) != 1 || results[0].Allocation == nil {
			return fmt.Errorf("engine %s returned %d results without error for claim %s", engine.Name(), len(results), key)
		}
		chosen := r.avoidBusy(ctx, sess, claim, results[0])
		if chosen == nil {
			outcome = outcomeDeferred
			return nil
		}
		result = *chosen
		result.Allocation = result.Allocation.DeepCopy()
		// Second precision, as the API server stores it: the race order
		// (claims.Losers) must be the same before and after a round trip.
		result.Allocation.AllocationTimestamp = &metav1.Time{Time: now.Truncate(1e9)}
		reserved := claim.DeepCopy()
		reserved.Status.Allocation = result.Allocation
		return r.snap.reserve(sess, reserved, now)
	})
	if err != nil {
		return ctrl.Result{}, err
	}
	if outcome == outcomeDeferred {
		return ctrl.Result{RequeueAfter: settlePoll}, nil
	}
	allocationsTotal.WithLabelValues(engine.Name(), string(outcome)).Inc()
	if outcome != claimspkg.OutcomeAllocated {
		return r.failed(ctx, claim, engine.Name(), outcome, failure)
	}

	// The write runs to its end even when the manager stops: a write
	// abandoned by the client may still be committed, after the next
	// operator instance has read the claims.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	alloc := result.Allocation
	written, err := r.write(wctx, claim, alloc)
	if err != nil || written == nil {
		r.snap.release(claim.UID)
		if err != nil {
			allocationsTotal.WithLabelValues(engine.Name(), string(claimspkg.OutcomeError)).Inc()
			return ctrl.Result{}, err
		}
		// The claim changed so that it no longer needs this allocation
		// (deleted, allocated by someone else, or its constraints changed);
		// its update event brings it back if there is more to do.
		return ctrl.Result{}, nil
	}
	r.snap.confirm(written)
	r.noteWritten(written.UID, r.now())
	allocationLatency.WithLabelValues(engine.Name()).Observe(r.now().Sub(r.waitingSince(claim)).Seconds())
	r.forget(key)
	logger.V(1).Info("Allocated claim", "claim", key, "engine", engine.Name(), "node", result.Node, "devices", len(alloc.Devices.Results))
	r.event(written, corev1.EventTypeNormal, EventAllocated, "Allocate", "allocated by the %s engine%s: %s",
		engine.Name(), onNode(result.Node), deviceList(alloc))
	// The race watch checks the new allocation against everything else.
	r.wakeRaces()
	return ctrl.Result{}, nil
}

// failed reports a failed attempt: an Event when the outcome is news, and
// the retry its outcome calls for.
func (r *Reconciler) failed(ctx context.Context, claim *resourceapi.ResourceClaim, engine string, outcome claimspkg.Outcome, err error) (ctrl.Result, error) {
	key := types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}
	msg := err.Error()
	if r.recordFailure(key, failure{outcome: outcome, message: msg}) {
		r.event(claim, corev1.EventTypeWarning, string(outcome), "Allocate", "%s engine: %s%s", engine, msg, retryHint(outcome))
	}
	switch claimspkg.RetryOf(outcome) {
	case claimspkg.RetryNone:
		return ctrl.Result{}, nil
	case claimspkg.RetryNow:
		return ctrl.Result{RequeueAfter: retryNowDelay}, nil
	}
	if outcome == claimspkg.OutcomeError {
		return ctrl.Result{}, fmt.Errorf("allocate claim %s: %w", key, err)
	}
	log.FromContext(ctx).V(1).Info("Claim cannot be allocated now", "claim", key, "outcome", outcome, "reason", msg)
	return ctrl.Result{RequeueAfter: r.backoff.When(key)}, nil
}

func retryHint(o claimspkg.Outcome) string {
	switch o {
	case claimspkg.OutcomeInvalid:
		return " (not retried until the claim changes)"
	case claimspkg.OutcomeNotSupported:
		return " (not retried until the claim or spec.claims.engine of the DRAStack changes)"
	case claimspkg.OutcomeUnsatisfiable, claimspkg.OutcomeSearchBound:
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

func (r *Reconciler) event(obj *resourceapi.ResourceClaim, eventType, reason, action, note string, args ...any) {
	if r.Recorder == nil {
		return
	}
	r.Recorder.Eventf(obj, nil, eventType, reason, action, "%s", shorten(fmt.Sprintf(note, args...)))
}

// maxNote keeps Event notes under the API server's limit of 1024
// characters (engine reasons can quote long CEL expressions).
const maxNote = 1000

func shorten(s string) string {
	if len(s) <= maxNote {
		return s
	}
	cut := maxNote - len(" ...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + " ..."
}
