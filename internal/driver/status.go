package driver

import (
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

// Reasons of a driver's status and of the DriversReady, Progressing and
// Degraded conditions. Pod failures use the container waiting reason
// itself (ImagePullBackOff, ErrImagePull, CrashLoopBackOff, ...).
const (
	ReasonReady            = "Ready"
	ReasonInstalling       = "Installing"
	ReasonRollingOut       = "RollingOut"
	ReasonWaitingForSlices = "WaitingForSlices"
	ReasonNotPublishing    = "NotPublishing"
	ReasonRolloutStalled   = "RolloutStalled"
	ReasonNoMatchingNodes  = "NoMatchingNodes"
	ReasonApplyConflict    = "ApplyConflict"
	ReasonApplyFailed      = "ApplyFailed"
	ReasonInvalidSpec      = "InvalidSpec"
	ReasonFeatureMissing   = "FeatureMissing"
	ReasonRemoving         = "Removing"
	// ReasonDevicePluginConflict: the profile keeps its plugin off nodes
	// where a device plugin hands out the same devices (see Refusal).
	ReasonDevicePluginConflict = "DevicePluginConflict"

	ReasonAllDriversReady = "AllDriversReady"
	ReasonNoDrivers       = "NoDrivers"
	ReasonStable          = "Stable"
	ReasonAsExpected      = "AsExpected"
)

// Defaults of Settings.
const (
	// DefaultPublishGrace is how long a ready plugin may publish nothing
	// before that is reported: plugins publish within seconds of starting,
	// a minute absorbs a slow API server.
	DefaultPublishGrace = time.Minute
	// DefaultRolloutTimeout is how long a rollout may go without a node
	// getting an updated, ready plugin before it is reported as stalled.
	DefaultRolloutTimeout = 5 * time.Minute
)

// Settings tune the time-based judgements of Assess.
type Settings struct {
	// PublishGrace: see DefaultPublishGrace (used when zero).
	PublishGrace time.Duration
	// RolloutTimeout: see DefaultRolloutTimeout (used when zero).
	RolloutTimeout time.Duration
}

// ForDriver returns the settings for one driver: its
// updateStrategy.progressDeadlineSeconds, when set, replaces RolloutTimeout.
func (s Settings) ForDriver(spec *v1alpha1.DriverSpec) Settings {
	if d := spec.UpdateStrategy.ProgressDeadlineSeconds; d != nil && *d > 0 {
		s.RolloutTimeout = time.Duration(*d) * time.Second
	}
	return s
}

func (s Settings) withDefaults() Settings {
	if s.PublishGrace <= 0 {
		s.PublishGrace = DefaultPublishGrace
	}
	if s.RolloutTimeout <= 0 {
		s.RolloutTimeout = DefaultRolloutTimeout
	}
	return s
}

// ApplyProblem is an object of a driver that could not be applied.
type ApplyProblem struct {
	// Object is "Kind name" or "Kind namespace/name".
	Object string
	// Conflict is true when another field manager owns fields the render
	// sets; the operator does not take them over.
	Conflict bool
	// Invalid is true when the API server refused the rendered object as
	// invalid: a spec error, whose Message starts with the field path.
	Invalid bool
	// Message is the API server's answer, shortened.
	Message string
}

// Observed is what the controller saw of one declared driver.
type Observed struct {
	// Now is the time of the observation.
	Now time.Time
	// Rendered is the render of the spec; nil when RenderErr is set.
	Rendered  *Rendered
	RenderErr error
	// ApplyProblems are the objects that failed to apply this time.
	ApplyProblems []ApplyProblem
	// DaemonSet is the kubelet-plugin DaemonSet; nil when not found.
	DaemonSet *appsv1.DaemonSet
	// CurrentRevision is the controller-revision-hash of the DaemonSet's
	// newest ControllerRevision, RevisionCreated when it was created (the
	// start of the current rollout). Empty when unknown.
	CurrentRevision string
	RevisionCreated time.Time
	// RevisionNumber is the newest ControllerRevision's number: above 1
	// the DaemonSet had an earlier template, so a rollout is an upgrade.
	RevisionNumber int64
	// NodeFit explains which nodes the plugin can run on; the controller
	// fills it when the DaemonSet targets no node or a rollout is under
	// way (NodeFit.Fit are then the nodes that must keep serving).
	NodeFit *NodeFit
	// Deployments are the driver's controller Deployments found.
	Deployments []appsv1.Deployment
	// Pods are the driver's pods, plugin and controller.
	Pods []corev1.Pod
	// PublishingNodes are the nodes with at least one ResourceSlice of one
	// of the driver's names.
	PublishingNodes map[string]bool
	// DeviceClasses are the driver's DeviceClasses present in the cluster.
	DeviceClasses []string
	// PendingCRDs are the driver's CustomResourceDefinitions not yet
	// established; its workloads are not applied until they are.
	PendingCRDs []string
	// Cluster is DRAStack status.cluster; nil before the first probe.
	Cluster *v1alpha1.ClusterStatus
}

// Assessment is a driver's status and how it counts for the conditions.
type Assessment struct {
	Status v1alpha1.DriverStatus
	// Progressing: installing, rolling out, waiting for slices or removing.
	Progressing bool
	// Degraded: something is broken that will not heal by waiting.
	Degraded bool
	// Declared is false for a driver being removed.
	Declared bool
	// RecheckAfter is when a time-based judgement (publish grace, rollout
	// timeout) changes next; zero when none is pending.
	RecheckAfter time.Duration
}

// problem is one reason a driver is not ready, or something it is doing.
type problem struct {
	reason, message string
	degraded        bool
	// serving: the driver still serves (an upgrade during which every node
	// keeps publishing), so the problem does not make it unready.
	serving bool
}

// Assess turns what was observed of a declared driver into its status.
func Assess(name string, o Observed, s Settings) Assessment {
	s = s.withDefaults()
	a := Assessment{Declared: true, Status: v1alpha1.DriverStatus{Name: name}}
	st := &a.Status
	st.DeviceClasses = sortedCopy(o.DeviceClasses)
	if o.RenderErr != nil || o.Rendered == nil {
		msg := "the driver cannot be rendered"
		if o.RenderErr != nil {
			msg = o.RenderErr.Error()
		}
		st.Reason, st.Message = ReasonInvalidSpec, msg
		a.Degraded = true
		fillNodeCounts(st, o)
		return a
	}
	r := o.Rendered
	st.Image, st.Version = r.Image, r.Version
	fillNodeCounts(st, o)

	var problems []problem
	add := func(reason, message string, degraded bool) {
		problems = append(problems, problem{reason: reason, message: message, degraded: degraded})
	}
	addServing := func(reason, message string) {
		problems = append(problems, problem{reason: reason, message: message, serving: true})
	}
	recheck := func(d time.Duration) {
		if d > 0 && (a.RecheckAfter == 0 || d < a.RecheckAfter) {
			a.RecheckAfter = d
		}
	}

	if len(o.ApplyProblems) > 0 {
		reason := ReasonApplyFailed
		var invalid []string
		// Objects that failed for the same reason (every object someone
		// else made first) are named together, the reason said once.
		var messages []string
		objects := map[string][]string{}
		for _, p := range o.ApplyProblems {
			switch {
			case p.Invalid:
				invalid = append(invalid, p.Message)
				continue
			case p.Conflict:
				reason = ReasonApplyConflict
			}
			if _, seen := objects[p.Message]; !seen {
				messages = append(messages, p.Message)
			}
			objects[p.Message] = append(objects[p.Message], p.Object)
		}
		parts := make([]string, 0, len(messages))
		for _, m := range messages {
			parts = append(parts, fmt.Sprintf("%s: %s", listSome(objects[m], maxObjectsListed), m))
		}
		// A spec error leads, so that SpecValid can quote the message.
		if len(invalid) > 0 {
			add(ReasonInvalidSpec, strings.Join(invalid, "; "), true)
		}
		if len(parts) > 0 {
			add(reason, strings.Join(parts, "; "), true)
		}
	}

	var failures []PodFailure
	for i := range o.Pods {
		if f := podFailure(&o.Pods[i]); f != nil {
			failures = append(failures, *f)
		}
	}
	if reason, msg := describeFailures(failures); reason != "" {
		add(reason, msg, true)
	}

	if len(o.PendingCRDs) > 0 {
		add(ReasonInstalling, fmt.Sprintf("%s %s not established yet; the workloads wait for %s", plural(len(o.PendingCRDs), "CustomResourceDefinition", "CustomResourceDefinitions"),
			strings.Join(o.PendingCRDs, ", "), plural(len(o.PendingCRDs), "it", "them")), false)
	}
	if rf := r.Refusal; rf != nil && len(rf.Nodes) > 0 {
		add(ReasonDevicePluginConflict, fmt.Sprintf("the kubelet plugin is kept off %s %s: %s; %s",
			plural(len(rf.Nodes), "node", "nodes"), listSome(rf.Nodes, 10), rf.Why, rf.Remedy), true)
	}
	assessRollout(o, s, failures, add, addServing, recheck)
	assessControllers(o, r, add)
	assessPublishing(o, s, add, recheck)

	if missing := missingClasses(r.DeviceClasses, o.DeviceClasses, o.ApplyProblems); len(missing) > 0 {
		add(ReasonInstalling, "DeviceClass "+strings.Join(missing, ", ")+" not present yet", false)
	}
	if missing, known := MissingRequirements(r.Requirements, o.Cluster); known && len(missing) > 0 {
		add(ReasonFeatureMissing, "the cluster does not serve "+describeRequirements(missing), false)
	}

	if len(problems) == 0 {
		st.Ready, st.Reason = true, ReasonReady
		st.Message = readyMessage(st)
		return a
	}
	st.Ready = !slices.ContainsFunc(problems, func(p problem) bool { return !p.serving })
	// Failures lead: they need a person, the rest needs time.
	slices.SortStableFunc(problems, func(x, y problem) int { return boolRank(y.degraded) - boolRank(x.degraded) })
	st.Reason = problems[0].reason
	msgs := make([]string, len(problems))
	for i, p := range problems {
		msgs[i] = p.message
		a.Degraded = a.Degraded || p.degraded
		switch p.reason {
		case ReasonInstalling, ReasonRollingOut, ReasonWaitingForSlices:
			a.Progressing = true
		}
	}
	st.Message = strings.Join(slices.Compact(msgs), "; ")
	if st.Ready {
		st.Message += "; every node still serves (" + readyMessage(st) + ")"
	}
	return a
}

// fillNodeCounts copies the DaemonSet's counts and counts publishing nodes.
func fillNodeCounts(st *v1alpha1.DriverStatus, o Observed) {
	if ds := o.DaemonSet; ds != nil {
		st.NodesDesired = ds.Status.DesiredNumberScheduled
		st.NodesReady = ds.Status.NumberReady
	}
	st.NodesUpdated = int32(len(updatedNodes(o)))
	st.NodesPublishing = int32(len(o.PublishingNodes))
}

// assessRollout reports an absent, empty, rolling, starting or stalled
// kubelet-plugin DaemonSet. failures were reported already: they explain
// the nodes whose current plugin does not run.
func assessRollout(o Observed, s Settings, failures []PodFailure, add func(string, string, bool), addServing func(string, string), recheck func(time.Duration)) {
	ds := o.DaemonSet
	if ds == nil {
		add(ReasonInstalling, "the kubelet-plugin DaemonSet does not exist yet", false)
		return
	}
	desired := ds.Status.DesiredNumberScheduled
	upgrade := o.RevisionNumber > 1 || oldPluginPods(o) > 0
	serving := upgrade && len(failures) == 0 && desired > 0 && servingNodes(o) >= int(desired)
	if ds.Status.ObservedGeneration < ds.Generation {
		switch {
		case serving:
			addServing(ReasonRollingOut, "the DaemonSet controller has not seen the new plugin spec yet")
		case upgrade:
			add(ReasonRollingOut, "the DaemonSet controller has not seen the new plugin spec yet", false)
		default:
			add(ReasonInstalling, "the DaemonSet controller has not picked up the plugin yet", false)
		}
		return
	}
	if desired == 0 {
		add(ReasonNoMatchingNodes, noNodesMessage(o), false)
		return
	}
	updated := updatedNodes(o)
	failed := map[string]bool{}
	for _, f := range failures {
		if f.Node != "" {
			failed[f.Node] = true
		}
	}
	explained := len(updated)
	for node := range failed {
		if !updated[node] {
			explained++
		}
	}
	available := ds.Status.NumberAvailable
	if explained >= int(desired) && (available >= desired || len(failures) > 0) {
		return
	}
	reason, msg := ReasonInstalling, fmt.Sprintf("%d/%d nodes have a running, ready plugin (%d available)", len(updated), desired, available)
	if upgrade {
		reason, msg = ReasonRollingOut, fmt.Sprintf("%d/%d nodes updated to %s, %d ready", len(updated), desired, o.Rendered.Version, ds.Status.NumberReady)
	}
	if waits := waitingNodes(o, updated, failed); waits != "" {
		msg += "; " + waits
	}
	if serving {
		addServing(reason, msg)
	} else {
		add(reason, msg, false)
	}
	// The message gives the time of the last progress, not how long ago it
	// was: status text that changes on every look would rewrite status on
	// every reconcile.
	last := lastRolloutProgress(o)
	if last.IsZero() {
		return
	}
	if idle := o.Now.Sub(last); idle >= s.RolloutTimeout {
		add(ReasonRolloutStalled, fmt.Sprintf("the rollout is stalled: no node got an updated, ready plugin since %s, longer than the %s limit (%d/%d updated, %d available)",
			last.UTC().Format(time.RFC3339), s.RolloutTimeout, len(updated), desired, available), true)
	} else {
		recheck(s.RolloutTimeout - idle)
	}
}

// updatedNodes are the nodes with a plugin pod of the current revision
// that runs and is ready. Without a known revision none is.
func updatedNodes(o Observed) map[string]bool {
	out := map[string]bool{}
	if o.CurrentRevision == "" {
		return out
	}
	for i := range o.Pods {
		p := &o.Pods[i]
		if p.Labels[LabelComponent] != ComponentKubeletPlugin || p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] != o.CurrentRevision ||
			p.Status.Phase != corev1.PodRunning || p.Spec.NodeName == "" {
			continue
		}
		if _, ready := podReadySince(p); ready {
			out[p.Spec.NodeName] = true
		}
	}
	return out
}

// servingNodes counts the nodes the plugin targets that publish
// ResourceSlices: during an upgrade they keep serving claims, also in the
// moment between a node's old plugin pod going and its new one coming.
// Without NodeFit the targeted nodes are those with a plugin pod.
func servingNodes(o Observed) int {
	if o.NodeFit != nil && len(o.NodeFit.Fit) > 0 {
		n := 0
		for _, node := range o.NodeFit.Fit {
			if o.PublishingNodes[node] {
				n++
			}
		}
		return n
	}
	nodes := map[string]bool{}
	for i := range o.Pods {
		p := &o.Pods[i]
		if n := podNode(p); p.Labels[LabelComponent] == ComponentKubeletPlugin && n != "" && o.PublishingNodes[n] {
			nodes[n] = true
		}
	}
	return len(nodes)
}

// waitingNodes names the nodes whose current plugin does not run yet,
// with what the scheduler or the kubelet says, at most five:
// "waiting on node n1 (Unschedulable: 0/2 nodes are available: ...)".
func waitingNodes(o Observed, updated, failed map[string]bool) string {
	var parts []string
	seen := map[string]bool{}
	for i := range o.Pods {
		p := &o.Pods[i]
		node := podNode(p)
		if p.Labels[LabelComponent] != ComponentKubeletPlugin || p.DeletionTimestamp != nil || node == "" || updated[node] || failed[node] || seen[node] ||
			(o.CurrentRevision != "" && p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] != o.CurrentRevision) {
			continue
		}
		seen[node] = true
		part := "node " + node
		if why := podWaiting(p); why != "" {
			part += " (" + why + ")"
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		return ""
	}
	slices.Sort(parts)
	return "waiting on " + listSome(parts, 5)
}

// noNodesMessage says why the plugin targets no node, and whether nodes
// still publish slices of the driver from an earlier placement.
func noNodesMessage(o Observed) string {
	msg := "the plugin targets no node"
	if o.NodeFit != nil {
		msg = o.NodeFit.Message()
	}
	if n := len(o.PublishingNodes); n > 0 {
		nodes := make([]string, 0, n)
		for node := range o.PublishingNodes {
			nodes = append(nodes, node)
		}
		slices.Sort(nodes)
		msg += fmt.Sprintf("; %d %s still publish ResourceSlices of the driver (%s) without a plugin the operator runs", n, plural(n, "node", "nodes"), listSome(nodes, 5))
	}
	return msg
}

// oldPluginPods counts plugin pods of an older revision than the current one.
func oldPluginPods(o Observed) int {
	if o.CurrentRevision == "" {
		return 0
	}
	n := 0
	for i := range o.Pods {
		p := &o.Pods[i]
		if p.Labels[LabelComponent] == ComponentKubeletPlugin && p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] != o.CurrentRevision {
			n++
		}
	}
	return n
}

// lastRolloutProgress is the last time the rollout moved: the start of the
// current revision, or a later creation or readiness of one of its pods.
func lastRolloutProgress(o Observed) time.Time {
	last := o.RevisionCreated
	for i := range o.Pods {
		p := &o.Pods[i]
		if p.Labels[LabelComponent] != ComponentKubeletPlugin {
			continue
		}
		if o.CurrentRevision != "" && p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] != o.CurrentRevision {
			continue
		}
		if t := p.CreationTimestamp.Time; t.After(last) {
			last = t
		}
		if t, ok := podReadySince(p); ok && t.After(last) {
			last = t
		}
	}
	return last
}

// assessControllers reports controller Deployments that are missing or
// not available.
func assessControllers(o Observed, r *Rendered, add func(string, string, bool)) {
	for _, name := range r.Controllers {
		i := slices.IndexFunc(o.Deployments, func(d appsv1.Deployment) bool { return d.Name == name })
		if i < 0 {
			add(ReasonInstalling, fmt.Sprintf("controller Deployment %s does not exist yet", name), false)
			continue
		}
		d := &o.Deployments[i]
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		for _, c := range d.Status.Conditions {
			if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded" {
				add(ReasonRolloutStalled, fmt.Sprintf("controller %s: %s", name, c.Message), true)
			}
		}
		if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas < want || d.Status.AvailableReplicas < want {
			add(ReasonRollingOut, fmt.Sprintf("controller %s: %d/%d replicas available", name, d.Status.AvailableReplicas, want), false)
		}
	}
}

// assessPublishing compares the nodes that run a ready plugin with the
// nodes that publish ResourceSlices: a plugin that runs but publishes
// nothing is reported once it had PublishGrace to do so.
func assessPublishing(o Observed, s Settings, add func(string, string, bool), recheck func(time.Duration)) {
	var late, waiting []string
	var soonest time.Duration
	for i := range o.Pods {
		p := &o.Pods[i]
		if p.Labels[LabelComponent] != ComponentKubeletPlugin || p.Spec.NodeName == "" || o.PublishingNodes[p.Spec.NodeName] {
			continue
		}
		since, ready := podReadySince(p)
		if !ready {
			continue
		}
		if waited := o.Now.Sub(since); waited >= s.PublishGrace {
			late = append(late, p.Spec.NodeName)
		} else {
			waiting = append(waiting, p.Spec.NodeName)
			if left := s.PublishGrace - waited; soonest == 0 || left < soonest {
				soonest = left
			}
		}
	}
	slices.Sort(late)
	slices.Sort(waiting)
	if len(late) > 0 {
		add(ReasonNotPublishing, fmt.Sprintf("the plugin runs but publishes no ResourceSlices on %s %s",
			plural(len(late), "node", "nodes"), listSome(slices.Compact(late), 10)), true)
	}
	if len(waiting) > 0 {
		add(ReasonWaitingForSlices, fmt.Sprintf("waiting for ResourceSlices from %s %s",
			plural(len(waiting), "node", "nodes"), listSome(slices.Compact(waiting), 10)), false)
		recheck(soonest)
	}
}

// missingClasses are the rendered DeviceClasses not present yet. A class
// that failed to apply is left out: its problem says why (a class of the
// same name that someone else owns is present, just not the driver's).
func missingClasses(want, have []string, failed []ApplyProblem) []string {
	var missing []string
	for _, w := range want {
		if slices.ContainsFunc(failed, func(p ApplyProblem) bool { return p.Object == "DeviceClass "+w }) {
			continue
		}
		if !slices.Contains(have, w) {
			missing = append(missing, w)
		}
	}
	return missing
}

func readyMessage(st *v1alpha1.DriverStatus) string {
	return fmt.Sprintf("%d/%d nodes ready, %d publishing, %s", st.NodesReady, st.NodesDesired, st.NodesPublishing, st.Version)
}

// AssessRemoval is the status of a driver being removed. removal.since
// says for how long; the message does not, so that it stays the same from
// one look to the next.
func AssessRemoval(name string, removal v1alpha1.DriverRemovalStatus, o Observed) Assessment {
	st := v1alpha1.DriverStatus{Name: name, Reason: ReasonRemoving, Removal: &removal}
	if o.Rendered != nil {
		st.Image, st.Version = o.Rendered.Image, o.Rendered.Version
	}
	st.DeviceClasses = sortedCopy(o.DeviceClasses)
	fillNodeCounts(&st, o)
	since := removal.Since.UTC().Format(time.RFC3339)
	switch removal.Phase {
	case PhaseDraining:
		var waits []string
		if n := int(removal.BlockingClaimCount); n > 0 {
			waits = append(waits, fmt.Sprintf("%d allocated %s using the driver's devices (%s)", n, plural(n, "claim", "claims"), listSome(removal.BlockingClaims, 5)))
		}
		if n := int(removal.BlockingResourceCount); n > 0 {
			waits = append(waits, fmt.Sprintf("%d custom %s of its definitions to be deleted (%s)", n, plural(n, "resource", "resources"), listSome(removal.BlockingResources, 5)))
		}
		st.Message = fmt.Sprintf("removal waits for %s; removing since %s", strings.Join(waits, " and "), since)
	default:
		st.Message = fmt.Sprintf("removal %s; removing since %s", strings.ToLower(removal.Phase), since)
	}
	return Assessment{Status: st, Progressing: true}
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func sortedCopy(in []string) []string {
	if len(in) == 0 {
		return nil
	}
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out)
}

// maxObjectsListed bounds the objects one apply problem names.
const maxObjectsListed = 10
