package driver

import (
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
)

var statusNow = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// world is a driver observed in a healthy state: two nodes, both running
// the current plugin for five minutes and publishing, its class present.
func world(t *testing.T, mutate ...func(*Observed)) Observed {
	t.Helper()
	r, err := Render(Input{Stack: "default", Namespace: "drastack-drivers", Driver: v1alpha1.DriverSpec{Name: "gpu.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	o := Observed{
		Now:             statusNow,
		Rendered:        r,
		DaemonSet:       daemonSet(2, 2, 2),
		CurrentRevision: "rev2",
		RevisionCreated: statusNow.Add(-10 * time.Minute),
		Pods:            []corev1.Pod{pluginPod("n1", "rev2", 5*time.Minute), pluginPod("n2", "rev2", 5*time.Minute)},
		PublishingNodes: map[string]bool{"n1": true, "n2": true},
		DeviceClasses:   []string{"gpu.example.com"},
		Cluster:         &v1alpha1.ClusterStatus{ResourceAPIVersions: []string{"v1", "v1beta2"}},
	}
	for _, m := range mutate {
		m(&o)
	}
	return o
}

func daemonSet(desired, updated, ready int32) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-example-com-kubelet-plugin", Generation: 3},
		Status: appsv1.DaemonSetStatus{
			ObservedGeneration: 3, DesiredNumberScheduled: desired, CurrentNumberScheduled: desired,
			UpdatedNumberScheduled: updated, NumberReady: ready, NumberAvailable: ready, NumberUnavailable: desired - ready,
		},
	}
}

// pluginPod is a plugin pod on node of revision rev, Ready for readyFor
// (not Ready when readyFor is negative).
func pluginPod(node, rev string, readyFor time.Duration) corev1.Pod {
	created := statusNow.Add(-readyFor - 5*time.Second)
	if readyFor < 0 {
		created = statusNow.Add(readyFor)
	}
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "plugin-" + node, CreationTimestamp: metav1.NewTime(created), Labels: map[string]string{
			LabelComponent: ComponentKubeletPlugin, appsv1.DefaultDaemonSetUniqueLabelKey: rev,
		}},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	ready := corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(created)}
	if readyFor >= 0 {
		ready.Status, ready.LastTransitionTime = corev1.ConditionTrue, metav1.NewTime(statusNow.Add(-readyFor))
	}
	p.Status.Conditions = []corev1.PodCondition{ready}
	return p
}

// pendingPod is a daemon pod made for node that the scheduler could not
// place for age, with its message.
func pendingPod(node, rev string, age time.Duration, msg string) corev1.Pod {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "plugin-" + node, CreationTimestamp: metav1.NewTime(statusNow.Add(-age)), Labels: map[string]string{
			LabelComponent: ComponentKubeletPlugin, appsv1.DefaultDaemonSetUniqueLabelKey: rev,
		}},
		Spec: corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}},
		}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg,
		}}},
	}
	return p
}

// failing makes the pod on node wait in a failing state.
func failing(o *Observed, node, reason string) {
	for i := range o.Pods {
		p := &o.Pods[i]
		if p.Spec.NodeName == node {
			p.Status.Conditions[0].Status = corev1.ConditionFalse
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "plugin", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}}
		}
	}
}

// TestAssess is the status of one driver as a specification: what was
// observed, and the reason, readiness, progress and degradation it means.
func TestAssess(t *testing.T) {
	tests := []struct {
		name                  string
		o                     func(*Observed)
		reason                string
		ready, prog, degraded bool
		mention               []string
	}{
		{name: "plugin ready and publishing on every node", o: func(*Observed) {},
			reason: ReasonReady, ready: true, mention: []string{"2/2 nodes ready, 2 publishing, v0.1.0"}},
		{name: "no node matches the selector: not ready, says so", o: func(o *Observed) {
			o.DaemonSet, o.Pods, o.PublishingNodes = daemonSet(0, 0, 0), nil, nil
			o.NodeFit = &NodeFit{Nodes: 3, Selector: "gpu=yes"}
		}, reason: ReasonNoMatchingNodes, mention: []string{"no node matches the plugin's node selector {gpu=yes} (3 nodes in the cluster)"}},
		{name: "no node targeted while nodes still publish the driver's slices", o: func(o *Observed) {
			o.DaemonSet, o.Pods = daemonSet(0, 0, 0), nil
			o.NodeFit = &NodeFit{Nodes: 2, Selected: 2, Affinity: "nvidia.com/gpu.present In (true)"}
		}, reason: ReasonNoMatchingNodes, mention: []string{"none of the 2 nodes satisfies the profile's required node affinity: nvidia.com/gpu.present In (true)",
			"2 nodes still publish ResourceSlices of the driver (n1, n2)"}},
		{name: "DaemonSet not created yet", o: func(o *Observed) { o.DaemonSet, o.Pods = nil, nil },
			reason: ReasonInstalling, prog: true, mention: []string{"does not exist yet"}},
		{name: "first install: pods starting", o: func(o *Observed) {
			o.DaemonSet = daemonSet(2, 2, 0)
			o.Pods = []corev1.Pod{pluginPod("n1", "rev2", -10*time.Second), pluginPod("n2", "rev2", -10*time.Second)}
			o.PublishingNodes = nil
		}, reason: ReasonInstalling, prog: true, mention: []string{"0/2 nodes have a running, ready plugin (0 available)"}},
		{name: "first install: slices left from an earlier install do not make it ready", o: func(o *Observed) {
			o.DaemonSet = daemonSet(2, 2, 0)
			o.RevisionNumber = 1
			o.Pods = []corev1.Pod{pluginPod("n1", "rev2", -10*time.Second), pluginPod("n2", "rev2", -10*time.Second)}
		}, reason: ReasonInstalling, prog: true, mention: []string{"0/2 nodes have a running, ready plugin"}},
		{name: "first install: a pod the scheduler cannot place names its node and the scheduler's reason", o: func(o *Observed) {
			o.DaemonSet = daemonSet(2, 2, 1)
			o.Pods = []corev1.Pod{pluginPod("n1", "rev2", 5*time.Minute), pendingPod("n2", "rev2", time.Minute, "0/2 nodes are available: 1 Insufficient cpu.")}
			o.PublishingNodes = map[string]bool{"n1": true}
		}, reason: ReasonInstalling, prog: true, mention: []string{"1/2 nodes have a running, ready plugin",
			"waiting on node n2 (Unschedulable: 0/2 nodes are available: 1 Insufficient cpu.)"}},
		{name: "an unschedulable plugin past the stall limit: RolloutStalled leads, still progressing", o: func(o *Observed) {
			o.DaemonSet = daemonSet(2, 2, 1)
			o.RevisionCreated = statusNow.Add(-10 * time.Minute)
			o.Pods = []corev1.Pod{pluginPod("n1", "rev2", 9*time.Minute), pendingPod("n2", "rev2", 6*time.Minute, "0/2 nodes are available: 1 Insufficient cpu.")}
			o.PublishingNodes = map[string]bool{"n1": true}
		}, reason: ReasonRolloutStalled, prog: true, degraded: true, mention: []string{"the rollout is stalled", "longer than the 5m0s limit",
			"node n2 (Unschedulable: 0/2 nodes are available: 1 Insufficient cpu.)"}},
		{name: "DaemonSet controller behind the spec of an upgrade; every node publishes", o: func(o *Observed) { o.DaemonSet.Generation = 4; o.RevisionNumber = 2 },
			reason: ReasonRollingOut, ready: true, prog: true},
		{name: "DaemonSet controller behind a new install", o: func(o *Observed) {
			o.DaemonSet = daemonSet(0, 0, 0)
			o.DaemonSet.Status.ObservedGeneration = 0
			o.Pods, o.CurrentRevision = nil, ""
		}, reason: ReasonInstalling, prog: true, mention: []string{"has not picked up the plugin"}},
		{name: "rollout under way", o: func(o *Observed) {
			o.DaemonSet = daemonSet(2, 1, 1)
			o.Pods = []corev1.Pod{pluginPod("n1", "rev2", -20*time.Second), pluginPod("n2", "rev1", time.Hour)}
			o.RevisionCreated = statusNow.Add(-30 * time.Second)
		}, reason: ReasonRollingOut, ready: true, prog: true, mention: []string{"0/2 nodes updated to v0.1.0", "every node still serves"}},
		{name: "rollout during which a node stops publishing: not ready", o: func(o *Observed) {
			o.DaemonSet = daemonSet(2, 1, 1)
			o.Pods = []corev1.Pod{pluginPod("n1", "rev2", -20*time.Second), pluginPod("n2", "rev1", time.Hour)}
			o.RevisionCreated = statusNow.Add(-30 * time.Second)
			o.PublishingNodes = map[string]bool{"n2": true}
		}, reason: ReasonRollingOut, prog: true, mention: []string{"0/2 nodes updated to v0.1.0", "waiting on node n1"}},
		{name: "an upgrade between a node's old pod going and its new one coming still serves", o: func(o *Observed) {
			o.DaemonSet = daemonSet(2, 0, 1)
			o.RevisionNumber = 2
			o.Pods = []corev1.Pod{pluginPod("n2", "rev1", time.Hour)}
			o.RevisionCreated = statusNow.Add(-5 * time.Second)
			o.NodeFit = &NodeFit{Fit: []string{"n1", "n2"}}
		}, reason: ReasonRollingOut, ready: true, prog: true, mention: []string{"0/2 nodes updated"}},
		{name: "an upgrade during which a targeted node stops publishing is not ready", o: func(o *Observed) {
			o.DaemonSet = daemonSet(2, 0, 1)
			o.RevisionNumber = 2
			o.Pods = []corev1.Pod{pluginPod("n2", "rev1", time.Hour)}
			o.RevisionCreated = statusNow.Add(-5 * time.Second)
			o.NodeFit = &NodeFit{Fit: []string{"n1", "n2"}}
			o.PublishingNodes = map[string]bool{"n2": true, "elsewhere": true}
		}, reason: ReasonRollingOut, prog: true},
		{name: "the tail of an upgrade (no old pod left) still serves", o: func(o *Observed) {
			o.DaemonSet = daemonSet(2, 2, 1)
			o.RevisionNumber = 2
			o.Pods = []corev1.Pod{pluginPod("n1", "rev2", -5*time.Second), pluginPod("n2", "rev2", time.Minute)}
			o.RevisionCreated = statusNow.Add(-2 * time.Minute)
		}, reason: ReasonRollingOut, ready: true, prog: true, mention: []string{"1/2 nodes updated"}},
		{name: "rollout with no progress for longer than the timeout", o: func(o *Observed) {
			o.DaemonSet = daemonSet(2, 1, 1)
			o.Pods = []corev1.Pod{pluginPod("n1", "rev2", -9*time.Minute), pluginPod("n2", "rev1", time.Hour)}
			o.RevisionCreated = statusNow.Add(-10 * time.Minute)
		}, reason: ReasonRolloutStalled, prog: true, degraded: true, mention: []string{"since 2026-11-22T11:51:00Z", "0/2 updated", "the rollout is stalled"}},
		{name: "a crash-looping plugin names its node", o: func(o *Observed) {
			o.DaemonSet = daemonSet(2, 2, 1)
			failing(o, "n2", "CrashLoopBackOff")
		}, reason: "CrashLoopBackOff", degraded: true, mention: []string{"CrashLoopBackOff on node n2 (container plugin)"}},
		{name: "a failing new pod during a rollout: degraded and still progressing", o: func(o *Observed) {
			o.DaemonSet = daemonSet(2, 1, 1)
			o.Pods = []corev1.Pod{pluginPod("n1", "rev2", -20*time.Second), pluginPod("n2", "rev1", time.Hour)}
			o.RevisionCreated = statusNow.Add(-30 * time.Second)
			failing(o, "n1", "ErrImagePull")
		}, reason: "ErrImagePull", prog: true, degraded: true, mention: []string{"ErrImagePull on node n1", "0/2 nodes updated"}},
		{name: "image pull failures on several nodes lead over a crash", o: func(o *Observed) {
			o.DaemonSet = daemonSet(2, 2, 0)
			failing(o, "n1", "ErrImagePull")
			failing(o, "n2", "ImagePullBackOff")
		}, reason: "ImagePullBackOff", degraded: true, mention: []string{"ImagePullBackOff on node n2", "ErrImagePull on node n1"}},
		{name: "running but not publishing after the grace period", o: func(o *Observed) { o.PublishingNodes = map[string]bool{"n1": true} },
			reason: ReasonNotPublishing, degraded: true, mention: []string{"publishes no ResourceSlices on node n2"}},
		{name: "just started: slices are awaited, not missing", o: func(o *Observed) {
			o.Pods = []corev1.Pod{pluginPod("n1", "rev2", 10*time.Second), pluginPod("n2", "rev2", 5*time.Minute)}
			o.PublishingNodes = map[string]bool{"n2": true}
		}, reason: ReasonWaitingForSlices, prog: true, mention: []string{"waiting for ResourceSlices from node n1"}},
		{name: "DeviceClass missing", o: func(o *Observed) { o.DeviceClasses = nil },
			reason: ReasonInstalling, prog: true, mention: []string{"DeviceClass gpu.example.com not present"}},
		{name: "a required feature the cluster lacks is a condition, not a failure", o: func(o *Observed) {
			o.Rendered.Requirements = append(o.Rendered.Requirements, Requirement{Feature: "partitionableDevices", Why: "spec.requiredFeatures"})
		}, reason: ReasonFeatureMissing, mention: []string{"partitionableDevices (spec.requiredFeatures)"}},
		{name: "requirements are not judged before the cluster is probed", o: func(o *Observed) {
			o.Rendered.Requirements = append(o.Rendered.Requirements, Requirement{Feature: "partitionableDevices"})
			o.Cluster = nil
		}, reason: ReasonReady, ready: true},
		{name: "resource.k8s.io/v1 not served", o: func(o *Observed) { o.Cluster.ResourceAPIVersions = []string{"v1beta1"} },
			reason: ReasonFeatureMissing, mention: []string{"resource.k8s.io/v1"}},
		{name: "a field owned by another manager is reported, not taken", o: func(o *Observed) {
			o.ApplyProblems = []ApplyProblem{{Object: "DaemonSet drastack-drivers/gpu-example-com-kubelet-plugin", Conflict: true, Message: `conflict with "kubectl"`}}
		}, reason: ReasonApplyConflict, degraded: true, mention: []string{`conflict with "kubectl"`}},
		{name: "a spec that cannot be rendered", o: func(o *Observed) { o.Rendered, o.RenderErr = nil, errors.New("image is required") },
			reason: ReasonInvalidSpec, degraded: true, mention: []string{"image is required"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := Assess("gpu.example.com", world(t, tc.o), Settings{})
			st := a.Status
			if st.Reason != tc.reason || st.Ready != tc.ready || a.Progressing != tc.prog || a.Degraded != tc.degraded {
				t.Errorf("reason %s ready %v progressing %v degraded %v, want %s %v %v %v\nmessage: %s",
					st.Reason, st.Ready, a.Progressing, a.Degraded, tc.reason, tc.ready, tc.prog, tc.degraded, st.Message)
			}
			for _, m := range tc.mention {
				if !strings.Contains(st.Message, m) {
					t.Errorf("message %q lacks %q", st.Message, m)
				}
			}
			if !a.Declared {
				t.Error("a declared driver is assessed as undeclared")
			}
		})
	}
}

func TestAssessCounts(t *testing.T) {
	o := world(t, func(o *Observed) {
		o.DaemonSet = daemonSet(3, 2, 1)
		o.PublishingNodes = map[string]bool{"n1": true, "n2": true, "n9": true}
	})
	st := Assess("gpu.example.com", o, Settings{}).Status
	if st.NodesDesired != 3 || st.NodesUpdated != 2 || st.NodesReady != 1 || st.NodesPublishing != 3 {
		t.Errorf("counts desired %d updated %d ready %d publishing %d, want 3 2 1 3", st.NodesDesired, st.NodesUpdated, st.NodesReady, st.NodesPublishing)
	}
	if st.Image != ExampleImage || st.Version != "v0.1.0" || len(st.DeviceClasses) != 1 {
		t.Errorf("image %s version %s classes %v", st.Image, st.Version, st.DeviceClasses)
	}
}

// TestAssessRecheck: time-based judgements say when they change, so the
// controller looks again then instead of polling.
func TestAssessRecheck(t *testing.T) {
	waiting := world(t, func(o *Observed) {
		o.Pods = []corev1.Pod{pluginPod("n1", "rev2", 15*time.Second), pluginPod("n2", "rev2", 5*time.Minute)}
		o.PublishingNodes = map[string]bool{"n2": true}
	})
	if got := Assess("d", waiting, Settings{PublishGrace: time.Minute}).RecheckAfter; got != 45*time.Second {
		t.Errorf("waiting for slices: recheck after %s, want 45s (the rest of the grace period)", got)
	}
	rolling := world(t, func(o *Observed) {
		o.DaemonSet = daemonSet(2, 1, 1)
		o.Pods = []corev1.Pod{pluginPod("n1", "rev2", 30*time.Second), pluginPod("n2", "rev1", time.Hour)}
		o.PublishingNodes = map[string]bool{"n1": true, "n2": true}
	})
	if got := Assess("d", rolling, Settings{RolloutTimeout: 2 * time.Minute}).RecheckAfter; got != 90*time.Second {
		t.Errorf("rolling out: recheck after %s, want 1m30s (until the rollout would count as stalled)", got)
	}
	if got := Assess("d", world(t), Settings{}).RecheckAfter; got != 0 {
		t.Errorf("a ready driver needs no recheck, got %s", got)
	}
}

func TestAssessControllers(t *testing.T) {
	r, err := Render(Input{Stack: "default", Namespace: "drastack-drivers", Driver: v1alpha1.DriverSpec{Name: NVIDIAGPUDriver, Profile: v1alpha1.DriverProfileNVIDIAGPU}})
	if err != nil {
		t.Fatal(err)
	}
	base := func(o *Observed) {
		o.Rendered = r
		o.DeviceClasses = r.DeviceClasses
	}
	one := int32(1)
	available := appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "gpu-nvidia-com-controller"}, Spec: appsv1.DeploymentSpec{Replicas: &one},
		Status: appsv1.DeploymentStatus{UpdatedReplicas: 1, AvailableReplicas: 1}}
	if a := Assess(NVIDIAGPUDriver, world(t, base, func(o *Observed) { o.Deployments = []appsv1.Deployment{available} }), Settings{}); !a.Status.Ready {
		t.Errorf("available controller: %s %s", a.Status.Reason, a.Status.Message)
	}
	if a := Assess(NVIDIAGPUDriver, world(t, base), Settings{}); a.Status.Reason != ReasonInstalling || !strings.Contains(a.Status.Message, "gpu-nvidia-com-controller") {
		t.Errorf("missing controller: %s %s", a.Status.Reason, a.Status.Message)
	}
	stuck := *available.DeepCopy()
	stuck.Status.AvailableReplicas = 0
	stuck.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded", Message: "ReplicaSet has timed out progressing"}}
	a := Assess(NVIDIAGPUDriver, world(t, base, func(o *Observed) { o.Deployments = []appsv1.Deployment{stuck} }), Settings{})
	if a.Status.Reason != ReasonRolloutStalled || !a.Degraded {
		t.Errorf("stuck controller: %s degraded=%v %s", a.Status.Reason, a.Degraded, a.Status.Message)
	}
}

// TestStackConditions: the three conditions name the driver and the cause.
func TestStackConditions(t *testing.T) {
	ready := Assess("gpu.example.com", world(t), Settings{})
	crashing := Assess("fpga.acme.io", world(t, func(o *Observed) {
		o.DaemonSet = daemonSet(2, 2, 1)
		failing(o, "n2", "CrashLoopBackOff")
	}), Settings{})
	removing := AssessRemoval("old.example.com", v1alpha1.DriverRemovalStatus{Phase: PhaseDeleting, Since: metav1.NewTime(statusNow)}, Observed{})

	tests := []struct {
		name string
		in   []Assessment
		want map[string][3]string // type -> status, reason, message fragment
	}{
		{"no drivers", nil, map[string][3]string{
			v1alpha1.ConditionDriversReady: {"True", ReasonNoDrivers, "no drivers"},
			v1alpha1.ConditionProgressing:  {"False", ReasonStable, ""},
			v1alpha1.ConditionDegraded:     {"False", ReasonAsExpected, ""},
		}},
		{"all ready", []Assessment{ready}, map[string][3]string{
			v1alpha1.ConditionDriversReady: {"True", ReasonAllDriversReady, "1/1 drivers ready"},
			v1alpha1.ConditionDegraded:     {"False", ReasonAsExpected, ""},
		}},
		{"one crashing", []Assessment{ready, crashing}, map[string][3]string{
			v1alpha1.ConditionDriversReady: {"False", "CrashLoopBackOff", "1/2 drivers ready; fpga.acme.io: CrashLoopBackOff on node n2"},
			v1alpha1.ConditionDegraded:     {"True", "CrashLoopBackOff", "fpga.acme.io: CrashLoopBackOff on node n2"},
		}},
		{"a removal is progress, and does not make the declared drivers unready", []Assessment{ready, removing}, map[string][3]string{
			v1alpha1.ConditionDriversReady: {"True", ReasonAllDriversReady, "1/1"},
			v1alpha1.ConditionProgressing:  {"True", ReasonRemoving, "old.example.com: removal deleting"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conds := StackConditions(tc.in, 7)
			if len(conds) != 3 {
				t.Fatalf("%d conditions, want DriversReady, Progressing, Degraded", len(conds))
			}
			for _, c := range conds {
				if c.ObservedGeneration != 7 {
					t.Errorf("%s observedGeneration %d", c.Type, c.ObservedGeneration)
				}
				want, ok := tc.want[c.Type]
				if !ok {
					continue
				}
				if string(c.Status) != want[0] || c.Reason != want[1] || !strings.Contains(c.Message, want[2]) {
					t.Errorf("%s = %s/%s %q, want %s/%s containing %q", c.Type, c.Status, c.Reason, c.Message, want[0], want[1], want[2])
				}
			}
		})
	}
}

func TestPodFailure(t *testing.T) {
	tests := []struct {
		name string
		st   corev1.PodStatus
		want string
	}{
		{"running", corev1.PodStatus{Phase: corev1.PodRunning}, ""},
		{"creating is not a failure", corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}}, ""},
		{"failing init container", corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{{Name: "init", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}}, "CrashLoopBackOff"},
		{"bad config", corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError"}}}}}, "CreateContainerConfigError"},
		{"failed pod", corev1.PodStatus{Phase: corev1.PodFailed}, "PodFailed"},
		{"unschedulable is waiting, not failing: it may fit later, and a rollout waiting too long is stalled", corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := podFailure(&corev1.Pod{Status: tc.st})
			got := ""
			if f != nil {
				got = f.Reason
			}
			if got != tc.want {
				t.Errorf("podFailure = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestAssessNVIDIAInstall: a driver whose profile refuses nodes is not
// Ready, and names them with what to do; one whose definitions are not
// established yet is Installing.
func TestAssessNVIDIAInstall(t *testing.T) {
	one := int32(1)
	available := appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "gpu-nvidia-com-controller"}, Spec: appsv1.DeploymentSpec{Replicas: &one},
		Status: appsv1.DeploymentStatus{UpdatedReplicas: 1, AvailableReplicas: 1}}
	render := func(nodes ...NodeFacts) func(*Observed) {
		r, err := Render(Input{Stack: "default", Namespace: "drastack-drivers", Nodes: nodes,
			Driver: v1alpha1.DriverSpec{Name: NVIDIAGPUDriver, Profile: v1alpha1.DriverProfileNVIDIAGPU}})
		if err != nil {
			t.Fatal(err)
		}
		return func(o *Observed) {
			o.Rendered, o.DeviceClasses = r, r.DeviceClasses
			o.Deployments = []appsv1.Deployment{available}
		}
	}
	gpu := map[string]string{"nvidia.com/gpu.present": "true"}
	tests := []struct {
		name     string
		o        []func(*Observed)
		reason   string
		ready    bool
		degraded bool
		mention  []string
	}{
		{name: "no device plugin anywhere: ready", o: []func(*Observed){render()}, reason: ReasonReady, ready: true},
		{name: "the device plugin serves GPUs on a GPU node: refused, not ready, named",
			o:      []func(*Observed){render(NodeFacts{Name: "gpu-7", Labels: gpu, Resources: []string{NVIDIADevicePluginResource}})},
			reason: ReasonDevicePluginConflict, degraded: true,
			mention: []string{"kept off node gpu-7", "NVIDIA's device plugin serves nvidia.com/gpu there", "nvidia.devicePluginNodes: Allow", "ComputeDomains plugin, in the same pod"}},
		{name: "the device plugin on a node the plugin would not run on anyway: nothing refused",
			o:      []func(*Observed){render(NodeFacts{Name: "cpu-1", Resources: []string{NVIDIADevicePluginResource}})},
			reason: ReasonReady, ready: true},
		{name: "definitions not established: installing",
			o:      []func(*Observed){render(), func(o *Observed) { o.PendingCRDs = []string{"computedomains.resource.nvidia.com"} }},
			reason: ReasonInstalling, mention: []string{"CustomResourceDefinition computedomains.resource.nvidia.com not established yet"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := Assess(NVIDIAGPUDriver, world(t, tc.o...), Settings{})
			if a.Status.Reason != tc.reason || a.Status.Ready != tc.ready || a.Degraded != tc.degraded {
				t.Errorf("reason %s ready %v degraded %v, want %s %v %v: %s", a.Status.Reason, a.Status.Ready, a.Degraded, tc.reason, tc.ready, tc.degraded, a.Status.Message)
			}
			for _, m := range tc.mention {
				if !strings.Contains(a.Status.Message, m) {
					t.Errorf("message %q lacks %q", a.Status.Message, m)
				}
			}
		})
	}
}
