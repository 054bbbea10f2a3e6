package claims

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/drastack/drastack/internal/allocator"
	"github.com/drastack/drastack/internal/claimpolicy"
	"github.com/drastack/drastack/internal/gang"
	"github.com/drastack/drastack/internal/placement"
)

// gangPlacements counts the gang placements by result.
var gangPlacements = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "drastack_gang_placements_total",
	Help: "Placements of gangs (all members' operator claims in one search) by engine and result (Allocated, Unsatisfiable, SearchBoundExceeded, Invalid, NotSupported, Error).",
}, []string{"engine", "result"})

var registerGangOnce sync.Once

// gangState is what the placement loop keeps about gangs: whether the
// cluster serves PodGroups, one lock per gang (its members' reconciles
// take turns, so one of them writes the unit while the others wait), and
// the node chosen for each member until its gate is lifted (the pin of a
// member whose devices do not pin it). Safe for concurrent use.
type gangState struct {
	// podGroups: the cluster serves scheduling.k8s.io/v1beta1 PodGroups.
	podGroups bool

	mu    sync.Mutex
	locks map[string]*gangLock
	nodes map[types.NamespacedName]chosenNode
}

type gangLock struct {
	mu    sync.Mutex
	users int
}

type chosenNode struct {
	uid  types.UID
	node string
}

func newGangState() *gangState {
	registerGangOnce.Do(func() { ctrlmetrics.Registry.MustRegister(gangPlacements) })
	return &gangState{locks: map[string]*gangLock{}, nodes: map[types.NamespacedName]chosenNode{}}
}

// lock takes the gang's lock and returns its release.
func (s *gangState) lock(unit string) func() {
	s.mu.Lock()
	l := s.locks[unit]
	if l == nil {
		l = &gangLock{}
		s.locks[unit] = l
	}
	l.users++
	s.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		s.mu.Lock()
		defer s.mu.Unlock()
		if l.users--; l.users == 0 {
			delete(s.locks, unit)
		}
	}
}

// placed records the node chosen for a member.
func (s *gangState) placed(pod *corev1.Pod, node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes[types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}] = chosenNode{uid: pod.UID, node: node}
}

// nodeOf is the node chosen for a member ("" when none is known: this
// process did not place it).
func (s *gangState) nodeOf(pod *corev1.Pod) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.nodes[types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}]; ok && c.uid == pod.UID {
		return c.node
	}
	return ""
}

// forget drops a pod that was bound, deleted or had its gate lifted.
func (s *gangState) forget(key types.NamespacedName) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.nodes, key)
}

// size is how many pods and locks it holds (for tests of flat state).
func (s *gangState) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.nodes) + len(s.locks)
}

// gangDecl is a pod's gang as declared: its spec and, for a PodGroup's
// gang, the PodGroup. A pod that names a PodGroup that does not exist yet
// has an empty spec and waitFor set.
type gangDecl struct {
	spec    gang.Spec
	pg      *schedulingv1beta1.PodGroup
	waitFor string
}

// declarationError is a gang declaration that cannot be used
// (gang.FieldError).
func isDeclarationError(err error) bool {
	var fe *gang.FieldError
	return errors.As(err, &fe)
}

// gangOf reads the gang of a pod: from its PodGroup when the cluster
// serves the Workload API and the pod names one, else from the drastack
// label. in is false for a pod in no gang.
func (p *placementReconciler) gangOf(ctx context.Context, pod *corev1.Pod) (gangDecl, bool, error) {
	var decl gangDecl
	name, named := gang.PodGroupName(pod)
	if named && !p.r.gangs.podGroups {
		// Only an API server with the Workload API keeps the field; read
		// the pod as if it named none.
		pod = pod.DeepCopy()
		pod.Spec.SchedulingGroup = nil
		named = false
	}
	if named {
		var pg schedulingv1beta1.PodGroup
		err := p.r.Client.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: name}, &pg)
		switch {
		case apierrors.IsNotFound(err):
			// kube-scheduler waits for a pod's PodGroup to exist, and so
			// does the operator: only the PodGroup says whether the pod
			// may be placed alone.
			decl.waitFor = pod.Namespace + "/" + name
			return decl, true, nil
		case err != nil:
			return decl, false, fmt.Errorf("read PodGroup %s/%s of pod %s: %w", pod.Namespace, name, pod.Name, err)
		}
		decl.pg = &pg
	}
	spec, ok, err := gang.Of(pod, decl.pg)
	if err != nil {
		return decl, true, err
	}
	decl.spec = spec
	return decl, ok, nil
}

// gangMembers lists the pods of the gang that are not terminated or being
// deleted, sorted by name, with their claims as members of the gang's
// unit.
func (p *placementReconciler) gangMembers(ctx context.Context, cfg claimpolicy.Config, decl gangDecl) ([]*gangMember, error) {
	r := p.r
	opts := []client.ListOption{client.InNamespace(decl.spec.Namespace)}
	if decl.spec.Source == gang.SourceLabel {
		opts = append(opts, client.MatchingLabels{gang.LabelName: decl.spec.Name})
	}
	var pods corev1.PodList
	if err := r.podCache.List(ctx, &pods, opts...); err != nil {
		return nil, fmt.Errorf("list the pods of gang %s: %w", decl.spec.Key(), err)
	}
	unit := gangUnit(decl.spec)
	var out []*gangMember
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		name, named := gang.PodGroupName(pod)
		switch {
		case decl.spec.Source == gang.SourcePodGroup && (!named || name != decl.spec.Name):
			continue
		case decl.spec.Source == gang.SourceLabel && (pod.Labels[gang.LabelName] != decl.spec.Name || (named && r.gangs.podGroups)):
			// Not labelled for the gang, or its PodGroup decides its gang.
			continue
		}
		m, err := p.gangMemberOf(ctx, cfg, pod, unit)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *gangMember) int { return strings.Compare(a.pod.Name, b.pod.Name) })
	return out, nil
}

// gangView is the cluster as a gang's placement reads it: every node, the
// pods that count against each, and the domain the members already
// running fix.
type gangView struct {
	nodes  map[string]*corev1.Node
	all    []*corev1.Node
	byNode map[string][]*corev1.Pod
	total  int
	// domain: node label values the running members fix; domainErr when
	// they disagree.
	domain    map[string]string
	domainErr error
}

// gangNodes reads the nodes and pods once for all members.
func (p *placementReconciler) gangNodes(ctx context.Context, decl gangDecl, members []*gangMember) (*gangView, error) {
	var nodes corev1.NodeList
	if err := p.r.Client.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	var pods corev1.PodList
	if err := p.r.podCache.List(ctx, &pods, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	v := &gangView{nodes: map[string]*corev1.Node{}, byNode: map[string][]*corev1.Pod{}, total: len(nodes.Items)}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		v.nodes[n.Name] = n
		v.all = append(v.all, n)
	}
	for i := range pods.Items {
		if n := pods.Items[i].Spec.NodeName; n != "" {
			v.byNode[n] = append(v.byNode[n], &pods.Items[i])
		}
	}
	running := map[string]map[string]string{}
	for _, m := range members {
		if m.pod.Spec.NodeName == "" {
			continue
		}
		labels := map[string]string{}
		if n := v.nodes[m.pod.Spec.NodeName]; n != nil {
			labels = n.Labels
		}
		running[m.pod.Spec.NodeName] = labels
	}
	v.domain, v.domainErr = gang.Domain(decl.spec, running)
	return v, nil
}

// candidates are the nodes a member fits (placement.Candidates), that suit
// its allocated claims and lie in the gang's domain, the nodes
// kube-scheduler turned down last; and the reasons of the others.
func (v *gangView) candidates(m *gangMember, avoid map[string]bool) ([]*corev1.Node, map[string]string) {
	fit, reasons := placement.Candidates(m.pod, v.all, v.byNode)
	out := fit[:0:0]
	for _, n := range fit {
		if c := unsuited(n, m.pc.pinned); c != "" {
			reasons[n.Name] = "allocated claim " + c + " is not available on the node"
			continue
		}
		if !gang.InDomain(n.Labels, v.domain) {
			reasons[n.Name] = "node(s) outside the domain of the gang's running pods"
			continue
		}
		out = append(out, n)
	}
	return lastTried(out, avoid), reasons
}

// together checks the members' chosen nodes for room when they run side
// by side (placement.Together); it returns the member that does not fit
// and why, or -1.
func (v *gangView) together(unit []*gangMember, res []allocator.MemberResult) (int, string) {
	pods := make([]*corev1.Pod, len(unit))
	nodes := make([]*corev1.Node, len(unit))
	for i, m := range unit {
		pods[i] = m.pod
		nodes[i] = v.nodes[res[i].Node]
	}
	return placement.Together(pods, nodes, v.byNode)
}

// gangAnnotations keeps, of a pod's annotations, those of its gang
// declaration (the pod cache drops the others).
func gangAnnotations(in map[string]string) map[string]string {
	var out map[string]string
	for _, k := range []string{gang.AnnotationMinCount, gang.AnnotationTopologyKey, gang.AnnotationMatchAttribute} {
		if v, ok := in[k]; ok {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

func metaNow(t time.Time) metav1.Time { return metav1.NewTime(t) }
