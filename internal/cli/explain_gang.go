package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/explain"
	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/gang"
)

// GangOutput is the gang of an explained pod: the declaration, the pods
// present, and the explanation of the members not placed yet
// (explain.ExplainGang), as the claim controller places them: all or
// none.
type GangOutput struct {
	// Gang is namespace/name; Source is PodGroup or Label.
	Gang   string `json:"gang"`
	Source string `json:"source"`
	// MinCount and Present: the gang waits until Present >= MinCount.
	MinCount int `json:"minCount"`
	Present  int `json:"present"`
	// Waiting says what the gang waits for before it can be placed (its
	// pods, its PodGroup); empty when it is explained.
	Waiting string `json:"waiting,omitempty"`
	// Verdict is one line: the gang's, or what it waits for.
	Verdict string `json:"verdict"`
	// Explanation of the members that are not placed (nil when the gang
	// waits or every member is placed).
	Explanation *explain.GangReport `json:"explanation,omitempty"`
}

// liveGang explains the gang of a pending pod; nil when the pod is in no
// gang.
func (a *App) liveGang(ctx context.Context, c client.Reader, pod *corev1.Pod, st *liveState, features allocator.Features, timeout time.Duration) (*GangOutput, error) {
	var pg *schedulingv1beta1.PodGroup
	if name, named := gang.PodGroupName(pod); named {
		var got schedulingv1beta1.PodGroup
		err := c.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: name}, &got)
		switch {
		case err == nil:
			pg = &got
		case apierrors.IsNotFound(err):
			return &GangOutput{Gang: pod.Namespace + "/" + name, Source: string(gang.SourcePodGroup), Waiting: "its PodGroup",
				Verdict: fmt.Sprintf("pod %s/%s names PodGroup %s, which does not exist: it waits for it", pod.Namespace, pod.Name, name)}, nil
		case meta.IsNoMatchError(err) || runtime.IsNotRegisteredError(err):
			// The Workload API is not served: the field means nothing.
			pod = pod.DeepCopy()
			pod.Spec.SchedulingGroup = nil
		default:
			return nil, fmt.Errorf("read PodGroup %s/%s: %w", pod.Namespace, name, err)
		}
	}
	spec, in, err := gang.Of(pod, pg)
	if err != nil {
		return &GangOutput{Verdict: "the pod's gang cannot be read: " + err.Error()}, nil
	}
	if !in {
		return nil, nil
	}
	out := &GangOutput{Gang: spec.Key(), Source: string(spec.Source), MinCount: spec.MinCount}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(pod.Namespace)); err != nil {
		return nil, fmt.Errorf("list Pods: %w", err)
	}
	var members []*corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if s, ok, err := gang.Of(p, pg); err == nil && ok && s.Key() == spec.Key() && s.Source == spec.Source {
			members = append(members, p)
		}
	}
	slices.SortFunc(members, func(x, y *corev1.Pod) int { return strings.Compare(x.Name, y.Name) })
	out.Present = len(members)
	if !spec.Ready(len(members)) {
		out.Waiting = "its pods"
		out.Verdict = fmt.Sprintf("gang %s has %d of its %d pods: none is placed before all are there", spec.Key(), len(members), spec.MinCount)
		return out, nil
	}
	for _, m := range members {
		if why := claimsNotReady(m, st.claims); why != "" && m.Spec.NodeName == "" {
			// The operator places no member before every member's claims
			// are there (gang.Next: WaitClaims).
			out.Waiting = "the claims of pod " + m.Name
			out.Verdict = fmt.Sprintf("gang %s waits for pod %s/%s: %s; none is placed before it is there", spec.Key(), m.Namespace, m.Name, why)
			return out, nil
		}
	}
	g := explain.Gang{Name: spec.Key(), Constraints: spec.Constraints}
	var pending []*resourceapi.ResourceClaim
	var owners []int
	for _, m := range members {
		if m.Spec.NodeName != "" {
			continue
		}
		claims, err := a.podClaims(ctx, c, m, st)
		if err != nil {
			return nil, err
		}
		var todo []*resourceapi.ResourceClaim
		for _, cl := range claims {
			if cl.Status.Allocation == nil {
				todo = append(todo, cl)
			}
		}
		if len(todo) == 0 {
			continue
		}
		g.Members = append(g.Members, explain.GangMember{Pod: m.Namespace + "/" + m.Name, NodeFilter: podNodeFilter(m, pods.Items, st.nodes, claims)})
		for range todo {
			owners = append(owners, len(g.Members)-1)
		}
		pending = append(pending, todo...)
	}
	if len(g.Members) == 0 {
		out.Verdict = fmt.Sprintf("gang %s: the claims of every member are allocated", spec.Key())
		return out, nil
	}
	inputs, engineClaims := engineView(st, pending, features)
	for i, cl := range engineClaims {
		m := &g.Members[owners[i]]
		m.Claims = append(m.Claims, cl)
	}
	rep, err := explain.ExplainGang(ctx, a.Engines[defaultEngine](), inputs, g, explain.Options{Timeout: timeout})
	if err != nil {
		return nil, err
	}
	out.Explanation = rep
	out.Verdict = rep.Verdict
	return out, nil
}

// claimsNotReady says which claim a pod names that does not exist (and
// no template makes) or is being deleted: the pod cannot start before it
// is created again. Empty when none.
func claimsNotReady(pod *corev1.Pod, claims []*resourceapi.ResourceClaim) string {
	for _, ref := range claimpolicy.PodClaims(pod) {
		if ref.NotNeeded || ref.ClaimName == "" {
			continue
		}
		i := slices.IndexFunc(claims, func(cl *resourceapi.ResourceClaim) bool {
			return cl.Namespace == pod.Namespace && cl.Name == ref.ClaimName
		})
		switch {
		case i < 0 && ref.Template == "":
			return "claim " + ref.ClaimName + " does not exist"
		case i >= 0 && claims[i].DeletionTimestamp != nil:
			return "claim " + ref.ClaimName + " is being deleted"
		}
	}
	return ""
}

// writeGangTable prints a pod's gang: the verdict, then each member that
// is not placed, where the gang goes or why the member alone does not fit.
func writeGangTable(w io.Writer, g *GangOutput) {
	if g.Gang != "" {
		fmt.Fprintf(w, "Gang %s (%s, %d of %d pods): %s\n", g.Gang, g.Source, g.Present, g.MinCount, g.Verdict)
	} else {
		fmt.Fprintf(w, "Gang: %s\n", g.Verdict)
	}
	if g.Explanation == nil {
		fmt.Fprintln(w)
		return
	}
	for _, m := range g.Explanation.Members {
		switch {
		case m.Node != "":
			fmt.Fprintf(w, "  pod %s: on %s: %s\n", m.Pod, m.Node, strings.Join(m.Devices, ", "))
		case m.Alone != nil:
			fmt.Fprintf(w, "  pod %s alone: %s\n", m.Pod, m.Alone.Verdict)
		default:
			fmt.Fprintf(w, "  pod %s: not explained alone (an earlier member is the obstacle)\n", m.Pod)
		}
	}
	if g.Explanation.StoppedEarly != "" {
		fmt.Fprintf(w, "  stopped early: %s\n", g.Explanation.StoppedEarly)
	}
	fmt.Fprintln(w)
}
