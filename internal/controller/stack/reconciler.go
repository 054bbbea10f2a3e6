// Package stack is the DRAStack reconciler: it validates the spec, probes
// what the cluster supports, and derives Ready from the conditions every
// drastack controller reports.
package stack

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/controller/specgate"
	"github.com/drastack/drastack/internal/controller/statusapply"
	"github.com/drastack/drastack/internal/note"
	stackpkg "github.com/drastack/drastack/internal/stack"
)

// FieldManager owns the fields this reconciler writes.
const FieldManager = "drastack-stack"

// DefaultProbeInterval is how long a cluster probe is trusted. Feature gates
// change only when the API server restarts, so probing often buys nothing.
const DefaultProbeInterval = 10 * time.Minute

// ClusterProber is what the reconciler needs from clusterprobe.
type ClusterProber interface {
	Probe(ctx context.Context) (*v1alpha1.ClusterStatus, error)
}

// Reconciler reconciles the DRAStack.
type Reconciler struct {
	Client client.Client
	// Gate reads what the whole-spec check needs; nil checks the spec
	// alone.
	Gate     *specgate.Gate
	Prober   ClusterProber
	Recorder events.EventRecorder
	// ProbeInterval defaults to DefaultProbeInterval.
	ProbeInterval time.Duration
	// Now defaults to time.Now; tests replace it.
	Now func() time.Time

	mu        sync.Mutex
	probed    *v1alpha1.ClusterStatus
	probedAt  time.Time
	lastProbe error

	// emitted remembers the transitions Events were emitted for; see
	// recordTransitions.
	emitted transitions
}

// RBAC of the DRAStack reconciler; each marker says which code needs it.
// The cluster probe (internal/clusterprobe, outside the paths
// controller-gen reads) runs here, so its markers are here too: discovery
// and the server version need no RBAC, and a dry-run create is authorized
// as a create.
//
// Reconcile and SetupWithManager For (cache).
// +kubebuilder:rbac:groups=drastack.io,resources=drastacks,verbs=get;list;watch
// Reconcile: statusapply.Apply, server-side apply of the status.
// +kubebuilder:rbac:groups=drastack.io,resources=drastacks/status,verbs=patch
// clusterprobe Prober.Probe: dry-run ResourceSlices (cluster-wide).
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceslices,verbs=create
// clusterprobe Prober.Probe: dry-run ResourceClaims in the probe namespace.
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaims,verbs=create
// clusterprobe Prober.Probe: a dry-run DeviceClass (extended resources).
// +kubebuilder:rbac:groups=resource.k8s.io,resources=deviceclasses,verbs=create
// recordTransitions: Recorder (events.k8s.io/v1 through the manager's
// event broadcaster).
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile converges one DRAStack's status. It is level based: it reads
// the object and the cluster and writes what it finds.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	var st v1alpha1.DRAStack
	if err := r.Client.Get(ctx, req.NamespacedName, &st); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	gen := st.Generation
	now := metav1.NewTime(r.now())

	var report stackpkg.SpecReport
	if st.Name != v1alpha1.DRAStackName {
		report.Errors = append(report.Errors, fmt.Sprintf("metadata.name: there is one DRAStack per cluster and it must be named %q", v1alpha1.DRAStackName))
	}
	verdict := stackpkg.Check(&st.Spec, stackpkg.Facts{})
	if r.Gate != nil {
		var err error
		if verdict, err = r.Gate.Check(ctx, &st, specgate.What{Published: true}); err != nil {
			return ctrl.Result{}, err
		}
	}
	report.Errors = append(report.Errors, verdict.Messages()...)
	report.Warnings = verdict.Warnings
	// What only rendering and applying find (a patch that matches nothing,
	// an object the API server refuses) the driver lifecycle controller
	// reports in status.drivers with its field path.
	report.DriverProblems = stackpkg.DriverSpecProblems(&st, report.Errors)
	specCond := stackpkg.SpecCondition(report, gen)

	cluster, probeErr, refreshIn := r.probe(ctx)
	if probeErr != nil {
		logger.Error(probeErr, "Cluster probe failed")
		if cluster == nil {
			cluster = st.Status.Cluster
		}
	}
	compat := stackpkg.CompatibleCondition(&st.Spec, cluster, probeErr, gen)

	// Ready reads everyone's conditions, with ours replaced by the new ones.
	merged := append([]metav1.Condition(nil), st.Status.Conditions...)
	meta.SetStatusCondition(&merged, specCond)
	meta.SetStatusCondition(&merged, compat)
	ready := stackpkg.ReadyCondition(merged, len(st.Spec.Drivers), stackpkg.UnreportedDrivers(&st.Spec, st.Status.Drivers), gen)

	conds := statusapply.KeepTransitionTimes(st.Status.Conditions, []metav1.Condition{specCond, compat, ready}, now)
	r.recordTransitions(&st, conds)

	status := v1alpha1.DRAStackStatus{
		ObservedGeneration: gen,
		Conditions:         conds,
		Cluster:            cluster,
		// summary.pools belongs to the pool controller and summary.drivers
		// to the driver lifecycle controller, which writes status.drivers.
	}
	if err := statusapply.Apply(ctx, r.Client, v1alpha1.GroupVersion.String(), "DRAStack", "", st.Name, FieldManager, status); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if specCond.Reason != stackpkg.ReasonSpecValid {
		// Errors and warnings may rest on the cluster (a namespace, the
		// nodes, which drivers publish), which does not trigger this
		// reconciler: look again soon.
		refreshIn = min(refreshIn, factsRecheck)
	}
	return ctrl.Result{RequeueAfter: refreshIn}, nil
}

// maxNote keeps an Event's note under the API server's 1024 bytes; the
// condition keeps the whole message.
const maxNote = 1000

// factsRecheck is how soon a spec with errors or warnings is checked again
// without an event.
const factsRecheck = 10 * time.Second

// probe returns the cached cluster status, probing again when it is older
// than the probe interval or the last probe failed.
func (r *Reconciler) probe(ctx context.Context) (*v1alpha1.ClusterStatus, error, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	interval := r.ProbeInterval
	if interval == 0 {
		interval = DefaultProbeInterval
	}
	age := r.now().Sub(r.probedAt)
	if r.probed != nil && r.lastProbe == nil && age < interval {
		return r.probed.DeepCopy(), nil, interval - age
	}
	cs, err := r.Prober.Probe(ctx)
	r.lastProbe = err
	if err != nil {
		// Retry sooner than the interval; the status keeps the last good probe.
		return r.probed.DeepCopy(), err, 30 * time.Second
	}
	r.probed, r.probedAt = cs, r.now()
	return cs.DeepCopy(), nil, interval
}

// recordTransitions emits an Event when SpecValid or ClusterCompatible
// changes status or reason, or Ready changes status, so
// `kubectl describe drastack` tells the story.
// Every status write of every drastack controller triggers this
// reconciler, and the cached DRAStack it compares with may not show its
// own last write yet: the transition it just reported would look new
// again, one Event per reconcile within the same second. So a transition
// is also compared with the last one emitted.
func (r *Reconciler) recordTransitions(st *v1alpha1.DRAStack, conds []metav1.Condition) {
	if r.Recorder == nil {
		return
	}
	for _, c := range conds {
		prev := meta.FindStatusCondition(st.Status.Conditions, c.Type)
		state := func(c *metav1.Condition) string {
			if c.Type == v1alpha1.ConditionReady {
				// Ready changes reason with every step of an install
				// (Installing, WaitingForSlices, ...), which the driver
				// controller's Events tell already: only its status
				// transitions are Events here.
				return string(c.Status)
			}
			return string(c.Status) + "/" + c.Reason
		}
		unchanged := prev != nil && state(prev) == state(&c)
		if !r.emitted.changed(st.UID, c.Type, state(&c), unchanged) {
			continue
		}
		eventType := corev1.EventTypeNormal
		if c.Status == metav1.ConditionFalse || c.Reason == stackpkg.ReasonSpecValidWithWarnings {
			eventType = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(st, nil, eventType, c.Reason, "Reconcile", "%s", note.Shorten(fmt.Sprintf("%s is %s: %s", c.Type, c.Status, c.Message), maxNote))
	}
}

// transitions remembers, per object and key, the last state an Event was
// emitted for.
type transitions struct {
	mu   sync.Mutex
	last map[types.UID]map[string]string
}

// changed records state and says whether it is a transition to report:
// not when the stored status already shows it (unchanged), nor when an
// Event for it was the last one emitted.
func (t *transitions) changed(uid types.UID, key, state string, unchanged bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.last == nil {
		t.last = map[types.UID]map[string]string{}
	}
	if t.last[uid] == nil {
		t.last[uid] = map[string]string{}
	}
	prev, known := t.last[uid][key]
	t.last[uid][key] = state
	return !unchanged && (!known || prev != state)
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// SetupWithManager registers the reconciler. Status changes by other
// controllers trigger it too, because Ready depends on their conditions.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.DRAStack{}).
		Named("drastack").
		Complete(r)
}
