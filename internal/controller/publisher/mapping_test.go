package publisher

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/stack"
	"github.com/drastack/drastack/internal/topology"
)

// placed renders a HostMap as "coords=node/hostname" lines, sorted, so
// that expectations read as a list of positions.
func placed(hm topology.HostMap, dims int) []string {
	var out []string
	for c, h := range hm.Hosts {
		host := h.Hostname
		if host == "" {
			host = h.Node
		}
		out = append(out, fmt.Sprintf("%s=%s/%s", topology.FormatCoords(c, dims), h.Node, host))
	}
	slices.Sort(out)
	return out
}

// reasons returns the reason of every problem line.
func reasons(problems []string) []string {
	out := make([]string, len(problems))
	for i, p := range problems {
		out[i], _, _ = strings.Cut(p, ":")
	}
	return out
}

func TestMapEntry(t *testing.T) {
	cordoned := func(n *corev1.Node) { n.Spec.Unschedulable = true }
	deleting := func(n *corev1.Node) { n.DeletionTimestamp = &metav1.Time{} }
	hostname := func(h string) func(*corev1.Node) {
		return func(n *corev1.Node) { n.Labels[corev1.LabelHostname] = h }
	}
	noHostname := func(n *corev1.Node) { delete(n.Labels, corev1.LabelHostname) }
	unselected := func(n *corev1.Node) { delete(n.Labels, poolSelector) }
	smallGrid := func(e *v1alpha1.MultiHostSpec) {
		e.HostGrid = []int32{2}
		e.ChipsPerHost = []int32{1}
		e.Partitions = []string{"1", "2"}
	}

	tests := []struct {
		name  string
		entry v1alpha1.MultiHostSpec
		nodes []corev1.Node
		// pools maps pool name to its placed hosts ("coords=node/hostname").
		pools map[string][]string
		// hostProblems are the reasons BuildHosts found, per pool.
		hostProblems map[string][]string
		problems     []string // reasons of EntryPlan.Problems
		invalid      string   // substring of EntryPlan.Invalid
	}{
		{
			name:  "one pool per domain value, hosts at their coordinates",
			entry: entry(smallGrid),
			nodes: []corev1.Node{node("b1", "b", "1"), node("a0", "a", "0"), node("a1", "a", "1"), node("b0", "b", "0")},
			pools: map[string][]string{
				"tpu-a": {"0=a0/a0", "1=a1/a1"},
				"tpu-b": {"0=b0/b0", "1=b1/b1"},
			},
		},
		{
			name:  "the hostname label is what multi-host devices select on; the node name is the default",
			entry: entry(smallGrid),
			nodes: []corev1.Node{node("a0", "a", "0", hostname("host-a0.example")), node("a1", "a", "1", noHostname)},
			pools: map[string][]string{"tpu-a": {"0=a0/host-a0.example", "1=a1/a1"}},
		},
		{
			name:  "nodes outside the nodeSelector are not hosts",
			entry: entry(smallGrid),
			nodes: []corev1.Node{node("a0", "a", "0"), node("a1", "a", "1", unselected)},
			pools: map[string][]string{"tpu-a": {"0=a0/a0"}},
		},
		{
			name:  "without a nodeSelector every node with the domain label is a candidate, others are silently skipped",
			entry: entry(smallGrid, func(e *v1alpha1.MultiHostSpec) { e.NodeSelector = nil }),
			nodes: []corev1.Node{node("a0", "a", "0", unselected), node("cpu", "", "")},
			pools: map[string][]string{"tpu-a": {"0=a0/a0"}},
		},
		{
			name:     "a node matching an explicit selector without a domain label is reported",
			entry:    entry(smallGrid),
			nodes:    []corev1.Node{node("a0", "a", "0"), node("lost", "", "1")},
			pools:    map[string][]string{"tpu-a": {"0=a0/a0"}},
			problems: []string{ReasonMissingDomainLabel},
		},
		{
			name:     "a cordoned node leaves its position empty and says why",
			entry:    entry(smallGrid),
			nodes:    []corev1.Node{node("a0", "a", "0"), node("a1", "a", "1", cordoned)},
			pools:    map[string][]string{"tpu-a": {"0=a0/a0"}},
			problems: []string{ReasonNodeUnschedulable},
		},
		{
			name:     "a node being deleted is no host either",
			entry:    entry(smallGrid),
			nodes:    []corev1.Node{node("a0", "a", "0", deleting), node("a1", "a", "1")},
			pools:    map[string][]string{"tpu-a": {"1=a1/a1"}},
			problems: []string{ReasonNodeUnschedulable},
		},
		{
			name:     "a domain whose only node is cordoned still has a pool, with no host",
			entry:    entry(smallGrid),
			nodes:    []corev1.Node{node("a0", "a", "0", cordoned)},
			pools:    map[string][]string{"tpu-a": nil},
			problems: []string{ReasonNodeUnschedulable},
		},
		{
			name:  "bad, duplicate and out-of-grid coordinates are host problems of the pool",
			entry: entry(smallGrid),
			nodes: []corev1.Node{
				node("a0", "a", "0"), node("x", "a", "0"), node("far", "a", "7"), node("junk", "a", "one"),
			},
			pools:        map[string][]string{"tpu-a": nil},
			hostProblems: map[string][]string{"tpu-a": {"CoordinatesOutOfGrid", "DuplicateCoordinates", "InvalidCoordinates"}},
		},
		{
			name:     "no selected node carries the domain label",
			entry:    entry(smallGrid),
			nodes:    []corev1.Node{node("cpu", "", "", unselected)},
			pools:    map[string][]string{},
			problems: []string{ReasonNoNodes},
		},
		{
			name: "an unparsable nodeSelector makes the entry invalid",
			entry: entry(smallGrid, func(e *v1alpha1.MultiHostSpec) {
				e.NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Near"}}}
			}),
			nodes:    []corev1.Node{node("a0", "a", "0")},
			pools:    map[string][]string{},
			problems: []string{ReasonInvalidNodeSelector},
			invalid:  "Near",
		},
		{
			name:     "a host grid topology cannot hold makes the entry invalid",
			entry:    entry(func(e *v1alpha1.MultiHostSpec) { e.HostGrid = []int32{1, 2, 3, 4} }),
			nodes:    []corev1.Node{node("a0", "a", "0.0.0.0")},
			pools:    map[string][]string{},
			problems: []string{ReasonInvalidTopology},
			invalid:  "host grid",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := MapEntry(&tt.entry, tt.nodes)
			if !strings.Contains(plan.Invalid, tt.invalid) || (tt.invalid == "") != (plan.Invalid == "") {
				t.Errorf("Invalid = %q, want it to contain %q", plan.Invalid, tt.invalid)
			}
			if got := reasons(plan.Problems); !slices.Equal(got, tt.problems) {
				t.Errorf("problem reasons = %v, want %v\n%s", got, tt.problems, strings.Join(plan.Problems, "\n"))
			}
			var names []string
			for _, p := range plan.Pools {
				names = append(names, p.Spec.Pool)
				if p.Spec.Driver != tt.entry.Driver || p.Spec.Domain != p.Domain || stack.PoolName(tt.entry.Name, p.Domain) != p.Spec.Pool {
					t.Errorf("pool %s: driver %q, domain %q/%q: not derived from the entry", p.Spec.Pool, p.Spec.Driver, p.Domain, p.Spec.Domain)
				}
				if got, want := placed(p.Spec.Hosts, len(tt.entry.HostGrid)), tt.pools[p.Spec.Pool]; !slices.Equal(got, want) {
					t.Errorf("pool %s hosts = %v, want %v", p.Spec.Pool, got, want)
				}
				var hp []string
				for _, pr := range p.Spec.Hosts.Problems {
					hp = append(hp, string(pr.Reason))
				}
				if want := tt.hostProblems[p.Spec.Pool]; !slices.Equal(hp, want) {
					t.Errorf("pool %s host problems = %v, want %v", p.Spec.Pool, hp, want)
				}
			}
			if want := slices.Sorted(maps.Keys(tt.pools)); !slices.Equal(names, want) {
				t.Errorf("pools = %v, want %v (sorted)", names, want)
			}
		})
	}
}

// TestMapEntryCopiesTheSpec checks that everything topology needs comes
// from the entry, and that the plan does not alias the entry's slices and
// maps (the reconciler hands plans to goroutines of the library).
func TestMapEntryCopiesTheSpec(t *testing.T) {
	tests := []struct {
		name   string
		policy v1alpha1.MissingHostPolicy
		want   topology.MissingHostPolicy
	}{
		{"empty policy is Withhold", "", topology.Withhold},
		{"Withhold", v1alpha1.MissingHostWithhold, topology.Withhold},
		{"PublishAvailable", v1alpha1.MissingHostPublishAvailable, topology.PublishAvailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := entry(func(e *v1alpha1.MultiHostSpec) {
				e.MissingHostPolicy = tt.policy
				e.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"generation": {StringValue: ptr.To("v5e")}}
			})
			plan := MapEntry(&e, domainNodes("a"))
			if len(plan.Pools) != 1 {
				t.Fatalf("pools = %d, want 1", len(plan.Pools))
			}
			s := plan.Pools[0].Spec
			if s.MissingHosts != tt.want {
				t.Errorf("MissingHosts = %q, want %q", s.MissingHosts, tt.want)
			}
			if !slices.Equal(s.HostGrid, []int{2, 4}) || !slices.Equal(s.ChipsPerHost, []int{2, 2}) || !slices.Equal(s.Partitions, e.Partitions) {
				t.Errorf("grid %v, chips %v, partitions %v: not the entry's", s.HostGrid, s.ChipsPerHost, s.Partitions)
			}
			e.Partitions[0] = "changed"
			e.Attributes["generation"] = resourceapi.DeviceAttribute{StringValue: ptr.To("changed")}
			if s.Partitions[0] == "changed" || *s.Attributes["generation"].StringValue == "changed" {
				t.Errorf("the plan aliases the entry's partitions or attributes")
			}
		})
	}
}
