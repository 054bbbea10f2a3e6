// Package driver is the driver lifecycle controller: it renders each
// driver of DRAStack spec.drivers (internal/driver), applies the objects
// with server-side apply, prunes what a render no longer produces, removes
// drivers safely when they leave the spec or the DRAStack is deleted, and
// reports status.drivers with the DriversReady, Progressing and Degraded
// conditions. Every decision is made by internal/driver; this package reads
// the cluster, calls it, and writes what it decided.
package driver

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/controller/specgate"
	"github.com/drastack/drastack/internal/driver"
	"github.com/drastack/drastack/internal/note"
	"github.com/drastack/drastack/internal/stack"
)

// Finalizer holds a DRAStack while its drivers are removed. It is set only
// while the stack has drivers (declared or left to remove), so a DRAStack
// without drivers is deleted at once, even without a running operator.
const Finalizer = "drastack.io/driver-cleanup"

// DefaultNamespace is used when a DRAStack predates the spec.namespace
// default.
const DefaultNamespace = stack.DefaultDriverNamespace

// maxNote keeps an Event's note under the API server's 1024 bytes; the
// status keeps the whole message.
const maxNote = 1000

// Requeue intervals. Pods and claims are read without a watch (a watch on
// every pod of the cluster is not worth it), so states that only they show
// are looked at again on a timer.
const (
	// removalPoll: a removal step was taken or waits for pods or claims.
	removalPoll = 3 * time.Second
	// busyPoll: a driver is installing, rolling out or degraded.
	busyPoll = 15 * time.Second
	// idlePoll: everything is ready; catches pod failures that do not
	// change the DaemonSet's counts.
	idlePoll = 2 * time.Minute
)

// Reconciler runs the driver lifecycle of the DRAStack.
type Reconciler struct {
	// Client reads from the manager's cache (DRAStacks, DaemonSets,
	// Deployments, DeviceClasses, ResourceSlices) and writes.
	Client client.Client
	// APIReader reads what is not cached: the metadata of every managed
	// kind (to prune and remove), pods, claims, controller revisions.
	APIReader client.Reader
	// Recorder emits Events on the DRAStack; nil disables them.
	Recorder events.EventRecorder
	// Settings tune the status judgements; zero values use the defaults.
	Settings driver.Settings
	// Gate is the whole-spec check: an invalid spec changes nothing that
	// runs (see hold). Nil: every spec is acted on (tests of one branch).
	Gate *specgate.Gate
	// Now defaults to time.Now; tests replace it.
	Now func() time.Time

	// emitted remembers each driver's last reason and removal phase an
	// Event was emitted for; see recordTransitions.
	emittedMu sync.Mutex
	emitted   map[string]string

	// memory is which render of each object was applied; see apply.
	memory appliedMemory
}

// declared is one driver of the spec with its render.
type declared struct {
	spec v1alpha1.DriverSpec
	// path is the entry's field path, spec.drivers[i].
	path      *field.Path
	rendered  *driver.Rendered
	renderErr error
	problems  []driver.ApplyProblem
	// pendingCRDs are the render's CustomResourceDefinitions that were
	// not established after this apply; its workloads were held back.
	pendingCRDs []string
}

// Reconcile converges the drivers of one DRAStack. It is level based: it
// reads the spec and every object labelled for the stack, applies, prunes
// and removes until they agree, and reports what it finds.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	var st v1alpha1.DRAStack
	if err := r.Client.Get(ctx, req.NamespacedName, &st); err != nil {
		if apierrors.IsNotFound(err) {
			rolloutCollector.report(nil)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	now := r.now()
	deleting := st.DeletionTimestamp != nil
	if !deleting && r.Gate != nil {
		// Before anything is applied or deleted: a spec the whole-spec
		// check refuses (a namespace the operator must not use, a driver
		// named like a multi-host driver, ...) changes nothing that runs.
		// A DRAStack being deleted is removed whatever its spec says.
		v, err := r.Gate.Check(ctx, &st, specgate.What{})
		if err != nil {
			return ctrl.Result{}, err
		}
		if !v.Valid() {
			return r.hold(ctx, &st, v, now)
		}
	}
	namespace := st.Spec.Namespace
	if namespace == "" {
		namespace = DefaultNamespace
	}

	var want []*declared
	if !deleting {
		nodes, err := r.nodeFacts(ctx, st.Spec.Drivers)
		if err != nil {
			return ctrl.Result{}, err
		}
		for i, spec := range st.Spec.Drivers {
			d := &declared{spec: spec, path: field.NewPath("spec", "drivers").Index(i)}
			d.rendered, d.renderErr = driver.Render(driver.Input{Stack: st.Name, Namespace: namespace, Driver: spec, Path: d.path, Nodes: nodes})
			want = append(want, d)
		}
	}

	inv, err := r.inventory(ctx, st.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	for _, ds := range st.Status.Drivers {
		// A removal whose objects are gone may still have slices to clean.
		if ds.Removal != nil && inv.drivers[ds.Name] == nil {
			inv.drivers[ds.Name] = &installed{}
		}
	}

	if !deleting && (len(want) > 0 || len(inv.drivers) > 0) && !controllerutil.ContainsFinalizer(&st, Finalizer) {
		// Nothing is installed before the finalizer is in place, so a
		// deletion can never skip the removal.
		if err := r.setFinalizer(ctx, &st, true); err != nil {
			return ctrl.Result{}, err
		}
	}

	// Install and update the declared drivers.
	r.applyNamespace(ctx, want)
	declaredNames := map[string]bool{}
	for _, d := range want {
		declaredNames[d.spec.Name] = true
		if d.rendered == nil {
			continue
		}
		d.problems = append(d.problems, r.apply(ctx, &st, d, inv.drivers[d.spec.Name])...)
		if err := r.prune(ctx, st.Name, d.rendered, inv.drivers[d.spec.Name]); err != nil {
			return ctrl.Result{}, err
		}
	}

	pub, err := r.publishingNodes(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}

	// Remove the others.
	taintGVK := r.servedTaintRules(st.Status.Cluster)
	var removals []driver.Assessment
	removing := false
	for _, name := range sortedKeys(inv.drivers) {
		if declaredNames[name] {
			continue
		}
		a, done, err := r.removeDriver(ctx, &st, name, inv.drivers[name], taintGVK, pub, now)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("remove driver %s: %w", name, err)
		}
		if !done {
			removing = true
			removals = append(removals, *a)
		}
	}
	nsDone := true
	if !removing {
		if nsDone, err = r.cleanupNamespaces(ctx, st.Name, namespace, len(want) > 0); err != nil {
			return ctrl.Result{}, err
		}
	}

	// Report.
	assessments := make([]driver.Assessment, 0, len(want)+len(removals))
	for _, d := range want {
		o, err := r.observe(ctx, &st, d, pub, now)
		if err != nil {
			return ctrl.Result{}, err
		}
		assessments = append(assessments, driver.Assess(d.spec.Name, o, r.Settings.ForDriver(&d.spec)))
	}
	assessments = append(assessments, removals...)
	r.recordTransitions(&st, assessments)
	if err := r.writeStatus(ctx, &st, assessments, len(want), now); err != nil {
		return ctrl.Result{}, err
	}
	rolloutCollector.report(assessments)

	if deleting && !removing && nsDone {
		logger.Info("Every driver removed; releasing the DRAStack")
		return ctrl.Result{}, r.setFinalizer(ctx, &st, false)
	}
	if !deleting && len(want) == 0 && !removing && nsDone && controllerutil.ContainsFinalizer(&st, Finalizer) {
		return ctrl.Result{}, r.setFinalizer(ctx, &st, false)
	}
	return ctrl.Result{RequeueAfter: requeueAfter(assessments, removing || !nsDone)}, nil
}

// requeueAfter is when to look again without an event.
func requeueAfter(as []driver.Assessment, removing bool) time.Duration {
	if removing {
		return removalPoll
	}
	after := idlePoll
	for _, a := range as {
		if a.Progressing || a.Degraded || !a.Status.Ready {
			after = min(after, busyPoll)
		}
		if a.RecheckAfter > 0 {
			// A little late, so the judgement has changed when we look.
			after = min(after, a.RecheckAfter+time.Second)
		}
	}
	return after
}

// setFinalizer adds or removes the finalizer with an optimistic-lock patch
// on a fresh copy: the status this reconcile wrote changed the
// resourceVersion, and the finalizer list of another controller must not be
// overwritten.
func (r *Reconciler) setFinalizer(ctx context.Context, cached *v1alpha1.DRAStack, on bool) error {
	st := &v1alpha1.DRAStack{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(cached), st); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("get DRAStack %s: %w", cached.Name, err))
	}
	orig := st.DeepCopy()
	changed := false
	if on {
		changed = controllerutil.AddFinalizer(st, Finalizer)
	} else {
		changed = controllerutil.RemoveFinalizer(st, Finalizer)
	}
	if !changed {
		return nil
	}
	if err := r.Client.Patch(ctx, st, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("update finalizers of DRAStack %s: %w", st.Name, err))
	}
	return nil
}

// recordTransitions emits an Event when a driver's reason changes, so
// `kubectl describe drastack` tells its story: one Event per change, such
// as a single RolloutStalled Warning when a rollout passes its limit. The
// cached DRAStack may not show this controller's last status write yet,
// so a change is also compared with the last one emitted.
func (r *Reconciler) recordTransitions(st *v1alpha1.DRAStack, as []driver.Assessment) {
	if r.Recorder == nil {
		return
	}
	for _, a := range as {
		i := slices.IndexFunc(st.Status.Drivers, func(d v1alpha1.DriverStatus) bool { return d.Name == a.Status.Name })
		prevReason, prevPhase := "", ""
		if i >= 0 {
			prevReason = st.Status.Drivers[i].Reason
			if rm := st.Status.Drivers[i].Removal; rm != nil {
				prevPhase = rm.Phase
			}
		}
		phase := ""
		if a.Status.Removal != nil {
			phase = a.Status.Removal.Phase
		}
		if !r.transition(string(st.UID)+"/"+a.Status.Name, a.Status.Reason+"/"+phase, prevReason == a.Status.Reason && prevPhase == phase) {
			continue
		}
		eventType := corev1.EventTypeNormal
		if a.Degraded {
			eventType = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(st, nil, eventType, a.Status.Reason, "Driver", "%s", note.Shorten(fmt.Sprintf("driver %s: %s", a.Status.Name, a.Status.Message), maxNote))
	}
}

// transition records a driver's state and says whether it is a change to
// report: not when the stored status already shows it (unchanged), nor
// when an Event for it was the last one emitted.
func (r *Reconciler) transition(key, state string, unchanged bool) bool {
	r.emittedMu.Lock()
	defer r.emittedMu.Unlock()
	if r.emitted == nil {
		r.emitted = map[string]string{}
	}
	prev, known := r.emitted[key]
	r.emitted[key] = state
	return !unchanged && (!known || prev != state)
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// removalSince returns when the removal of a driver started, from the
// previous status, or zero for a new removal.
func removalSince(st *v1alpha1.DRAStack, name string) (time.Time, v1alpha1.RemovalPolicy) {
	for _, d := range st.Status.Drivers {
		if d.Name == name && d.Removal != nil {
			return d.Removal.Since.Time, d.Removal.Policy
		}
	}
	return time.Time{}, ""
}
