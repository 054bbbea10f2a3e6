package driver

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// failingWaitReasons are container waiting reasons that mean the container
// will not run without someone changing something: a wrong image, a crash,
// a bad configuration. Transient reasons (ContainerCreating,
// PodInitializing) are not failures.
var failingWaitReasons = []string{
	"ImagePullBackOff",
	"ErrImagePull",
	"ErrImageNeverPull",
	"InvalidImageName",
	"CrashLoopBackOff",
	"CreateContainerConfigError",
	"CreateContainerError",
	"RunContainerError",
}

// PodFailure is why one pod of a driver does not run.
type PodFailure struct {
	// Reason is the container waiting reason (CrashLoopBackOff, ...) or
	// PodFailed. An unschedulable pod is not a failure: it may fit once
	// a node frees resources, and a rollout that waits for it too long is
	// reported as stalled, with the scheduler's message.
	Reason string
	// Node is where the pod runs or was meant to run; empty for an
	// unscheduled controller pod.
	Node string
	// Pod and Container name what failed.
	Pod, Container string
}

// podFailure returns why a pod does not run, or nil while it runs or is
// still starting normally.
func podFailure(p *corev1.Pod) *PodFailure {
	f := &PodFailure{Node: podNode(p), Pod: p.Name}
	if p.Status.Phase == corev1.PodFailed {
		f.Reason = "PodFailed"
		return f
	}
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, cs := range list {
			if w := cs.State.Waiting; w != nil && slices.Contains(failingWaitReasons, w.Reason) {
				f.Reason, f.Container = w.Reason, cs.Name
				return f
			}
		}
	}
	return nil
}

// podNode is the node a pod runs on or, for a daemon pod the scheduler
// has not placed yet, the node the DaemonSet controller made it for (its
// required node affinity on metadata.name); empty when neither is known.
func podNode(p *corev1.Pod) string {
	if p.Spec.NodeName != "" {
		return p.Spec.NodeName
	}
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, f := range t.MatchFields {
			if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
				return f.Values[0]
			}
		}
	}
	return ""
}

// podWaiting says why a pod that is not ready waits, in the words of
// whoever holds it: the scheduler ("Unschedulable: 0/3 nodes are
// available: 3 Insufficient cpu.") or the kubelet (the container's waiting
// reason and message). Empty when neither says anything.
func podWaiting(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return oneLine(strings.TrimSpace(c.Reason + ": " + c.Message))
		}
	}
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, cs := range list {
			if w := cs.State.Waiting; w != nil && w.Reason != "" {
				if w.Message != "" {
					return oneLine(w.Reason + ": " + w.Message)
				}
				return w.Reason
			}
		}
	}
	if p.Status.Phase == corev1.PodPending {
		return "Pending"
	}
	return ""
}

// oneLine keeps a message to one line of at most 200 bytes.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return truncate(strings.TrimSuffix(s, ":"), 200)
}

// podReadySince returns when the pod became Ready, or false when it is
// not Ready.
func podReadySince(p *corev1.Pod) (time.Time, bool) {
	if p.DeletionTimestamp != nil {
		return time.Time{}, false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			if c.Status != corev1.ConditionTrue {
				return time.Time{}, false
			}
			t := c.LastTransitionTime.Time
			if t.IsZero() {
				t = p.CreationTimestamp.Time
			}
			return t, true
		}
	}
	return time.Time{}, false
}

// describeFailures groups failures by reason, each with the nodes (or
// pods) it hits: "CrashLoopBackOff on node kwok-node-1 (container
// plugin); ImagePullBackOff on nodes a, b". The first reason in
// failingWaitReasons order leads.
func describeFailures(fs []PodFailure) (reason, message string) {
	if len(fs) == 0 {
		return "", ""
	}
	byReason := map[string][]PodFailure{}
	var reasons []string
	for _, f := range fs {
		if _, ok := byReason[f.Reason]; !ok {
			reasons = append(reasons, f.Reason)
		}
		byReason[f.Reason] = append(byReason[f.Reason], f)
	}
	slices.SortFunc(reasons, func(a, b string) int { return reasonRank(a) - reasonRank(b) })
	parts := make([]string, 0, len(reasons))
	for _, r := range reasons {
		group := byReason[r]
		where := make([]string, 0, len(group))
		containers := map[string]bool{}
		for _, f := range group {
			if f.Node != "" {
				where = append(where, f.Node)
			} else {
				where = append(where, "pod "+f.Pod)
			}
			if f.Container != "" {
				containers[f.Container] = true
			}
		}
		slices.Sort(where)
		where = slices.Compact(where)
		noun := "node"
		if len(where) > 1 {
			noun = "nodes"
		}
		if strings.HasPrefix(where[0], "pod ") {
			noun = ""
		}
		part := fmt.Sprintf("%s on %s", r, strings.TrimSpace(noun+" "+listSome(where, 10)))
		if len(containers) > 0 {
			names := make([]string, 0, len(containers))
			for c := range containers {
				names = append(names, c)
			}
			slices.Sort(names)
			part += fmt.Sprintf(" (container %s)", strings.Join(names, ", "))
		}
		parts = append(parts, part)
	}
	return reasons[0], strings.Join(parts, "; ")
}

// reasonRank orders pod failure reasons: those in failingWaitReasons by
// their position, the others after them.
func reasonRank(r string) int {
	if i := slices.Index(failingWaitReasons, r); i >= 0 {
		return i
	}
	return len(failingWaitReasons)
}

// listSome joins at most max items and says how many more there are.
func listSome(items []string, max int) string {
	if len(items) <= max {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:max], ", "), len(items)-max)
}
