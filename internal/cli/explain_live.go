package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/allocator/explain"
	"github.com/drastack/drastack/internal/central"
	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/clusterprobe"
	"github.com/drastack/drastack/internal/handover"
	"github.com/drastack/drastack/internal/placement"
)

// liveState is what a live explanation reads from the API server.
type liveState struct {
	slices  []*resourceapi.ResourceSlice
	classes []*resourceapi.DeviceClass
	nodes   []*corev1.Node
	claims  []*resourceapi.ResourceClaim
	rules   []resourceapi.DeviceTaintRule
	// stack is the DRAStack, nil when there is none (or no CRD).
	stack *v1alpha1.DRAStack
}

// taintRuleVersions are the versions DeviceTaintRule is read in, newest
// first: 1.37 serves v1, 1.36 v1beta2 (same fields).
var taintRuleVersions = []string{"v1", "v1beta2"}

// readLive lists the cluster state an explanation needs.
func readLive(ctx context.Context, c client.Reader) (*liveState, error) {
	st := &liveState{}
	var sl resourceapi.ResourceSliceList
	if err := c.List(ctx, &sl); err != nil {
		return nil, fmt.Errorf("list ResourceSlices: %w", err)
	}
	for i := range sl.Items {
		st.slices = append(st.slices, &sl.Items[i])
	}
	var cl resourceapi.DeviceClassList
	if err := c.List(ctx, &cl); err != nil {
		return nil, fmt.Errorf("list DeviceClasses: %w", err)
	}
	for i := range cl.Items {
		st.classes = append(st.classes, &cl.Items[i])
	}
	var nl corev1.NodeList
	if err := c.List(ctx, &nl); err != nil {
		return nil, fmt.Errorf("list Nodes: %w", err)
	}
	for i := range nl.Items {
		st.nodes = append(st.nodes, &nl.Items[i])
	}
	var rl resourceapi.ResourceClaimList
	if err := c.List(ctx, &rl); err != nil {
		return nil, fmt.Errorf("list ResourceClaims: %w", err)
	}
	for i := range rl.Items {
		st.claims = append(st.claims, &rl.Items[i])
	}
	rules, err := readTaintRules(ctx, c)
	if err != nil {
		return nil, err
	}
	st.rules = rules
	var stack v1alpha1.DRAStack
	switch err := c.Get(ctx, client.ObjectKey{Name: v1alpha1.DRAStackName}, &stack); {
	case err == nil:
		st.stack = &stack
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err) || runtime.IsNotRegisteredError(err):
	default:
		return nil, fmt.Errorf("read DRAStack %s: %w", v1alpha1.DRAStackName, err)
	}
	return st, nil
}

// readTaintRules lists DeviceTaintRules in the newest version the cluster
// serves; none when it serves none.
func readTaintRules(ctx context.Context, c client.Reader) ([]resourceapi.DeviceTaintRule, error) {
	for _, v := range taintRuleVersions {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion(resourceapi.GroupName + "/" + v)
		list.SetKind("DeviceTaintRuleList")
		err := c.List(ctx, list)
		switch {
		case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, fmt.Errorf("list DeviceTaintRules (%s/%s): %w", resourceapi.GroupName, v, err)
		}
		out := make([]resourceapi.DeviceTaintRule, len(list.Items))
		for i := range list.Items {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, &out[i]); err != nil {
				return nil, fmt.Errorf("DeviceTaintRule %s (%s): %w", list.Items[i].GetName(), v, err)
			}
		}
		return out, nil
	}
	return nil, nil
}

// liveFeatures are the cluster's feature gates: those the operator probed
// (the DRAStack's status.cluster), else a probe of our own, else
// Kubernetes 1.37's defaults with a warning; --features applies on top.
func (a *App) liveFeatures(ctx context.Context, st *liveState, kubeconfig, kubeContext, spec string) (allocator.Features, string, error) {
	var (
		base   allocator.Features
		source string
	)
	if st.stack != nil {
		if f := claimpolicy.EngineFeatures(st.stack.Status.Cluster); f != nil {
			base, source = *f, "the DRAStack's cluster probe"
		}
	}
	if source == "" && a.Probe != nil {
		status, err := a.Probe(ctx, kubeconfig, kubeContext)
		if err == nil {
			if f := claimpolicy.EngineFeatures(status); f != nil {
				base, source = *f, "a probe of the cluster"
			}
		} else {
			fmt.Fprintf(a.Stderr, "warning: feature gates not probed (%v); assuming Kubernetes 1.37's defaults\n", err)
		}
	}
	if source == "" {
		base, source = allocator.Kubernetes137Features(), "Kubernetes 1.37's defaults"
	}
	f, err := allocator.ParseFeatures(base, spec)
	return f, source, err
}

// ProbeCluster probes the feature gates of the cluster a kubeconfig
// points at with package clusterprobe (discovery and dry-run writes).
func ProbeCluster(ctx context.Context, kubeconfig, kubeContext string) (*v1alpha1.ClusterStatus, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create client: %w", err)
	}
	return (&clusterprobe.Prober{Client: cs}).Probe(ctx)
}

// liveTarget is what is explained: a claim, or the claims of a pod.
type liveTarget struct {
	kind, namespace, name string
}

// explainLive explains a claim or a pod in the cluster's current state.
func (a *App) explainLive(ctx context.Context, t liveTarget, kubeconfig, kubeContext, featureSpec string, timeout time.Duration) (*ExplainOutput, error) {
	c, err := a.NewClient(kubeconfig, kubeContext)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	st, err := readLive(lctx, c)
	if err != nil {
		return nil, err
	}
	features, source, err := a.liveFeatures(lctx, st, kubeconfig, kubeContext, featureSpec)
	if err != nil {
		return nil, &usageError{msg: "--features: " + err.Error()}
	}
	out := &ExplainOutput{Engine: "native", Features: source, Explanations: []*explain.Report{}}

	var targets []*resourceapi.ResourceClaim
	var opts explain.Options
	opts.Timeout = timeout
	if t.kind == "pod" {
		var pod corev1.Pod
		if err := c.Get(lctx, client.ObjectKey{Namespace: t.namespace, Name: t.name}, &pod); err != nil {
			return nil, fmt.Errorf("read pod %s/%s: %w", t.namespace, t.name, err)
		}
		out.Pod = t.namespace + "/" + t.name
		targets, err = a.podClaims(lctx, c, &pod, st)
		if err != nil {
			return nil, err
		}
		if len(targets) == 0 {
			return nil, fmt.Errorf("pod %s/%s has no ResourceClaims (spec.resourceClaims): nothing to explain", t.namespace, t.name)
		}
		if pod.Spec.NodeName == "" {
			var pods corev1.PodList
			if err := c.List(lctx, &pods); err != nil {
				return nil, fmt.Errorf("list Pods: %w", err)
			}
			opts.NodeFilter = podNodeFilter(&pod, pods.Items, st.nodes, targets)
			opts.NodesTotal = len(st.nodes)
			// A member of a gang is placed with the gang: explain that too.
			if out.Gang, err = a.liveGang(ctx, c, &pod, st, features, timeout); err != nil {
				return nil, err
			}
		}
	} else {
		for _, cl := range st.claims {
			if cl.Namespace == t.namespace && cl.Name == t.name {
				targets = append(targets, cl)
			}
		}
		if len(targets) == 0 {
			return nil, fmt.Errorf("ResourceClaim %s/%s not found", t.namespace, t.name)
		}
	}

	var pending []*resourceapi.ResourceClaim
	for _, cl := range targets {
		if cl.Status.Allocation != nil {
			rep, err := explainOne(ctx, nil, nil, cl, nil, timeout, features)
			if err != nil {
				return nil, err
			}
			rep.Verdict += onNodes(cl.Status.Allocation.NodeSelector, st.nodes) + allocatedWhy(cl)
			out.Explanations = append(out.Explanations, rep)
		} else {
			pending = append(pending, cl)
		}
	}
	if len(pending) == 0 {
		return out, nil
	}
	for _, cl := range pending {
		if err := checkCELConstraintsAnnotation(cl); err != nil {
			out.Explanations = append(out.Explanations, &explain.Report{
				Claims: []string{allocator.ClaimKey(cl)}, Invalid: true, Reason: "invalid claim: " + err.Error(),
				Verdict: "invalid claim: " + err.Error(), Groups: []explain.NodeGroup{},
			})
			return out, nil
		}
	}
	in, engineClaims := engineView(st, pending, features)
	rep, err := explain.Explain(ctx, a.Engines[defaultEngine](), in, engineClaims, opts)
	if err != nil {
		return nil, err
	}
	if rep.Groups == nil {
		rep.Groups = []explain.NodeGroup{}
	}
	out.Explanations = append(out.Explanations, rep)
	return out, nil
}

// engineView builds the engine's inputs the way the claim controller does
// when a DRAStack is active: the DeviceTaintRules applied, devices the
// operator must not allocate tainted in the view only, and each claim
// passed through central.ForOperator (the operator's claims) or
// central.ForScheduler (kube-scheduler's). Without a DRAStack the
// DeviceTaintRules go to the engine as they are.
func engineView(st *liveState, pending []*resourceapi.ResourceClaim, features allocator.Features) (allocator.Inputs, []*resourceapi.ResourceClaim) {
	skip := map[*resourceapi.ResourceClaim]bool{}
	for _, c := range pending {
		skip[c] = true
	}
	in := allocator.Inputs{Classes: st.classes, Nodes: withSliceNodes(st.nodes, st.slices), Features: &features}
	for _, c := range st.claims {
		if c.Status.Allocation != nil && !skip[c] {
			in.Allocated = append(in.Allocated, c)
		}
	}
	cfg := claimpolicy.ConfigFrom(st.stack)
	var part *central.Partition
	if cfg.Active {
		var published []string
		for _, mh := range st.stack.Spec.MultiHost {
			published = append(published, mh.Driver)
		}
		p, err := central.NewPartition(central.Inputs{Entries: cfg.Central, Slices: st.slices, Nodes: st.nodes, Published: published})
		if err != nil {
			// The operator treats a bad selector the same way: no
			// device is central until the spec is fixed.
			p, _ = central.NewPartition(central.Inputs{Slices: st.slices, Nodes: st.nodes})
		}
		part = p
	}
	if part == nil {
		in.Slices, in.TaintRules = st.slices, st.rules
		return in, pending
	}
	// As the operator's engine: only joined pools are its (package handover).
	in.Slices = central.EngineView(part, st.slices, st.rules, handover.JoinedPools(part, st.rules))
	features.DeviceTaints = true
	out := make([]*resourceapi.ResourceClaim, 0, len(pending))
	for _, c := range pending {
		if claimpolicy.SelectClaim(cfg, c) != claimpolicy.WhyNone {
			out = append(out, central.ForOperator(c))
		} else {
			out = append(out, central.ForScheduler(c))
		}
	}
	return in, out
}

// podClaims resolves a pod's spec.resourceClaims to ResourceClaims. A
// claim kube-controller-manager has not created yet from its template is
// explained from the template (a warning says so).
func (a *App) podClaims(ctx context.Context, c client.Reader, pod *corev1.Pod, st *liveState) ([]*resourceapi.ResourceClaim, error) {
	var out []*resourceapi.ResourceClaim
	for _, pc := range claimpolicy.PodClaims(pod) {
		if pc.NotNeeded {
			continue
		}
		if pc.ClaimName != "" {
			i := slices.IndexFunc(st.claims, func(cl *resourceapi.ResourceClaim) bool {
				return cl.Namespace == pod.Namespace && cl.Name == pc.ClaimName
			})
			if i >= 0 {
				out = append(out, st.claims[i])
				continue
			}
			if pc.Template == "" {
				return nil, fmt.Errorf("pod %s/%s: spec.resourceClaims[%s] names ResourceClaim %s, which does not exist", pod.Namespace, pod.Name, pc.Name, pc.ClaimName)
			}
		}
		var tmpl resourceapi.ResourceClaimTemplate
		if err := c.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: pc.Template}, &tmpl); err != nil {
			return nil, fmt.Errorf("pod %s/%s: spec.resourceClaims[%s]: read ResourceClaimTemplate %s: %w", pod.Namespace, pod.Name, pc.Name, pc.Template, err)
		}
		name := pod.Name + "-" + pc.Name
		fmt.Fprintf(a.Stderr, "warning: pod %s/%s: the claim of spec.resourceClaims[%s] is not created yet; explained from ResourceClaimTemplate %s as %s\n",
			pod.Namespace, pod.Name, pc.Name, pc.Template, name)
		out = append(out, &resourceapi.ResourceClaim{
			ObjectMeta: tmpl.Spec.ObjectMeta,
			Spec:       *tmpl.Spec.Spec.DeepCopy(),
		})
		cl := out[len(out)-1]
		cl.Namespace, cl.Name, cl.UID = pod.Namespace, name, ""
	}
	return out, nil
}

// podNodeFilter returns the nodes a pending pod cannot run on, with the
// reason: kube-scheduler's node filters (package placement), and the
// nodes outside the node selector of a claim of the pod that is already
// allocated (the pod must run where its devices are).
func podNodeFilter(pod *corev1.Pod, pods []corev1.Pod, nodes []*corev1.Node, claims []*resourceapi.ResourceClaim) map[string]string {
	byNode := map[string][]*corev1.Pod{}
	for i := range pods {
		if n := pods[i].Spec.NodeName; n != "" {
			byNode[n] = append(byNode[n], &pods[i])
		}
	}
	_, reasons := placement.Candidates(pod, nodes, byNode)
	for _, cl := range claims {
		a := cl.Status.Allocation
		if a == nil || a.NodeSelector == nil {
			continue
		}
		sel, err := nodeaffinity.NewNodeSelector(a.NodeSelector)
		for _, n := range nodes {
			if _, out := reasons[n.Name]; out {
				continue
			}
			if err != nil || !sel.Match(n) {
				reasons[n.Name] = fmt.Sprintf("node(s) didn't match the node selector of allocated claim %s", allocator.ClaimKey(cl))
			}
		}
	}
	return reasons
}

// allocatedWhy says who wrote a claim's allocation (its field manager:
// kube-scheduler, or drastack-claims for the operator) and for whom it is
// reserved.
func allocatedWhy(c *resourceapi.ResourceClaim) string {
	out := ""
	if by := claimpolicy.AllocatedBy(c); by != "" {
		out += "; allocated by " + by
	}
	var users []string
	for _, r := range c.Status.ReservedFor {
		users = append(users, strings.ToLower(r.Resource)+"/"+r.Name)
	}
	if len(users) == 0 {
		return out + "; reserved for no consumer yet"
	}
	return out + "; reserved for " + strings.Join(users, ", ")
}

// onNodes names the nodes an allocation's node selector matches (none for
// an allocation usable from any node).
func onNodes(sel *corev1.NodeSelector, nodes []*corev1.Node) string {
	if sel == nil {
		return "; usable from any node"
	}
	s, err := nodeaffinity.NewNodeSelector(sel)
	if err != nil {
		return "; node selector: " + err.Error()
	}
	var names []string
	for _, n := range nodes {
		if s.Match(n) {
			names = append(names, n.Name)
		}
	}
	if len(names) == 0 {
		return "; on no existing node"
	}
	return "; on " + strings.Join(names, ", ")
}
